"""What the driver calls on its controller, declared: the ``Controller`` Protocol, and
``make_controller``, which builds the one ``staleness.policy`` names (outside the driver, which
takes the controller it is given).

Two classes answer ``Controller``: the verified Reserve–Occupy controller as the runtime runs it
(``runtime.recovery.journal.JournaledController``: the core's ``StalenessController`` whose
operations take the ``meta`` their event is logged with), and a peer's rule
(``runtime.peers.PeerController``). The last seven calls are the peers': a rule may drop or
abort units of its own choice at a ``consume`` or ``publish`` (``take_dropped``,
``take_aborted``), admit at them (``take_admission_moved``), keep a timer (``timer``,
``fire_timer``) and take a finished group without gradient to discard at its next sample
(``keeps_no_gradient``, ``occupy_no_gradient``). Reserve–Occupy answers them empty (it keeps
no such group: the driver aborts it, ``occupy_no_gradient`` is refused): what its controller
aborts comes back in the answer of the operation that aborted it (``Removal.aborted``,
``release_stuck``), it admits only when asked (``reserve``), and its one clock, the STUCK
timeout, is the driver's (``reserve_occupy.stuck``). So the driver calls every member on every
controller and asks nothing of a controller's type; nor do the run's counts and its written log
(``runtime.accounting``, ``runtime.session``), which read ``events``, ``metas`` and
``trace_records``.

``snapshot`` is not here: only the STUCK rule (``reserve_occupy.stuck.StuckTimeouts``) reads
it, and only while the head buffer is STUCK, which a peer's head never is (a peer has no STUCK
state). tests/runtime/test_controller_interface.py checks both classes against this Protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from reserve_occupy import Batch, BufferStatus, Event, Placement, Removal, Reservation, UnitState
from reserve_occupy.types import BatchUnit, UnitId

from .peers import RESERVE_OCCUPY, PeerController
from .records import DriverSettings
from .recovery.journal import JournaledController

Meta = dict[str, Any] | None  # logged with the operation's event (why, which prompt)


class Controller(Protocol):
    """Every call ``runtime.driver.Driver`` makes on its controller."""

    # ------------------------------------------------------------------ state ----------------

    @property
    def version(self) -> int:
        """The published weight version."""
        ...

    @property
    def head(self) -> int:
        """The buffer the trainer consumes next (its version)."""
        ...

    @property
    def head_status(self) -> BufferStatus | None:
        ...

    @property
    def release_action(self) -> str | None:
        """What ``release_stuck`` would do now (``StalenessController.release_action``:
        ``staleness.stuck_action`` within its threshold, else ``release``; None: nothing to
        release). A peer's rule has no STUCK state: None."""
        ...

    @property
    def events(self) -> Sequence[Event]:
        """The event log, in order (the run's counts are derived from it)."""
        ...

    def events_since(self, seq: int) -> Sequence[Event]:
        ...

    @property
    def event_count(self) -> int:
        """How many events were logged, forgotten ones included (the next event's seq)."""
        ...

    def forget_events(self, before: int) -> None:
        """Drop the events below ``before`` (and their metas) from memory: a durable run's
        driver calls it once a step, once its counts have read them, as the file holds them
        (``StalenessController.forget_events``); ``events`` then raises ``EventsForgotten``."""
        ...

    @property
    def metas(self) -> dict[int, dict[str, Any]]:
        """The meta each operation was called with (why a unit was aborted, which prompt a
        reservation drew), by its event's ``seq``, for the events that had one."""
        ...

    def trace_records(self, producer: str | None = None) -> Iterator[dict[str, Any]]:
        """The log in the trace format (``reserve_occupy.trace``): the header (a peer's with
        its ``x_policy``), then every event, each with its meta."""
        ...

    def unit_state(self, unit_id: UnitId) -> UnitState:
        ...

    def check(self) -> None:
        """Raise ``InvariantViolation`` if the controller's state is inconsistent."""
        ...

    # ------------------------------------------------------------------ operations -----------

    def reserve(self, unit_id: UnitId, meta: Meta = None) -> Reservation | None:
        ...

    def occupy(self, unit_id: UnitId, meta: Meta = None) -> Placement:
        ...

    def abort(self, unit_id: UnitId, meta: Meta = None) -> Removal:
        ...

    def stream(self, meta: Meta = None) -> tuple[BatchUnit, ...]:
        ...

    def consume(self, meta: Meta = None) -> Batch | None:
        ...

    def publish(self, meta: Meta = None) -> object:
        ...

    def release_stuck(self, meta: Meta = None) -> Sequence[UnitId]:
        ...

    def drop_finished(self, unit_id: UnitId, meta: Meta = None) -> Removal:
        """Drop a FINISHED unit not yet handed to the trainer: a unit a truncating STUCK
        release placed (``staleness.stuck_action=truncate``) whose reward, computed after the
        placement, failed or carries no gradient (Reserve–Occupy: the core's ``filter``). A
        peer's rule never truncates: it refuses."""
        ...

    # ------------------------------------------------------------------ the peers' calls ------

    @property
    def timer(self) -> float:
        """When the rule's timer is due on the driver's clock (``math.inf``: none)."""
        ...

    def fire_timer(self) -> None:
        """The driver's watchdog reached ``timer``."""
        ...

    def take_dropped(self) -> list[UnitId]:
        """Finished units the rule dropped since the last call (the driver forgets them)."""
        ...

    def take_aborted(self) -> list[UnitId]:
        """In-flight units the rule aborted since the last call (the driver stops them)."""
        ...

    def take_admission_moved(self) -> bool:
        """Whether admission may have opened since the last call (a consume that returned a
        batch, or one that admitted groups or moved the timer): the driver wakes admission."""
        ...

    @property
    def keeps_no_gradient(self) -> bool:
        """Whether a finished group whose rewards carry no gradient goes to the controller
        (``occupy_no_gradient``; its rule discards it at its next sample, as verl does) rather
        than being aborted by the driver when it finishes (reason ``no_gradient``).
        Reserve–Occupy: False."""
        ...

    def occupy_no_gradient(self, unit_id: UnitId, meta: Meta = None) -> Placement:
        """Occupy a finished group without gradient, marked so: only where
        ``keeps_no_gradient``; refused (``IllegalOperation``, nothing changed) elsewhere."""
        ...


def make_controller(settings: DriverSettings, now: Callable[[], float]) -> Controller:
    """The controller ``settings.policy`` names: Reserve–Occupy's (``JournaledController``,
    no event log attached: a durable run's comes from ``RunStore``) or a peer's rule, whose
    timer reads ``now`` (the driver's clock)."""
    if settings.policy == RESERVE_OCCUPY:
        return JournaledController(settings.controller_config())
    return PeerController(settings.policy, settings.controller_config(), settings.group_size,
                          now=now, chunk_groups=settings.chunk_groups)
