"""GRPO groups as units (spec/PROTOCOL.md §6.4) with group-level oversampling (§6.5).

A group takes one slot: the runtime reserves the group's id when it admits the prompt and
occupies it only when ``Group`` says the group is complete. With oversampling the group launches
``candidates > size`` generations, commits the first ``size`` to finish and tells the runtime
which candidates are surplus (to abort in the engine). Failed candidates count against the group:
once fewer than ``size`` can still finish, the group has failed and the runtime aborts its unit.
Pure bookkeeping: no engine, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import GroupError
from .types import UnitId


@dataclass(frozen=True)
class GroupProgress:
    """What the runtime must do after a candidate reported.

    ``complete``: occupy the group's unit now. ``failed``: abort the group's unit. ``surplus``:
    candidates still running that the runtime should abort in the engine (only newly surplus ones
    are listed, so each is aborted once).
    """

    complete: bool
    failed: bool
    surplus: tuple[int, ...] = ()


class Group:
    """Progress of one GRPO group's candidates, indexed 0 .. candidates-1."""

    def __init__(self, unit_id: UnitId, size: int, candidates: int | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise GroupError(f"group {unit_id!r}: size must be an int >= 1, got {size!r}")
        n = size if candidates is None else candidates
        if isinstance(n, bool) or not isinstance(n, int) or n < size:
            raise GroupError(f"group {unit_id!r}: candidates must be an int >= size ({size}), "
                             f"got {candidates!r}")
        self.unit_id = unit_id
        self.size = size
        self.candidates = n
        self._running = set(range(n))
        self._committed: list[int] = []
        self._failed: set[int] = set()
        self._surplus: set[int] = set()

    @property
    def committed(self) -> tuple[int, ...]:
        """Candidates that make up the group, in the order they finished."""
        return tuple(self._committed)

    @property
    def complete(self) -> bool:
        return len(self._committed) == self.size

    @property
    def failed(self) -> bool:
        return len(self._committed) + len(self._running) < self.size

    @property
    def running(self) -> tuple[int, ...]:
        return tuple(sorted(self._running))

    def _take(self, candidate: int, what: str) -> None:
        if self.complete or self.failed:
            raise GroupError(f"group {self.unit_id!r} is closed; candidate {candidate} {what}")
        if candidate not in self._running:
            if isinstance(candidate, int) and 0 <= candidate < self.candidates:
                raise GroupError(f"group {self.unit_id!r}: candidate {candidate} already reported")
            raise GroupError(f"group {self.unit_id!r}: no candidate {candidate!r}")
        self._running.discard(candidate)

    def _progress(self) -> GroupProgress:
        surplus: tuple[int, ...] = ()
        if self.complete or self.failed:
            surplus = tuple(sorted(self._running))
            self._surplus.update(self._running)
            self._running.clear()
        return GroupProgress(self.complete, self.failed, surplus)

    def finish(self, candidate: int) -> GroupProgress:
        """Candidate finished (with its reward computed)."""
        self._take(candidate, "finished")
        self._committed.append(candidate)
        return self._progress()

    def fail(self, candidate: int) -> GroupProgress:
        """Candidate failed (engine error, bad reward, timeout)."""
        self._take(candidate, "failed")
        self._failed.add(candidate)
        return self._progress()
