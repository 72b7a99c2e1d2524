"""The protocol's parameters, validated once when the controller is built."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError


def _require_int(field: str, value: object, minimum: int) -> None:
    # bool is an int subclass; True as a batch size is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, value, f"must be an int >= {minimum}")
    if value < minimum:
        raise ConfigError(field, value, f"must be >= {minimum}")


@dataclass(frozen=True)
class Config:
    """Parameters of one Reserve–Occupy controller.

    ``max_staleness`` (eta): a unit admitted at version v trains at a version in [v, v + eta];
    0 is synchronous RL. ``batch_size`` (B): units per training batch. ``capacity`` (C): slots per
    buffer, default B; C > B turns on batch-level oversampling (source 7.6). ``max_concurrency``:
    at most this many units in flight (reserved) at once; None means only the slots bound it.
    """

    max_staleness: int
    batch_size: int
    capacity: int | None = None
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        _require_int("max_staleness", self.max_staleness, 0)
        _require_int("batch_size", self.batch_size, 1)
        if self.capacity is None:
            object.__setattr__(self, "capacity", self.batch_size)
        else:
            _require_int("capacity", self.capacity, 1)
            if self.capacity < self.batch_size:
                raise ConfigError(
                    "capacity", self.capacity, f"must be >= batch_size ({self.batch_size})"
                )
        if self.max_concurrency is not None:
            _require_int("max_concurrency", self.max_concurrency, 1)

    @property
    def eta(self) -> int:
        """Short name for ``max_staleness``, as in the source."""
        return self.max_staleness

    @property
    def oversampling(self) -> bool:
        """True when buffers have spare slots (capacity > batch_size)."""
        return self.capacity > self.batch_size  # type: ignore[operator]
