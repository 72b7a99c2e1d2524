"""The protocol's parameters, validated once when the controller is built.

The controller keeps ``eta + 1`` buffers of ``capacity`` slots open at all times (``table.py``
allocates them when it opens a buffer), so a ``Config`` fixes the controller's memory. A config
usually comes from a file someone else wrote (a trace header, a run's config), so it is bounded
here, before anything is allocated:

* ``max_staleness <= MAX_STALENESS`` (1024): asynchronous RL uses single digits;
* ``batch_size <= capacity <= MAX_BATCH_SIZE`` (1,000,000 units per batch);
* ``(max_staleness + 1) * capacity <= MAX_SLOTS`` (1,000,000 open slots, about 16 MB of slot
  arrays): the product is what is allocated, so it is bounded too.

``max_concurrency`` allocates nothing and has no upper bound; ``streaming`` is a flag.
``stuck_action`` is one of ``STUCK_ACTIONS``; ``stuck_threshold`` (None, or 1 .. batch_size)
goes with ``retry`` and ``truncate`` only (spec/PROTOCOL.md §6.2, "Options of the release").
docs/cli.md lists these limits with the command-line ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError

MAX_STALENESS = 1024
MAX_BATCH_SIZE = 1_000_000
MAX_SLOTS = 1_000_000
# What release_stuck does to the STUCK head's reservations (spec/PROTOCOL.md §6.2): "release"
# aborts them (the source protocol, the default); "retry" aborts them and tells the caller to
# re-admit the same prompts; "truncate" occupies them with their partial output.
STUCK_ACTIONS = ("release", "retry", "truncate")


def _require_int(field: str, value: object, minimum: int, maximum: int | None = None) -> None:
    # bool is an int subclass; True as a batch size is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, value, f"must be an int >= {minimum}")
    if value < minimum:
        raise ConfigError(field, value, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(field, value, f"must be <= {maximum:,} (the controller allocates "
                                        f"its slots up front; see reserve_occupy/config.py)")


@dataclass(frozen=True)
class Config:
    """Parameters of one Reserve–Occupy controller.

    ``max_staleness`` (eta): a unit admitted at version v trains at a version in [v, v + eta];
    0 is synchronous RL. ``batch_size`` (B): units per training batch. ``capacity`` (C): slots per
    buffer, default B; C > B turns on batch-level oversampling (spec §6.6). ``max_concurrency``:
    at most this many units in flight (reserved) at once; None means only the slots bound it.
    ``streaming``: the trainer may take the head buffer's finished units before it is READY
    (``StalenessController.stream``, spec/PROTOCOL.md §3.8); off, the source protocol.
    ``stuck_action``: what ``release_stuck`` does to the STUCK head's reservations when at most
    ``stuck_threshold`` of its ``batch_size`` units are missing (None: whatever is missing):
    ``"release"`` (the source protocol, the default: abort), ``"retry"`` (abort; the caller
    re-admits the same prompts as new units) or ``"truncate"`` (occupy them with what they
    generated so far); with more missing, the release aborts (spec/PROTOCOL.md §6.2).
    Limits: see the module docstring (``MAX_STALENESS``, ``MAX_BATCH_SIZE``, ``MAX_SLOTS``).
    """

    max_staleness: int
    batch_size: int
    capacity: int | None = None
    max_concurrency: int | None = None
    streaming: bool = False
    stuck_action: str = "release"
    stuck_threshold: int | None = None

    def __post_init__(self) -> None:
        _require_int("max_staleness", self.max_staleness, 0, MAX_STALENESS)
        _require_int("batch_size", self.batch_size, 1, MAX_BATCH_SIZE)
        if self.capacity is None:
            object.__setattr__(self, "capacity", self.batch_size)
        else:
            _require_int("capacity", self.capacity, 1, MAX_BATCH_SIZE)
            if self.capacity < self.batch_size:
                raise ConfigError(
                    "capacity", self.capacity, f"must be >= batch_size ({self.batch_size})"
                )
        slots = (self.max_staleness + 1) * self.capacity  # type: ignore[operator]
        if slots > MAX_SLOTS:
            which = "capacity" if self.capacity != self.batch_size else "batch_size"
            raise ConfigError(
                which, getattr(self, which),
                f"(max_staleness + 1) * capacity = {slots:,} open slots is more than "
                f"{MAX_SLOTS:,} (the controller allocates them up front; see "
                f"reserve_occupy/config.py)")
        if self.max_concurrency is not None:
            _require_int("max_concurrency", self.max_concurrency, 1)
        if not isinstance(self.streaming, bool):
            raise ConfigError("streaming", self.streaming, "must be True or False")
        if not isinstance(self.stuck_action, str) or self.stuck_action not in STUCK_ACTIONS:
            raise ConfigError("stuck_action", self.stuck_action,
                              "must be one of " + ", ".join(map(repr, STUCK_ACTIONS)))
        if self.stuck_threshold is not None:
            if self.stuck_action == "release":
                raise ConfigError("stuck_threshold", self.stuck_threshold,
                                  "applies only with stuck_action 'retry' or 'truncate' "
                                  "(the release aborts whatever is missing)")
            _require_int("stuck_threshold", self.stuck_threshold, 1)
            if self.stuck_threshold > self.batch_size:  # type: ignore[operator]
                raise ConfigError("stuck_threshold", self.stuck_threshold,
                                  f"must be <= batch_size ({self.batch_size}): it counts the "
                                  f"head buffer's units not yet finished")

    @property
    def eta(self) -> int:
        """Short name for ``max_staleness``, as in the source."""
        return self.max_staleness

    @property
    def oversampling(self) -> bool:
        """True when buffers have spare slots (capacity > batch_size)."""
        return self.capacity > self.batch_size  # type: ignore[operator]
