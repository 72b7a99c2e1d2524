"""The slot table: open staleness buffers and every placement rule of the protocol.

Theory of operation
-------------------
Buffer ``v`` feeds the update ``v -> v+1``; the open buffers are ``head .. top`` where
``top = version + eta``. Each buffer is an explicit array of ``capacity`` slots, each EMPTY,
RESERVED or OCCUPIED, plus counters so that the hot paths skip whole buffers. A unit ``u`` may sit
in buffer ``b`` iff ``head <= b <= v_traj(u) + eta`` (``legal``).

Each protocol rule is one method here, named as in spec/PROTOCOL.md, so that the proofs' mutants
can break exactly one rule by overriding exactly one method:

* ``plan_reserve``   -- Reserve: the latest legal buffer, its last EMPTY slot (worst case first).
* ``release``        -- Occupy/Abort step (a): the unit's RESERVED slot becomes the gap.
* ``shift_into``     -- step (b): the first reservation before the gap that may legally sit in the
  gap's buffer moves there (one move, no cascade), then ``relabel`` restores its old buffer.
* ``relabel``        -- correction 1: slots of one buffer are interchangeable, so after a
  reservation leaves a buffer, the first reservation of that buffer's run takes its place.
* ``place``          -- step (c): the finished unit takes the earliest EMPTY legal slot.
* ``fill_holes``     -- abort/filter: a hole takes the last OCCUPIED unit of the earliest buffer
  after it that has one, repeatedly, so no EMPTY precedes an OCCUPIED.
* ``close_ready``    -- correction 2 (oversampling): a buffer that became READY closes its spare
  slots; each reservation in it moves to a legal EMPTY slot of a later buffer or is aborted.

The table knows nothing of unit lifecycles or the trainer; ``machine.StalenessController`` owns
those and composes these rules into operations. No I/O, no clocks, no threads.
"""

from __future__ import annotations

from .config import Config
from .types import (
    BufferStatus,
    BufferView,
    Move,
    MoveReason,
    SlotRef,
    SlotState,
    UnitId,
)

EMPTY = SlotState.EMPTY
RESERVED = SlotState.RESERVED
OCCUPIED = SlotState.OCCUPIED


class Buffer:
    """One staleness buffer: ``capacity`` slots and counters of RESERVED and OCCUPIED."""

    __slots__ = ("n_occ", "n_res", "state", "unit", "v")

    def __init__(self, v: int, capacity: int) -> None:
        self.v = v
        self.state: list[SlotState] = [EMPTY] * capacity
        self.unit: list[UnitId | None] = [None] * capacity
        self.n_occ = 0
        self.n_res = 0

    def copy(self) -> Buffer:
        other = Buffer.__new__(Buffer)
        other.v = self.v
        other.state = self.state.copy()
        other.unit = self.unit.copy()
        other.n_occ = self.n_occ
        other.n_res = self.n_res
        return other

    @property
    def n_empty(self) -> int:
        return len(self.state) - self.n_occ - self.n_res


