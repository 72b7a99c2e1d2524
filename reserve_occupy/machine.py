"""The Reserve–Occupy protocol as an explicit state machine.

Theory of operation
-------------------
Everything that decides *whether* an operation may run lives in two tables in this file:

* ``OPERATIONS`` -- the trainer-phase machine, declared as data and compiled once into a
  ``transitions.Machine`` (``auto_transitions=False``; a ``dispatch.LeanMachine``, whose
  triggers cost about a method call). States are the trainer's phases (IDLE,
  TRAINING); triggers are the protocol operations; each has a guard (a condition: when it fails the
  operation is *refused*, e.g. admission must wait) and an effect (runs after the guard passed). A
  trigger with no entry for the current phase raises ``IllegalOperation`` naming both.
* ``UNIT_LIFECYCLE`` -- what each operation requires of the unit it names, and what it makes of
  it. A unit that is not in the required state raises ``IllegalUnitState`` (or ``UnknownUnit``).

*Where* units go is the slot table's business (``table.SlotTable``): each placement rule is one of
its methods. The effects below only compose those rules in the order spec/PROTOCOL.md gives.

Every check runs before anything changes, so an error leaves the controller exactly as it was.
Every successful operation appends one ``Event`` with its full outcome; ``replay`` re-runs a log
and insists on the same outcomes. Units are plain ids in dictionaries -- one ``transitions`` model
per controller, never one per unit.

Unit records
------------
``_units`` maps every admitted unit to its lifecycle state, with one compression: a FINISHED unit
is recorded by the number of the buffer its OCCUPIED slot is in (an ``int``; it follows the unit
through the FILL moves of abort and filter -- occupy moves reservations only), and such a record
reads FINISHED while that buffer is open and CONSUMED once it was consumed -- buffers are consumed
strictly in order, so that is "below the controller's consumed watermark ``_consumed_below``".
Consume therefore ends a whole batch in O(1)
(the watermark and the consumed counter move; no unit record is written), where writing B
records cost the trainer about 15 µs at B = 256 (a cache miss per unit in a dictionary that holds
every unit ever admitted). ``_state_of`` and ``_unit_states`` read the records as states; every
public answer (``unit_state``, errors, ``snapshot``) goes through them. The watermark and the
counter are the controller's own, kept apart from the slot table: ``check`` verifies that the
watermark is the table's head, that every open record names the buffer whose ``pos`` holds the
unit, and that the records below the watermark are exactly ``consumed`` many.

With ``Config.streaming``, ``_streamed`` is the ordered set of the head buffer's units that
``stream`` handed to the trainer: such a unit's record is still its buffer's number (the head's),
and it reads STREAMED instead of FINISHED. Consume empties the set (those units end CONSUMED with
the rest of the batch, through the watermark). Without streaming the set stays empty and costs a
truth test per consume.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from transitions import MachineError

from .config import Config
from .dispatch import LeanMachine
from .errors import (
    DuplicateUnit,
    EventsForgotten,
    IllegalOperation,
    IllegalUnitState,
    InvalidUnitId,
    InvariantViolation,
    NotAnEvent,
    ReplayDivergence,
    UnknownUnit,
)
from .invariants import check_snapshot
from .table import RESERVED, SlotTable
from .types import (
    Batch,
    BatchUnit,
    BufferStatus,
    Event,
    Move,
    MoveReason,
    Phase,
    Placement,
    Removal,
    Reservation,
    SlotRef,
    Snapshot,
    UnitId,
    UnitState,
    UnitView,
)

IDLE, TRAINING = Phase.IDLE, Phase.TRAINING


@dataclass(frozen=True)
class Operation:
    """One row of the transition table: ``trigger`` is allowed from ``sources``, goes to ``dest``
    (None: stays), is refused while ``guard`` is false, and then runs ``effect``."""

    trigger: str
    sources: tuple[Phase, ...]
    dest: Phase | None
    guard: str | None
    effect: str
    doc: str


OPERATIONS: tuple[Operation, ...] = (
    Operation("reserve", (IDLE, TRAINING), None, "_can_reserve", "_do_reserve",
              "in-flight < max_concurrency and a legal, not-READY buffer has an EMPTY slot"),
    Operation("occupy", (IDLE, TRAINING), None, None, "_do_occupy",
              "the unit is IN_FLIGHT"),
    Operation("abort", (IDLE, TRAINING), None, None, "_do_abort",
              "the unit is IN_FLIGHT"),
    Operation("filter", (IDLE, TRAINING), None, None, "_do_filter",
              "the unit is FINISHED"),
    Operation("release_stuck", (IDLE,), None, "_head_stuck", "_do_release_stuck",
              "the head buffer is STUCK"),
    Operation("stream", (IDLE,), None, "_can_stream", "_do_stream",
              "Config.streaming; the head buffer holds an OCCUPIED unit not handed yet"),
    Operation("consume", (IDLE,), TRAINING, "_head_ready", "_do_consume",
              "the head buffer is READY"),
    Operation("publish", (TRAINING,), IDLE, None, "_do_publish",
              "the consumed batch finished training"),
)

# operation -> {state the unit must be in: state it goes to}. reserve admits new ids.
UNIT_LIFECYCLE: dict[str, dict[UnitState | None, UnitState]] = {
    "reserve": {None: UnitState.IN_FLIGHT},
    "occupy": {UnitState.IN_FLIGHT: UnitState.FINISHED},
    "abort": {UnitState.IN_FLIGHT: UnitState.ABORTED},
    "filter": {UnitState.FINISHED: UnitState.FILTERED},
    "stream": {UnitState.FINISHED: UnitState.STREAMED},
    "consume": {UnitState.FINISHED: UnitState.CONSUMED, UnitState.STREAMED: UnitState.CONSUMED},
}


def machine_config() -> dict[str, Any]:
    """``OPERATIONS`` as keyword arguments of ``transitions.Machine`` (one model-less machine
    shared by every controller; each trigger names the controller as its model).

    States are the phases' names rather than the enum members: transitions resolves an enum
    state's name on every trigger, which costs about a fifth of the hot path. Guards and effects
    are given by name, so they are looked up on the controller at each trigger and a subclass
    overriding one (the proofs' mutants) is honoured.
    """
    return dict(
        model=None,
        states=[p.value for p in Phase],
        initial=IDLE.value,
        auto_transitions=False,
        model_attribute="_phase",
        transitions=[
            {
                "trigger": op.trigger,
                "source": [p.value for p in op.sources],
                "dest": op.dest.value if op.dest else None,
                "conditions": [op.guard] if op.guard else [],
                "after": op.effect,
            }
            for op in OPERATIONS
        ],
    )


# LeanMachine is a transitions.Machine whose triggers skip the stock path's unused hooks and
# logging calls (reserve_occupy/dispatch.py says what is skipped and why the outcome is the
# same; tests/core/test_dispatch.py runs the protocol through a stock Machine side by side).
MACHINE = LeanMachine(**machine_config())
_TRIGGERS = {name: MACHINE.events[name] for name in MACHINE.events}


class StalenessController:
    """The Reserve–Occupy staleness controller (sans-I/O).

    The runtime calls ``reserve`` before a unit starts generating, ``occupy`` when it finished,
    ``abort``/``filter`` to drop it, ``consume`` when the trainer is idle, ``publish`` when the
    training step finished, ``release_stuck`` when its own clock says the head buffer waited too
    long; with ``Config.streaming``, ``stream`` while idle to start training the head buffer's
    finished units before it is READY. See spec/PROTOCOL.md for the rules and the invariants
    ``check`` verifies.
    """

    _phase: str  # the machine's model attribute: a Phase value

    def __init__(self, config: Config) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {type(config).__name__}")
        self.config = config
        self._phase = IDLE.value
        self._version = 0
        self._table = SlotTable(config)
        self._max_concurrency = config.max_concurrency
        # unit -> state, or for a FINISHED unit the buffer it sits in (see "Unit records")
        self._units: dict[UnitId, UnitState | int] = {}
        self._consumed_below = self._table.head  # buffers before this one were consumed
        self._streamed: dict[UnitId, None] = {}  # head units handed by stream (ordered set)
        self._in_flight = 0
        self._consumed = self._aborted = self._filtered = 0
        self._last_batch: Batch | None = None
        self._events: list[Event] = []
        self._forgotten = 0  # events numbered below this were dropped (forget_events)
        self._plan: SlotRef | None = None
        self._plan_stream: tuple[BatchUnit, ...] = ()
        self._result: Any = None

    # ----------------------------------------------------------------- read-only state ------

    @property
    def phase(self) -> Phase:
        """The trainer's phase: IDLE (waiting for a READY head buffer) or TRAINING."""
        return Phase(self._phase)

    @property
    def version(self) -> int:
        """Latest published weight version; new units are stamped with it."""
        return self._version

    @property
    def head(self) -> int:
        """Next buffer to consume (``version`` when idle, ``version + 1`` while training)."""
        return self._table.head

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def head_status(self) -> BufferStatus | None:
        """Status of the head buffer in O(1); None while training with eta = 0 (no open
        buffer). A runtime arms its timeout clock (spec §6.2) while this is STUCK and the
        trainer idle."""
        buf = self._table.head_buffer()
        return None if buf is None else self._table.status(buf)

    @property
    def release_action(self) -> str | None:
        """What ``release_stuck`` would do now (spec/PROTOCOL.md §6.2, "Options of the
        release"): None when it would be refused or raise (trainer training, head buffer not
        STUCK); else ``Config.stuck_action`` when at most ``Config.stuck_threshold`` of the
        head's ``batch_size`` units are missing (None: any number), and ``"release"`` when more
        are. A caller configured with ``retry`` reads it before releasing: ``"retry"`` says to
        re-admit the released units' prompts."""
        if self._phase != IDLE.value or not self._head_stuck():
            return None
        return self._stuck_choice(self._table.buffers[self._table.head])

    @property
    def events(self) -> tuple[Event, ...]:
        """The append-only event log (a copy); ``replay(config, events)`` rebuilds this state.
        Raises ``EventsForgotten`` once ``forget_events`` dropped any: a part of the log is not
        the log."""
        if self._forgotten:
            raise EventsForgotten("events", self._forgotten)
        return tuple(self._events)

    @property
    def last_event(self) -> Event | None:
        """The newest event in O(1) (a recorder streaming the log calls this per operation)."""
        return self._events[-1] if self._events else None

    @property
    def event_count(self) -> int:
        """How many events this controller logged (forgotten ones included): the next
        event's ``seq``."""
        return self._forgotten + len(self._events)

    @property
    def first_event(self) -> int:
        """The ``seq`` of the oldest event still held (0 until ``forget_events``)."""
        return self._forgotten

    def forget_events(self, before: int) -> None:
        """Drop the events numbered below ``before`` from memory; numbering goes on as before.

        The log is the controller's only state that grows with the run's length: about 0.85 KB
        per consumed unit at B = 256 (each event, its moves and each batch with the consumed
        buffer it keeps; docs/scale.md), 90 % of what the controller holds. A runtime that
        journals every event to a file (runtime.recovery) and has counted them keeps the file
        as the log and calls this once a step. Afterwards ``events`` raises
        ``EventsForgotten`` and ``events_since`` answers from ``first_event`` on; ``replay``
        needs the whole log, so it reads the file. The protocol's state is untouched (no
        operation reads the log). ``before`` must lie in ``first_event .. event_count``
        (``ValueError`` naming it, nothing dropped)."""
        self._forgotten = drop_events(self._events, self._forgotten, before)

    def events_since(self, seq: int) -> tuple[Event, ...]:
        """The events numbered ``seq`` and later, in O(new events): a reader that polls the
        log (a runtime counting once per step) takes what it has not seen yet without copying
        the whole log, as ``events`` does."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValueError(f"events_since takes an event number >= 0, got {seq!r}")
        if seq < self._forgotten:
            raise EventsForgotten(f"events_since({seq})", self._forgotten)
        return tuple(self._events[seq - self._forgotten:])

    def unit_state(self, unit_id: UnitId) -> UnitState:
        self._check_id("unit_state", unit_id)
        state = self._state_of(unit_id)
        if state is None:
            raise UnknownUnit("unit_state", unit_id)
        return state

    def snapshot(self) -> Snapshot:
        t = self._table
        versions = t.live_versions()
        below, streamed = self._consumed_below, self._streamed
        live = frozenset(
            UnitView(u, s if s is UnitState.IN_FLIGHT else
                     UnitState.STREAMED if u in streamed else UnitState.FINISHED,
                     versions.get(u))  # type: ignore[arg-type]
            for u, s in self._units.items()
            if s is UnitState.IN_FLIGHT
            or (s.__class__ is int and s >= below)  # type: ignore[operator]
        )
        return Snapshot(
            config=self.config,
            version=self._version,
            head=t.head,
            phase=self.phase,
            buffers=t.views(),
            units=live,
            admitted=len(self._units),
            consumed=self._consumed,
            aborted=self._aborted,
            filtered=self._filtered,
            last_batch=self._last_batch,
        )

    def check(self) -> None:
        """Raise ``InvariantViolation`` naming the first invariant that does not hold: the
        snapshot's (``invariants.INVARIANTS``), then the table's indexes
        (``SlotTable.check_indexes``), then this controller's own records against the table."""
        check_snapshot(self.snapshot())
        t = self._table
        t.check_indexes()
        states = self._unit_states()
        in_table = len(t.where) + sum(len(b.pos) for b in t.buffers.values())
        live = sum(1 for st in states.values()
                   if st in (UnitState.IN_FLIGHT, UnitState.FINISHED, UnitState.STREAMED))
        if in_table != live:
            raise InvariantViolation("conservation", "slot index and unit records disagree")
        if self.in_flight != sum(1 for st in states.values() if st is UnitState.IN_FLIGHT):
            raise InvariantViolation("conservation", "in-flight counter out of step")
        # A FINISHED unit is recorded by its buffer's number and reads CONSUMED once the
        # watermark passed it ("Unit records" above): the watermark, the records and the consumed
        # counter are kept apart from the table, so each is checked against it here.
        if self._consumed_below != t.head:
            raise InvariantViolation("conservation", f"consumed watermark "
                                                     f"{self._consumed_below} but head {t.head}")
        consumed = 0
        for u, rec in self._units.items():
            if rec.__class__ is not int:
                if not (rec is UnitState.IN_FLIGHT or rec is UnitState.ABORTED
                        or rec is UnitState.FILTERED):  # FINISHED and CONSUMED are never stored
                    raise InvariantViolation("conservation", f"unit {u!r} has record {rec!r}")
            elif rec < t.head:
                consumed += 1
            elif rec not in t.buffers or u not in t.buffers[rec].pos:
                raise InvariantViolation("conservation", f"finished unit {u!r} is recorded in "
                                                         f"buffer {rec}, not there")
        # The handed set is kept apart from the slots: each unit in it must still be a FINISHED
        # record of the head buffer and OCCUPIED there (the snapshot's ``streamed`` invariant
        # reads the STREAMED states this same set gives it).
        head_buf = t.buffers.get(t.head)
        for u in self._streamed:
            if self._units.get(u) != t.head or head_buf is None or u not in head_buf.pos:
                raise InvariantViolation("streamed", f"unit {u!r} was streamed but is not a "
                                                     f"finished unit of head buffer {t.head}")
        if self._streamed and self.phase is not Phase.IDLE:
            raise InvariantViolation("streamed", "units are streamed while the trainer trains")
        if consumed != self._consumed:
            raise InvariantViolation("conservation", f"{consumed} units recorded consumed, "
                                                     f"counter {self._consumed}")

    def clone(self) -> StalenessController:
        """An independent copy (model checkers branch on it). The event log is copied too."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._table = self._table.copy()
        other._units = dict(self._units)
        other._streamed = dict(self._streamed)
        other._events = list(self._events)
        return other

    # ----------------------------------------------------------------- operations -----------

    def reserve(self, unit_id: UnitId) -> Reservation | None:
        """Admission (L1): reserve the latest legal slot, or return None if the unit must wait."""
        self._check_id("reserve", unit_id)
        if unit_id in self._units:
            raise DuplicateUnit(unit_id, self._state_of(unit_id).value)  # type: ignore[union-attr]
        return self._result if self._fire("reserve", unit_id) else None

    def occupy(self, unit_id: UnitId) -> Placement:
        """The unit finished: place it in the earliest legal slot (shifting a reservation)."""
        self._require("occupy", unit_id)
        self._fire("occupy", unit_id)
        return self._result

    def abort(self, unit_id: UnitId) -> Removal:
        """Drop an in-flight unit (error, timeout, cancelled); its slot is refilled."""
        self._require("abort", unit_id)
        self._fire("abort", unit_id)
        return self._result

    def filter(self, unit_id: UnitId) -> Removal:
        """Drop a finished, unconsumed unit (e.g. no gradient); later finished units move up."""
        self._require("filter", unit_id)
        self._fire("filter", unit_id)
        return self._result

    def release_stuck(self) -> list[UnitId]:
        """The timeout action (spec §6.2): abort every reservation of a STUCK head buffer --
        or, with ``Config.stuck_action="truncate"`` and at most ``Config.stuck_threshold``
        units missing (``release_action``), occupy them with their partial output.

        The runtime owns the clock and calls this when the trainer has waited on a STUCK head
        buffer too long. Returns every unit whose generation the release ends (the runtime
        must stop generating them): the ones aborted, and with truncate first the ones
        truncated, which are FINISHED (``unit_state``) and whose partial output is their
        result; an empty list when the head buffer is not STUCK (nothing to release).
        """
        return self._result if self._fire("release_stuck") else []

    def stream(self) -> tuple[BatchUnit, ...]:
        """Hand the trainer the head buffer's OCCUPIED units it has not had yet, in slot order,
        each with the staleness it trains at (spec/PROTOCOL.md §3.8). They are STREAMED: they
        can no longer leave the head buffer, ``filter`` refuses them, and the next ``consume``
        returns them in its batch with the rest (``Batch.streamed`` names them). Returns ``()``
        and changes nothing when there is no new unit. Needs ``Config.streaming`` and an idle
        trainer (while training, the weights buffer ``head`` trains from do not exist yet)."""
        if not self.config.streaming:
            raise IllegalOperation("stream", self._phase,
                                   "Config.streaming is off (stream needs streaming=True)")
        return self._result if self._fire("stream") else ()

    def consume(self) -> Batch | None:
        """Hand out the head buffer's batch if it is READY (trainer must be idle)."""
        return self._result if self._fire("consume") else None

    def publish(self) -> int:
        """Training of the consumed batch finished: the version advances, the window grows."""
        self._fire("publish")
        return self._version

    # ----------------------------------------------------------------- validation ----------

    @staticmethod
    def _check_id(operation: str, unit_id: object) -> None:
        kind = type(unit_id)
        if kind is not str and kind is not int:  # exact types: fast, and bool is refused
            if isinstance(unit_id, bool) or not isinstance(unit_id, (str, int)):
                raise InvalidUnitId(operation, unit_id)

    def _state_of(self, unit_id: UnitId) -> UnitState | None:
        """The unit's lifecycle state from its record (None: never admitted)."""
        state = self._units.get(unit_id)
        if state.__class__ is int:  # a FINISHED unit's buffer: consumed with it, or still there
            if state >= self._consumed_below:  # type: ignore[operator]
                return UnitState.STREAMED if unit_id in self._streamed else UnitState.FINISHED
            return UnitState.CONSUMED
        return state  # type: ignore[return-value]

    def _unit_states(self) -> dict[UnitId, UnitState]:
        """Every admitted unit's state, in admission order (checks and proofs read this)."""
        below, finished, consumed = self._consumed_below, UnitState.FINISHED, UnitState.CONSUMED
        states = {u: (finished if s >= below else consumed)  # type: ignore[operator,misc]
                  if s.__class__ is int else s for u, s in self._units.items()}
        for u in self._streamed:
            if states.get(u) is finished:
                states[u] = UnitState.STREAMED
        return states

    def _require(self, operation: str, unit_id: UnitId) -> None:
        self._check_id(operation, unit_id)
        state = self._units.get(unit_id)
        if state is None:
            raise UnknownUnit(operation, unit_id)
        if state.__class__ is int:  # a finished unit's buffer (tested inline: hot path)
            state = self._state_of(unit_id)
        if state not in UNIT_LIFECYCLE[operation]:
            raise IllegalUnitState(operation, unit_id, state.value)

    def _fire(self, trigger: str, *args: object) -> bool:
        try:
            return _TRIGGERS[trigger].trigger(self, *args)
        except MachineError:
            raise IllegalOperation(trigger, self._phase) from None

    def _log(self, op: str, version: int, head: int, unit_id: UnitId | None = None,
             v_traj: int | None = None, slot: SlotRef | None = None, moves: tuple = (),
             aborted: tuple = (), batch: Batch | None = None) -> None:
        events = self._events
        events.append(Event(self._forgotten + len(events), op, version, head, unit_id, v_traj,
                            slot, moves, aborted, batch))

    def _end(self, unit_id: UnitId, operation: str) -> None:
        """Move a unit along its lifecycle to a final state and keep the counters in step."""
        record = self._units[unit_id]
        if record.__class__ is int:  # filter: a FINISHED unit's buffer
            record = self._state_of(unit_id)  # type: ignore[assignment]
        state = UNIT_LIFECYCLE[operation][record]  # type: ignore[index]
        self._units[unit_id] = state
        self._count(state, 1)

    def _finish(self, unit_id: UnitId, buffer: int) -> None:
        """Occupy's lifecycle edge: the unit becomes FINISHED and is recorded by ``buffer``, the
        buffer it was placed in (``check`` refuses FINISHED or CONSUMED stored as a state)."""
        state = UNIT_LIFECYCLE["occupy"][self._units[unit_id]]  # type: ignore[index]
        if state is not UnitState.FINISHED:
            raise AssertionError(f"occupy makes units {state.value}, recorded as FINISHED")
        self._units[unit_id] = buffer
        self._count(state, 1)

    def _end_batch(self, n: int, head: int) -> None:
        """Consume ended buffer ``head``'s ``n`` OCCUPIED units, which are FINISHED (the slot
        table holds OCCUPIED slots only for FINISHED units: conservation, which ``check``
        verifies) and recorded by that buffer's number. Advancing the watermark past it makes
        their records read as the operation's single lifecycle edge's target, CONSUMED, with no
        per-unit write (see "Unit records")."""
        edges = UNIT_LIFECYCLE["consume"]
        if (edges.get(UnitState.FINISHED) is not UnitState.CONSUMED
                or (self._streamed and edges.get(UnitState.STREAMED) is not UnitState.CONSUMED)
                or head != self._consumed_below):
            raise AssertionError(f"consume ends FINISHED units of buffer {self._consumed_below}")
        self._consumed_below = head + 1
        self._count(UnitState.CONSUMED, n)

    def _follow(self, moves: list[Move]) -> None:
        """A finished unit's record follows it: FILL moves OCCUPIED units to earlier buffers."""
        units = self._units
        for m in moves:
            if units[m.unit_id].__class__ is int:
                units[m.unit_id] = m.dst.buffer

    def _count(self, state: UnitState, n: int) -> None:
        """``n`` units reached ``state``: keep the in-flight and final-state counters in step."""
        if state is UnitState.ABORTED:
            self._in_flight -= n
            self._aborted += n
        elif state is UnitState.FINISHED:
            self._in_flight -= n
        elif state is UnitState.CONSUMED:
            self._consumed += n
        elif state is UnitState.FILTERED:
            self._filtered += n

    # ----------------------------------------------------------------- guards ---------------

    def _can_reserve(self, unit_id: UnitId) -> bool:
        if self._max_concurrency is not None and self._in_flight >= self._max_concurrency:
            return False
        self._plan = self._table.plan_reserve(self._version)
        return self._plan is not None

    def _head_ready(self) -> bool:
        buf = self._table.head_buffer()
        return buf is not None and self._table.ready(buf)

    def _can_stream(self) -> bool:
        self._plan_stream = self._table.stream_head(self._streamed)
        return bool(self._plan_stream)

    def _head_stuck(self) -> bool:
        buf = self._table.head_buffer()
        return buf is not None and not self._table.ready(buf) and not buf.n_empty

    def _stuck_choice(self, buf: Any) -> str:
        """The action of a release of the STUCK head ``buf`` (see ``release_action``)."""
        action, threshold = self.config.stuck_action, self.config.stuck_threshold
        if action == "release" or (threshold is not None
                                   and self.config.batch_size - buf.n_occ > threshold):
            return "release"
        return action

    # ----------------------------------------------------------------- effects --------------

    def _do_reserve(self, unit_id: UnitId) -> None:
        slot, version, head = self._plan, self._version, self._table.head
        self._table.reserve(unit_id, version, slot)  # type: ignore[arg-type]
        self._units[unit_id] = UnitState.IN_FLIGHT
        self._in_flight += 1
        self._result = Reservation(unit_id, version, slot)  # type: ignore[arg-type]
        self._log("reserve", version, head, unit_id, version, slot)

    def _occupy_steps(self, unit_id: UnitId
                      ) -> tuple[SlotRef, SlotRef, list[Move], list[UnitId]]:
        """Occupy's steps (a)-(d), shared by ``occupy`` and a truncating release: the
        reservation is released, earlier reservations shift into the gap, the unit is placed
        at the earliest legal empty slot and finishes there, and a buffer it makes READY is
        closed (the units that aborts end). Returns (the gap, the slot, the moves, the units
        aborted)."""
        t = self._table
        gap = t.release(unit_id)
        moves = t.shift_into(gap)
        slot = t.place(unit_id)
        aborted: list[UnitId] = []
        buf = t.buffers[slot.buffer]
        if t.ready(buf):
            closing_moves, aborted = t.close_ready(buf)
            moves.extend(closing_moves)
        # No _follow here: occupy's moves (shift, relabel, close) move reservations only, never a
        # finished unit (check() would see a record left behind).
        self._finish(unit_id, slot.buffer)
        for u in aborted:
            self._end(u, "abort")
        return gap, slot, moves, aborted

    def _do_occupy(self, unit_id: UnitId) -> None:
        head = self._table.head
        v_traj = self._table.v_traj[unit_id]
        _, slot, moves, aborted = self._occupy_steps(unit_id)
        moved, dropped = tuple(moves), tuple(aborted)
        self._result = Placement(unit_id, v_traj, slot, moved, dropped)
        self._log("occupy", self._version, head, unit_id, v_traj, slot, moved, dropped)

    def _abort_one(self, unit_id: UnitId) -> tuple[SlotRef, list[Move], list[UnitId]]:
        """Abort: free the slot as Occupy (a)+(b), then refill holes from later buffers."""
        t = self._table
        gap = t.release(unit_id)
        t.discard(unit_id)
        moves = t.shift_into(gap)
        fill_moves, aborted = t.fill_holes()
        moves.extend(fill_moves)
        self._follow(moves)
        self._end(unit_id, "abort")
        for u in aborted:
            self._end(u, "abort")
        return gap, moves, aborted

    def _do_abort(self, unit_id: UnitId) -> None:
        head = self._table.head
        gap, moves, aborted = self._abort_one(unit_id)
        self._result = Removal(unit_id, gap, tuple(moves), tuple(aborted))
        self._log("abort", version=self._version, head=head, unit_id=unit_id, slot=gap,
                  moves=tuple(moves), aborted=tuple(aborted))

    def _do_filter(self, unit_id: UnitId) -> None:
        t = self._table
        head = t.head
        hole = t.remove_occupied(unit_id)
        moves, aborted = t.fill_holes()
        self._follow(moves)
        self._end(unit_id, "filter")
        for u in aborted:
            self._end(u, "abort")
        self._result = Removal(unit_id, hole, tuple(moves), tuple(aborted))
        self._log("filter", version=self._version, head=head, unit_id=unit_id, slot=hole,
                  moves=tuple(moves), aborted=tuple(aborted))

    def _do_release_stuck(self) -> None:
        t = self._table
        head = t.head
        buf = t.buffers[head]
        moves: list[Move] = []
        aborted: list[UnitId] = []
        truncated: list[UnitId] = []
        truncate = self._stuck_choice(buf) == "truncate"
        # Front to back; refills and (with oversampling) closing can change the buffer, so the
        # next reservation is looked up afresh each time.
        while buf.n_res and not t.ready(buf):
            unit_id = buf.unit[buf.state.index(RESERVED)]
            if truncate:
                more_moves, more_aborted = self._truncate_one(unit_id)  # type: ignore[arg-type]
                truncated.append(unit_id)  # type: ignore[arg-type]
            else:
                _, more_moves, more_aborted = self._abort_one(unit_id)  # type: ignore[arg-type]
                aborted.append(unit_id)  # type: ignore[arg-type]
            aborted.extend(more_aborted)
            moves.extend(more_moves)
        self._result = truncated + aborted
        self._log("release_stuck", version=self._version, head=head, moves=tuple(moves),
                  aborted=tuple(aborted))

    def _truncate_one(self, unit_id: UnitId) -> tuple[list[Move], list[UnitId]]:
        """Truncate (spec §6.2): the in-flight ``unit_id`` counts as finished with what it
        generated so far -- occupy's steps (a)-(d) as ``_do_occupy`` runs them, so it keeps its
        ``v_traj`` and lands no later than its reservation. The first move is the truncation
        itself (from the reservation to the placement, ``MoveReason.TRUNCATE``)."""
        gap, slot, moves, aborted = self._occupy_steps(unit_id)
        return [Move(unit_id, gap, slot, MoveReason.TRUNCATE), *moves], aborted

    def _do_stream(self) -> None:
        entries, head = self._plan_stream, self._table.head
        streamed = self._streamed
        for e in entries:
            streamed[e.unit_id] = None
        self._result = entries
        self._log("stream", version=self._version, head=head, batch=Batch(head, entries))

    def _do_consume(self) -> None:
        head = self._table.head
        entries = self._table.take_head()
        self._end_batch(len(entries), head)
        if self._streamed:
            batch = Batch(head, entries, tuple(self._streamed))
            self._streamed = {}
        else:
            batch = Batch(head, entries)
        self._last_batch = batch
        self._result = batch
        self._log("consume", version=self._version, head=head, batch=batch)

    def _do_publish(self) -> None:
        version, head = self._version, self._table.head
        self._version += 1
        self._table.open_through(self._version + self.config.max_staleness)
        self._log("publish", version=version, head=head)


def drop_events(events: list[Event], first: int, before: int) -> int:
    """``forget_events``' work on a log held as the list ``events`` of the events numbered
    from ``first`` on: drop those below ``before`` and return the new first. ``before`` must
    lie in ``first .. first + len(events)`` (``ValueError`` naming it, nothing dropped).
    Shared with the runtime's peer controller (runtime.peers), whose log is numbered alike."""
    count = first + len(events)
    if isinstance(before, bool) or not isinstance(before, int) or not first <= before <= count:
        raise ValueError(f"forget_events takes an event number from {first} (the first held) "
                         f"to {count} (the count), got {before!r}")
    del events[:before - first]
    return before


def apply(controller: StalenessController, event: Event) -> Event | None:
    """Run the operation ``event`` records on ``controller``; return the event it produced
    (None when the operation was refused: reserve must wait, consume found nothing READY)."""
    if not isinstance(event, Event):
        raise NotAnEvent(event)
    before = controller.event_count
    op = event.op
    if op in ("reserve", "occupy", "abort", "filter"):
        getattr(controller, op)(event.unit_id)
    elif op in ("consume", "publish", "release_stuck", "stream"):
        getattr(controller, op)()
    else:
        raise ValueError(f"unknown operation {op!r} in event {event.seq}")
    return controller._events[-1] if controller.event_count > before else None


def replay(config: Config, events: Iterable[Event]) -> StalenessController:
    """Rebuild a controller from its event log, insisting on every recorded outcome. Anything
    in ``events`` that is not an ``Event`` raises ``NotAnEvent`` (the controller is then in
    the state the events before it describe)."""
    controller = StalenessController(config)
    if isinstance(events, (str, bytes, dict, Event)) or not isinstance(events, Iterable):
        raise NotAnEvent(events, sequence=True)
    for index, event in enumerate(events):
        if not isinstance(event, Event):
            raise NotAnEvent(event, index)
        produced = apply(controller, event)
        if produced != event:
            raise ReplayDivergence(event.seq, event, produced)
    return controller
