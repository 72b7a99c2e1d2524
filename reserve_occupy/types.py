"""Values the core hands out: enums, operation results, snapshots and events.

All of them are immutable, so a runtime can keep them, log them or send them to another process
without the controller's state changing underneath. Per-operation results and events are
NamedTuples because they are built on the hot path, where a frozen dataclass costs about three
times as much to construct.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import index as _as_index
from typing import Any, NamedTuple, Union, overload

from .config import Config

UnitId = Union[str, int]


class SlotState(str, enum.Enum):
    """What one slot of a staleness buffer holds."""

    EMPTY = "E"
    RESERVED = "R"  # a unit is in flight and owns this place
    OCCUPIED = "O"  # a finished unit is placed here

    def __repr__(self) -> str:
        return f"SlotState.{self.name}"


class BufferStatus(str, enum.Enum):
    """Status of one buffer, derived from its slots (spec §2)."""

    PENDING = "PENDING"  # not READY and has an EMPTY slot
    STUCK = "STUCK"  # not READY, no EMPTY slot: waits for in-flight units
    READY = "READY"  # batch_size OCCUPIED: the batch is complete

    def __repr__(self) -> str:
        return f"BufferStatus.{self.name}"


class Phase(str, enum.Enum):
    """The trainer's phase: the states of the protocol's ``transitions`` machine."""

    IDLE = "IDLE"  # waiting for the head buffer to become READY
    TRAINING = "TRAINING"  # a consumed batch is training; publish ends it

    def __repr__(self) -> str:
        return f"Phase.{self.name}"


class UnitState(str, enum.Enum):
    """Lifecycle of one unit. IN_FLIGHT, FINISHED and STREAMED are live; the rest are final."""

    IN_FLIGHT = "IN_FLIGHT"  # owns one RESERVED slot
    FINISHED = "FINISHED"  # owns one OCCUPIED slot
    STREAMED = "STREAMED"  # FINISHED and handed to the trainer by stream: trains in buffer head
    CONSUMED = "CONSUMED"
    ABORTED = "ABORTED"
    FILTERED = "FILTERED"

    def __repr__(self) -> str:
        return f"UnitState.{self.name}"


class SlotRef(NamedTuple):
    """Address of a slot: buffer version and index inside the buffer."""

    buffer: int
    index: int


class MoveReason(str, enum.Enum):
    """Why the protocol moved a unit from one slot to another."""

    SHIFT = "shift"  # an earlier reservation took a freed reserved slot (occupy/abort step b)
    RELABEL = "relabel"  # within one buffer, to restore OCCUPIED* EMPTY* RESERVED*
    FILL = "fill"  # an occupied unit moved forward into a hole (abort/filter)
    CLOSE = "close"  # a reservation left the spare slots of a READY buffer (oversampling)
    TRUNCATE = "truncate"  # release_stuck with stuck_action "truncate": a head reservation
    #                        became OCCUPIED with its partial output (from: reserved, to: placed)

    def __repr__(self) -> str:
        return f"MoveReason.{self.name}"


class Move(NamedTuple):
    unit_id: UnitId
    src: SlotRef
    dst: SlotRef
    reason: MoveReason


class Reservation(NamedTuple):
    """Result of a successful ``reserve``: the unit may start generating."""

    unit_id: UnitId
    v_traj: int
    slot: SlotRef

    @property
    def buffer(self) -> int:
        return self.slot.buffer


class Placement(NamedTuple):
    """Result of ``occupy``: where the finished unit landed and what moved to make room.

    ``aborted`` lists reservations that the closing rule of batch-level oversampling dropped:
    the runtime must stop generating them.
    """

    unit_id: UnitId
    v_traj: int
    slot: SlotRef
    moves: tuple[Move, ...] = ()
    aborted: tuple[UnitId, ...] = ()

    @property
    def buffer(self) -> int:
        return self.slot.buffer

    @property
    def staleness(self) -> int:
        """Staleness the unit will train with if it stays where it is (it can only move earlier)."""
        return self.slot.buffer - self.v_traj


class Removal(NamedTuple):
    """Result of ``abort`` or ``filter``: the freed slot, the moves that refilled it, and any
    reservations the closing rule aborted as a consequence."""

    unit_id: UnitId
    slot: SlotRef
    moves: tuple[Move, ...] = ()
    aborted: tuple[UnitId, ...] = ()


class BatchUnit(NamedTuple):
    unit_id: UnitId
    v_traj: int
    staleness: int


class BatchUnits(Sequence):  # type: ignore[type-arg]
    """A consumed batch's units, read in place: the first ``n`` items of a list nobody writes.

    ``consume`` hands out the head buffer's prebuilt batch entries (``table.Buffer.entry``) by
    reference instead of copying them into a tuple, which touched every entry while the trainer
    waited (at B = 4,096 that copy and freeing the buffer's per-slot arrays were most of
    consume's cost). The table gives the list up with the buffer (``SlotTable.take_head``) and
    never writes it again; ``owner`` (the consumed buffer) is only kept alive, so its arrays are
    freed when the last reference to this sequence goes -- the work of freeing moves from
    consume to whoever drops the batch (the controller's event log keeps every batch).

    It behaves as the tuple of its items (``Batch.units`` was one): equal to a tuple or another
    ``BatchUnits`` with the same items and hashing as that tuple does (a ``Batch`` compares and
    hashes as before), ``repr`` as the tuple's, a slice is a tuple, pickling keeps the items
    only; ``count``, ``index``, ordering, ``+`` and ``*`` answer as the tuple would. Not a
    tuple: ``isinstance(units, tuple)`` is false (``Sequence`` is the contract) and
    ``dataclasses.asdict`` copies it instead of recursing into it.
    """

    __slots__ = ("_items", "_n", "_owner")

    def __init__(self, items: list[BatchUnit], n: int | None = None, owner: object = None
                 ) -> None:
        if not isinstance(items, list):
            raise TypeError(f"BatchUnits reads a list, not {type(items).__name__}")
        n = len(items) if n is None else n
        if not 0 <= n <= len(items):
            raise ValueError(f"BatchUnits of {n} items over a list of {len(items)}")
        self._items, self._n, self._owner = items, n, owner

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> BatchUnit: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[BatchUnit, ...]: ...

    def __getitem__(self, i: Any) -> Any:
        n = self._n
        if i.__class__ is not int:
            if isinstance(i, slice):
                return tuple(self._items[:n][i])
            try:
                i = _as_index(i)
            except TypeError:
                raise TypeError(f"tuple indices must be integers or slices, not "
                                f"{type(i).__name__}") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("tuple index out of range")
        return self._items[i]

    def __iter__(self) -> Iterator[BatchUnit]:
        items = self._items
        return iter(items) if self._n == len(items) else islice(items, self._n)

    def __reversed__(self) -> Iterator[BatchUnit]:
        return reversed(self._items[:self._n])

    def __contains__(self, x: object) -> bool:
        return x in self._as_tuple()

    def _as_tuple(self) -> tuple[BatchUnit, ...]:
        items = self._items
        return tuple(items) if self._n == len(items) else tuple(items[:self._n])

    def count(self, x: object) -> int:
        return self._as_tuple().count(x)

    def index(self, x: object, start: int = 0, stop: int = 9223372036854775807) -> int:
        return self._as_tuple().index(x, start, stop)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is BatchUnits:
            if self._n != other._n:  # type: ignore[attr-defined]
                return False
            other = other._as_tuple()  # type: ignore[attr-defined]
        elif not isinstance(other, tuple):
            return NotImplemented
        return self._as_tuple() == other

    def __hash__(self) -> int:
        return hash(self._as_tuple())

    def _cmp_operand(self, other: object) -> tuple[BatchUnit, ...] | None:
        if other.__class__ is BatchUnits:
            return other._as_tuple()  # type: ignore[attr-defined]
        return other if isinstance(other, tuple) else None

    def __lt__(self, other: object) -> bool:
        o = self._cmp_operand(other)
        return NotImplemented if o is None else self._as_tuple() < o

    def __le__(self, other: object) -> bool:
        o = self._cmp_operand(other)
        return NotImplemented if o is None else self._as_tuple() <= o

    def __gt__(self, other: object) -> bool:
        o = self._cmp_operand(other)
        return NotImplemented if o is None else self._as_tuple() > o

    def __ge__(self, other: object) -> bool:
        o = self._cmp_operand(other)
        return NotImplemented if o is None else self._as_tuple() >= o

    def __add__(self, other: object) -> tuple[BatchUnit, ...]:
        o = self._cmp_operand(other)
        return NotImplemented if o is None else self._as_tuple() + o

    def __radd__(self, other: object) -> tuple[BatchUnit, ...]:
        o = self._cmp_operand(other)
        return NotImplemented if o is None else o + self._as_tuple()

    def __mul__(self, k: int) -> tuple[BatchUnit, ...]:
        return self._as_tuple() * k

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return repr(self._as_tuple())

    def __reduce__(self) -> tuple[type, tuple[list[BatchUnit]]]:
        return BatchUnits, (list(self),)


@dataclass(frozen=True)
class Batch:
    """A consumed buffer: trains the update ``version -> version + 1``.

    ``units``: the batch entries in slot order, a ``Sequence``: ``consume`` hands a
    ``BatchUnits`` (the consumed buffer's entries read in place, equal to and hashing as the
    tuple of them); a ``Batch`` built by hand may hold a tuple.
    ``streamed``: the units of the batch that ``stream`` handed to the trainer before consume,
    in the order handed (empty without ``Config.streaming``); the trainer trains the others.
    A ``stream`` event carries the units it handed as a ``Batch`` of the head buffer too.
    """

    version: int
    units: Sequence[BatchUnit]
    streamed: tuple[UnitId, ...] = ()

    def __len__(self) -> int:
        return len(self.units)

    @property
    def unit_ids(self) -> tuple[UnitId, ...]:
        return tuple(u.unit_id for u in self.units)


@dataclass(frozen=True)
class BufferView:
    v_buffer: int
    status: BufferStatus
    slots: tuple[tuple[SlotState, UnitId | None], ...]

    def render(self) -> str:
        """Compact text form used by scenario files: ``O(A) O(D) _ R(E)``."""
        return " ".join("_" if s is SlotState.EMPTY else f"{s.value}({u})" for s, u in self.slots)


class UnitView(NamedTuple):
    unit_id: UnitId
    state: UnitState
    v_traj: int


@dataclass(frozen=True)
class Snapshot:
    """Immutable picture of the whole controller state; equal states give equal snapshots.

    ``buffers`` covers every open buffer, ``head`` .. ``version + eta``. ``units`` holds the live
    units (in flight or finished) from the controller's own unit records, kept apart from the
    slots so that ``conservation`` can compare the two.
    """

    config: Config
    version: int
    head: int
    phase: Phase
    buffers: tuple[BufferView, ...]
    units: frozenset[UnitView]
    admitted: int
    consumed: int
    aborted: int
    filtered: int
    last_batch: Batch | None = field(default=None, compare=True)

    @property
    def in_flight(self) -> int:
        return sum(1 for u in self.units if u.state is UnitState.IN_FLIGHT)

    def buffer(self, v_buffer: int) -> BufferView:
        for b in self.buffers:
            if b.v_buffer == v_buffer:
                return b
        raise KeyError(f"buffer {v_buffer} is not open (head={self.head})")

    def render(self) -> str:
        lines = [f"version={self.version} head={self.head} phase={self.phase.value}"]
        for b in self.buffers:
            lines.append(f"  b{b.v_buffer} [{b.status.value:7}] {b.render()}")
        return "\n".join(lines)


class Event(NamedTuple):
    """One entry of the controller's append-only log: an operation and its full outcome.

    ``version`` and ``head`` are the values *before* the operation. Replaying the operations in
    order on a fresh controller with the same ``Config`` reproduces every outcome exactly.
    """

    seq: int
    op: str
    version: int
    head: int
    unit_id: UnitId | None = None
    v_traj: int | None = None
    slot: SlotRef | None = None
    moves: tuple[Move, ...] = ()
    aborted: tuple[UnitId, ...] = ()
    batch: Batch | None = None