class SlotTable:
    """Open buffers ``head .. top`` and the location and version of every live unit."""

    def __init__(self, config: Config) -> None:
        self.eta = config.max_staleness
        self.batch_size = config.batch_size
        self.capacity: int = config.capacity  # type: ignore[assignment]
        self.head = 0
        self.top = -1
        self.buffers: dict[int, Buffer] = {}
        self.where: dict[UnitId, tuple[Buffer, int]] = {}
        self.v_traj: dict[UnitId, int] = {}
        self.open_through(self.eta)

    def copy(self) -> SlotTable:
        other = SlotTable.__new__(type(self))
        other.eta, other.batch_size, other.capacity = self.eta, self.batch_size, self.capacity
        other.head, other.top = self.head, self.top
        other.buffers = {v: b.copy() for v, b in self.buffers.items()}
        other.where = {u: (other.buffers[b.v], i) for u, (b, i) in self.where.items()}
        other.v_traj = dict(self.v_traj)
        return other

    # ----------------------------------------------------------------- window ---------------

    def open_through(self, top: int) -> None:
        """Open empty buffers up to ``top`` (the window grows on publish)."""
        for v in range(max(self.top + 1, self.head), top + 1):
            self.buffers[v] = Buffer(v, self.capacity)
        self.top = max(self.top, top)

    def legal(self, v_buffer: int, v_traj: int) -> bool:
        """Staleness rule: a unit generated at ``v_traj`` may train in buffers up to v_traj+eta."""
        return self.head <= v_buffer <= v_traj + self.eta

    def ready(self, buf: Buffer) -> bool:
        return buf.n_occ >= self.batch_size

    def status(self, buf: Buffer) -> BufferStatus:
        if self.ready(buf):
            return BufferStatus.READY
        return BufferStatus.PENDING if buf.n_empty else BufferStatus.STUCK

    # ----------------------------------------------------------------- slot writes ----------

    def _put(self, buf: Buffer, i: int, state: SlotState, unit_id: UnitId) -> None:
        buf.state[i] = state
        buf.unit[i] = unit_id
        if state is OCCUPIED:
            buf.n_occ += 1
        else:
            buf.n_res += 1
        self.where[unit_id] = (buf, i)

    def _clear(self, buf: Buffer, i: int) -> UnitId:
        unit_id = buf.unit[i]
        if buf.state[i] is OCCUPIED:
            buf.n_occ -= 1
        else:
            buf.n_res -= 1
        buf.state[i] = EMPTY
        buf.unit[i] = None
        return unit_id  # type: ignore[return-value]

    def _move(self, src: Buffer, i: int, dst: Buffer, j: int, reason: MoveReason) -> Move:
        state = src.state[i]
        unit_id = self._clear(src, i)
        self._put(dst, j, state, unit_id)
        return Move(unit_id, SlotRef(src.v, i), SlotRef(dst.v, j), reason)

    def discard(self, unit_id: UnitId) -> None:
        """The unit left the table for good (consumed, aborted or filtered)."""
        del self.v_traj[unit_id]

    # ----------------------------------------------------------------- Reserve ---------------

    def plan_reserve(self, v_traj: int) -> SlotRef | None:
        """Latest legal, not-READY buffer with an EMPTY slot, and its last EMPTY slot."""
        for v in range(min(self.top, v_traj + self.eta), self.head - 1, -1):
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                state = buf.state
                return SlotRef(v, len(state) - 1 - state[::-1].index(EMPTY))
        return None

    def reserve(self, unit_id: UnitId, v_traj: int, slot: SlotRef) -> None:
        self.v_traj[unit_id] = v_traj
        self._put(self.buffers[slot.buffer], slot.index, RESERVED, unit_id)

    # ----------------------------------------------------------------- Occupy / Abort -------

    def release(self, unit_id: UnitId) -> SlotRef:
        """Step (a): the unit's RESERVED slot becomes EMPTY (the gap)."""
        buf, i = self.where.pop(unit_id)
        self._clear(buf, i)
        return SlotRef(buf.v, i)

    def shift_candidate(self, gap: SlotRef) -> tuple[Buffer, int] | None:
        """First RESERVED slot strictly before the gap (by buffer, then slot), outside READY
        buffers, whose unit may legally sit in the gap's buffer."""
        v_traj, eta, gv = self.v_traj, self.eta, gap.buffer
        for v in range(self.head, gv + 1):
            buf = self.buffers[v]
            if not buf.n_res or self.ready(buf):
                continue
            state, unit = buf.state, buf.unit
            end = gap.index if v == gv else len(state)
            for i in range(state.index(RESERVED), end):
                if state[i] is RESERVED and gv <= v_traj[unit[i]] + eta:  # type: ignore[index]
                    return buf, i
        return None

    def shift_into(self, gap: SlotRef) -> list[Move]:
        """Step (b): move the shift candidate into the gap, then relabel its old buffer."""
        found = self.shift_candidate(gap)
        if found is None:
            return []
        src, i = found
        moves = [self._move(src, i, self.buffers[gap.buffer], gap.index, MoveReason.SHIFT)]
        moves.extend(self.relabel(src, i))
        return moves

    def relabel(self, buf: Buffer, hole: int) -> list[Move]:
        """Correction 1: a reservation left slot ``hole`` of ``buf``; if reservations stand before
        it in the same buffer, the first of them takes the hole so the buffer reads O* E* R*."""
        try:
            first = buf.state.index(RESERVED, 0, hole)
        except ValueError:
            return []
        return [self._move(buf, first, buf, hole, MoveReason.RELABEL)]

    def place(self, unit_id: UnitId) -> SlotRef:
        """Step (c): the finished unit takes the earliest EMPTY slot of a legal, not-READY
        buffer. One always exists: the gap, or the slot the shift freed before it."""
        last = min(self.top, self.v_traj[unit_id] + self.eta)
        for v in range(self.head, last + 1):
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                i = buf.state.index(EMPTY)
                self._put(buf, i, OCCUPIED, unit_id)
                return SlotRef(v, i)
        raise AssertionError(f"no legal EMPTY slot for finished unit {unit_id!r}")

    # ----------------------------------------------------------------- Filter / holes -------

    def remove_occupied(self, unit_id: UnitId) -> SlotRef:
        buf, i = self.where.pop(unit_id)
        self._clear(buf, i)
        return SlotRef(buf.v, i)

    def earliest_hole(self) -> tuple[Buffer, int] | None:
        """Earliest EMPTY slot of an open, not-READY buffer."""
        for v in range(self.head, self.top + 1):
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                return buf, buf.state.index(EMPTY)
        return None

    def donor(self, hole_buf: Buffer, hole: int) -> tuple[Buffer, int] | None:
        """The last OCCUPIED slot of the earliest buffer (the hole's own, or a later one) that
        has an OCCUPIED slot after the hole."""
        for v in range(hole_buf.v, self.top + 1):
            buf = self.buffers[v]
            if not buf.n_occ:
                continue
            state = buf.state
            for i in range(len(state) - 1, -1, -1):
                if state[i] is OCCUPIED:
                    if v == hole_buf.v and i <= hole:
                        break
                    return buf, i
        return None

    def fill_holes(self) -> tuple[list[Move], list[UnitId]]:
        """Move OCCUPIED units forward until no EMPTY slot precedes an OCCUPIED one, closing
        each buffer the moves make READY. Returns the moves and the units closing aborted."""
        moves: list[Move] = []
        aborted: list[UnitId] = []
        while True:
            hole = self.earliest_hole()
            if hole is None:
                break
            found = self.donor(*hole)
            if found is None:
                break
            buf, i = hole
            moves.append(self._move(found[0], found[1], buf, i, MoveReason.FILL))
            if self.ready(buf):
                closing_moves, closing_aborted = self.close_ready(buf)
                moves.extend(closing_moves)
                aborted.extend(closing_aborted)
        return moves, aborted

    # ----------------------------------------------------------------- Oversampling ---------

    def close_ready(self, buf: Buffer) -> tuple[list[Move], list[UnitId]]:
        """Correction 2: a READY buffer's spare slots close. Each reservation in it moves to the
        latest legal EMPTY slot of a later open buffer, or is aborted (released here; the
        controller marks it ABORTED)."""
        moves: list[Move] = []
        aborted: list[UnitId] = []
        if not buf.n_res:
            return moves, aborted
        for i, state in enumerate(buf.state):
            if state is not RESERVED:
                continue
            unit_id = buf.unit[i]
            target = self.relocation_target(buf.v, self.v_traj[unit_id])  # type: ignore[index]
            if target is None:
                self.release(unit_id)  # type: ignore[arg-type]
                self.discard(unit_id)  # type: ignore[arg-type]
                aborted.append(unit_id)  # type: ignore[arg-type]
            else:
                dst = self.buffers[target.buffer]
                moves.append(self._move(buf, i, dst, target.index, MoveReason.CLOSE))
        return moves, aborted

    def relocation_target(self, after: int, v_traj: int) -> SlotRef | None:
        """Where a reservation leaving READY buffer ``after`` goes: the Reserve rule restricted
        to buffers later than ``after``."""
        slot = self.plan_reserve(v_traj)
        return slot if slot is not None and slot.buffer > after else None

    # ----------------------------------------------------------------- Consume ---------------

    def take_head(self) -> list[tuple[UnitId, int]]:
        """Remove the head buffer and return its OCCUPIED units, with their versions, in slot
        order."""
        buf = self.buffers.pop(self.head)
        units = []
        for state, unit_id in zip(buf.state, buf.unit):
            if state is OCCUPIED:
                del self.where[unit_id]  # type: ignore[arg-type]
                units.append((unit_id, self.v_traj.pop(unit_id)))  # type: ignore[arg-type]
        self.head += 1
        return units  # type: ignore[return-value]

    def head_buffer(self) -> Buffer | None:
        return self.buffers.get(self.head)

    # ----------------------------------------------------------------- Views -----------------

    def views(self) -> tuple[BufferView, ...]:
        return tuple(
            BufferView(v, self.status(b), tuple(zip(b.state, b.unit)))
            for v, b in sorted(self.buffers.items())
        )
