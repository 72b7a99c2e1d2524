"""Values the core hands out: enums, operation results, snapshots and events.

All of them are immutable, so a runtime can keep them, log them or send them to another process
without the controller's state changing underneath. Per-operation results and events are
NamedTuples because they are built on the hot path, where a frozen dataclass costs about three
times as much to construct.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple, Union

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


@dataclass(frozen=True)
class Batch:
    """A consumed buffer: trains the update ``version -> version + 1``.

    ``streamed``: the units of the batch that ``stream`` handed to the trainer before consume,
    in the order handed (empty without ``Config.streaming``); the trainer trains the others.
    A ``stream`` event carries the units it handed as a ``Batch`` of the head buffer too.
    """

    version: int
    units: tuple[BatchUnit, ...]
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
