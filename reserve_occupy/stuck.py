"""When the STUCK timeout releases, and what a release escalates to: the progress rule of
``release_stuck`` (spec/PROTOCOL.md §6.2, "Progress of the timeout"), one rule for the runtime's
driver, the simulator's Reserve–Occupy policy and the framework plugins.

The protocol's STUCK timeout releases the reservations of a STUCK head buffer after the trainer
has waited ``T`` on it. Alone it can livelock: units that never finish in a *later* buffer keep
their engine slots, the re-admitted head units cannot finish (or even start) before the next
release, and release and re-admission repeat forever. Two rules close that, both bookkeeping
around operations the controller already has (``release_stuck`` and ``abort``):

* **back-off**: ``T_eff = T * 2**r``, where ``r`` counts the releases in a row that were
  followed by no progress: no unit placed (``occupy``) and no batch consumed since the previous
  release. A release that changed nothing does not repeat unchanged: each one doubles the wait
  until the re-admitted work can finish; the first progress puts ``r`` back to 0;
* **escalation**: from the third fruitless release in a row on (``ESCALATE_AFTER``), a release
  also aborts every unit, in any buffer, that has been in flight since before the previous
  release. Such a unit outlived a whole window (already ``4 T`` long) in which the head gained
  nothing, holding an engine slot the head's work may need (a hung generation in a later
  buffer is one); aborting it frees the slot. Escalating at the first fruitless release also
  ends every livelock the fault harness found, but in runs with long stragglers it aborts
  long generations that back-off alone would have let finish (measured with the simulator's
  timeout study, one seed, 40 batches: at eta 1, 10 % of responses at the length cap,
  T = 120 s, 78 % of the tokens wasted instead of 48 %); after three, those runs are as with
  back-off alone.

In a run where every release is followed by a placement neither rule ever acts, so the
source protocol's behaviour (and every result measured with it) is unchanged there.

Progress is read from the controller's counts (``progress_mark``): an abort or a release that
aborts never changes them, an ``occupy``, a ``consume`` or a release that truncates
(``Config.stuck_action="truncate"``: it places units) always does. Nothing here reads a clock: the caller
passes the times (the driver its clock, the simulator its simulated time, a plugin
``time.monotonic`` or the clock it was given).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .types import BufferStatus, UnitId, UnitState

MAX_BACKOFF = 40  # T * 2**40: longer than any run, and still a finite float
ESCALATE_AFTER = 3  # fruitless releases in a row before a release escalates (see above)


def progress_mark(controller: Any) -> tuple[int, int]:
    """(head buffer, units ever placed): changes with every ``occupy``, every ``consume`` and
    every truncating ``release_stuck``, never with an ``abort``, a ``filter`` or a
    ``release_stuck`` that aborts."""
    s = controller.snapshot()
    return s.head, s.admitted - s.aborted - s.in_flight


class StuckTimeouts:
    """The STUCK timeout in force, and which units a release escalates to. ``base``: the
    configured STUCK timeout in seconds (``math.inf``: off).

    A caller with its own notion of "the trainer waits" (the driver, the simulator) runs the
    STUCK clock itself and calls ``refresh`` when it starts; a caller that polls (the plugins)
    asks ``due`` at each poll and ``reset``s after a consume or a release. Either way it calls
    ``released`` after every ``release_stuck`` that released something and aborts what the
    returned cut-off names (``escalation``)."""

    def __init__(self, base: float) -> None:
        self.base = base
        self.fruitless = 0  # releases in a row followed by no progress
        self.since: float | None = None  # ``due``: when the head was first seen STUCK
        self._mark: tuple[int, int] | None = None  # progress_mark at the last release
        self._last: float | None = None  # time of the last release

    @property
    def timeout(self) -> float:
        """The STUCK timeout in force: ``T * 2**r``."""
        return self.base * 2.0 ** min(self.fruitless, MAX_BACKOFF)

    def refresh(self, controller: Any) -> None:
        """Progress since the last release puts the back-off back to 0 (called when the STUCK
        clock starts, so a release after progress waits ``T`` again)."""
        if self.fruitless and progress_mark(controller) != self._mark:
            self.fruitless = 0

    def released(self, controller: Any, now: float) -> float | None:
        """A release happened at ``now``. Returns the escalation cut-off: when this is the
        ``ESCALATE_AFTER``-th (or later) release in a row with no progress since the one
        before, units in flight since before that release's time are to be aborted (``None``:
        no escalation)."""
        mark = progress_mark(controller)
        cutoff = self._last if mark == self._mark else None
        self.fruitless = self.fruitless + 1 if cutoff is not None else 0
        self._mark, self._last = mark, now
        return cutoff if self.fruitless >= ESCALATE_AFTER else None

    # ---------------------------------------------------------------- for a polling caller ---

    def due(self, controller: Any, now: float) -> bool:
        """The STUCK clock for a caller that polls while the trainer waits: it starts at the
        first ``now`` the head buffer is seen STUCK (``refresh``) and stops when it is not;
        true once the head has been STUCK for the timeout in force."""
        if controller.head_status is not BufferStatus.STUCK:
            self.since = None
            return False
        if self.since is None:
            self.since = now
            self.refresh(controller)
            return False
        return now >= self.since + self.timeout  # a sum, as a deadline: no float drift at it

    def reset(self) -> None:
        """A consume or a release happened: the next STUCK wait starts from scratch."""
        self.since = None


def escalation(controller: Any, admitted_at: Mapping[UnitId, float],
               cutoff: float) -> list[UnitId]:
    """The units a release with this cut-off aborts: in flight and admitted before ``cutoff``
    (``admitted_at``: each unit's admission time, on the clock ``released`` was given; units
    the controller no longer knows as in flight are left out), in admission-time order."""
    return [u for u, t in sorted(admitted_at.items(), key=lambda kv: kv[1])
            if t < cutoff and controller.unit_state(u) is UnitState.IN_FLIGHT]
