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
* ``stream_head``    -- streaming consume: the head buffer's OCCUPIED units not handed yet, in
  slot order. Only the head buffer: every OCCUPIED unit of it trains in its batch (§3.8).

Indexes, kept in step by ``_put``/``_clear`` (the only slot writers) and all verified by
``check_indexes``: ``where`` and ``v_traj`` cover in-flight units only; a unit in
an OCCUPIED slot is found through its buffer's ``pos`` and carries its version in the slot. So a
consumed buffer takes everything about its units with it: consume deletes nothing unit by unit.

The table knows nothing of unit lifecycles or the trainer; ``machine.StalenessController`` owns
those and composes these rules into operations. No I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress

from .config import Config
from .errors import InvariantViolation
from .types import (
    BatchUnit,
    BatchUnits,
    BufferStatus,
    BufferView,
    Move,
    MoveReason,
    SlotRef,
    SlotState,
    UnitId,
)

# Slot states as stored: one byte per slot, the SlotState's letter, in a bytearray per buffer.
# find/rfind/count on a bytearray run at memchr speed, so locating the first or last EMPTY or
# RESERVED slot costs next to nothing at any capacity, where a list of enum members was compared
# element by element (and copied, to search from the end). ``slot_states`` turns them back.
EMPTY, RESERVED, OCCUPIED = (ord(s.value) for s in (SlotState.EMPTY, SlotState.RESERVED,
                                                     SlotState.OCCUPIED))
AS_SLOT_STATE = {ord(s.value): s for s in SlotState}
NO_VERSION = -1  # Buffer.version of an EMPTY slot (versions are >= 0)


class Buffer:
    """One staleness buffer: ``capacity`` slots, counters of RESERVED and OCCUPIED, and indexes.

    Per slot: ``state`` (a byte), ``unit``, ``version`` (the unit's v_traj) and, for OCCUPIED
    slots, ``entry``: the unit's ``BatchUnit`` as it would train from this buffer. The entry is
    built when the unit is put in the slot (occupy's placement, or a refill move), so consume --
    which runs while the trainer waits -- slices out a finished batch instead of building B
    NamedTuples. ``pos`` maps each OCCUPIED unit to its slot, so consume drops the buffer's
    finished units with the buffer instead of deleting B entries from table-wide dictionaries.
    ``res_versions`` counts reservations per version: the shift rule asks for the first
    reservation with ``v_traj >= gap - eta`` and can skip a buffer without one in O(versions).
    """

    __slots__ = ("entry", "n_occ", "n_res", "pos", "res_versions", "state", "unit", "v",
                 "version")

    def __init__(self, v: int, capacity: int) -> None:
        self.v = v
        self.state = bytearray([EMPTY]) * capacity
        self.unit: list[UnitId | None] = [None] * capacity
        self.version: list[int] = [NO_VERSION] * capacity
        self.entry: list[BatchUnit | None] = [None] * capacity
        self.pos: dict[UnitId, int] = {}
        self.res_versions: dict[int, int] = {}
        self.n_occ = 0
        self.n_res = 0

    def copy(self) -> Buffer:
        other = Buffer.__new__(Buffer)
        other.v = self.v
        other.state = self.state.copy()
        other.unit = self.unit.copy()
        other.version = self.version.copy()
        other.entry = self.entry.copy()
        other.pos = self.pos.copy()
        other.res_versions = self.res_versions.copy()
        other.n_occ = self.n_occ
        other.n_res = self.n_res
        return other

    @property
    def n_empty(self) -> int:
        return len(self.state) - self.n_occ - self.n_res

    def slot_states(self) -> list[SlotState]:
        return list(map(AS_SLOT_STATE.__getitem__, self.state))


class SlotTable:
    """Open buffers ``head .. top`` and the location and version of every live unit."""

    def __init__(self, config: Config) -> None:
        self.eta = config.max_staleness
        self.batch_size = config.batch_size
        self.capacity: int = config.capacity  # type: ignore[assignment]
        self.head = 0
        self.top = -1
        self.buffers: dict[int, Buffer] = {}
        self.where: dict[UnitId, tuple[Buffer, int]] = {}  # in-flight units' RESERVED slots
        self.v_traj: dict[UnitId, int] = {}  # in-flight units' versions
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
        # A new Buffer each time: reusing the consumed one measured no faster (what costs is
        # releasing its references to B units, which happens either way).
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

    # ----------------------------------------------------------------- lookups --------------

    def locate(self, unit_id: UnitId) -> tuple[Buffer, int]:
        """The slot of a live unit: ``where`` for in-flight units, else the buffers' ``pos``
        (at most eta + 1 dictionary lookups). KeyError if the unit is not in the table."""
        found = self.where.get(unit_id)
        if found is not None:
            return found
        for buf in self.buffers.values():
            i = buf.pos.get(unit_id)
            if i is not None:
                return buf, i
        raise KeyError(unit_id)

    def live_versions(self) -> dict[UnitId, int]:
        """``v_traj`` of every live unit, in one pass (snapshots read all of them)."""
        out = dict(self.v_traj)
        for buf in self.buffers.values():
            version = buf.version
            out.update((u, version[i]) for u, i in buf.pos.items())
        return out

    # ----------------------------------------------------------------- slot writes ----------

    def _put(self, buf: Buffer, i: int, state: int, unit_id: UnitId, version: int) -> None:
        """Write a unit into an EMPTY slot and every index: a RESERVED unit is in flight
        (``where``), an OCCUPIED one is in its buffer (``pos``, ``entry``) and leaves
        ``v_traj`` (its version now lives in the slot)."""
        buf.state[i] = state
        buf.unit[i] = unit_id
        buf.version[i] = version
        if state == OCCUPIED:
            buf.n_occ += 1
            buf.entry[i] = BatchUnit(unit_id, version, buf.v - version)
            buf.pos[unit_id] = i
            self.v_traj.pop(unit_id, None)
        else:
            buf.n_res += 1
            counts = buf.res_versions
            counts[version] = counts.get(version, 0) + 1
            self.where[unit_id] = (buf, i)

    def _clear(self, buf: Buffer, i: int) -> UnitId:
        """Empty a slot and its buffer's indexes (``where`` is the caller's: a move rewrites
        it, a release pops it)."""
        unit_id = buf.unit[i]
        if buf.state[i] == OCCUPIED:
            buf.n_occ -= 1
            buf.entry[i] = None
            del buf.pos[unit_id]  # type: ignore[arg-type]
        else:
            buf.n_res -= 1
            counts = buf.res_versions
            v = buf.version[i]
            if counts[v] == 1:
                del counts[v]
            else:
                counts[v] -= 1
        buf.state[i] = EMPTY
        buf.unit[i] = None
        buf.version[i] = NO_VERSION
        return unit_id  # type: ignore[return-value]

    def _move(self, src: Buffer, i: int, dst: Buffer, j: int, reason: MoveReason) -> Move:
        state, version = src.state[i], src.version[i]
        unit_id = self._clear(src, i)
        self._put(dst, j, state, unit_id, version)
        return Move(unit_id, SlotRef(src.v, i), SlotRef(dst.v, j), reason)

    def discard(self, unit_id: UnitId) -> None:
        """An in-flight unit left the table for good (aborted, or dropped by closing)."""
        del self.v_traj[unit_id]

    @staticmethod
    def first_reservation_from(buf: Buffer, min_version: int, end: int) -> int:
        """Index of the first RESERVED slot before ``end`` in ``buf`` whose unit was admitted at
        ``min_version`` or later, -1 if none: the shift rule's legality test. A buffer without
        such a reservation is skipped from its per-version counts; otherwise reservations are
        visited by memchr-speed ``find`` hops (the first one qualifies almost always: the
        newest reservations stand first, Reserve filling each buffer from its end)."""
        for version in buf.res_versions:
            if version >= min_version:
                break
        else:
            return -1  # no reservation in this buffer is recent enough
        state, versions = buf.state, buf.version
        i = state.find(RESERVED, 0, end)
        while i >= 0 and versions[i] < min_version:
            i = state.find(RESERVED, i + 1, end)
        return i

    # ----------------------------------------------------------------- Reserve ---------------

    def plan_reserve(self, v_traj: int) -> SlotRef | None:
        """Latest legal, not-READY buffer with an EMPTY slot, and its last EMPTY slot."""
        for v in range(min(self.top, v_traj + self.eta), self.head - 1, -1):
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                return SlotRef(v, buf.state.rfind(EMPTY))
        return None

    def reserve(self, unit_id: UnitId, v_traj: int, slot: SlotRef) -> None:
        self.v_traj[unit_id] = v_traj
        self._put(self.buffers[slot.buffer], slot.index, RESERVED, unit_id, v_traj)

    # ----------------------------------------------------------------- Occupy / Abort -------

    def release(self, unit_id: UnitId) -> SlotRef:
        """Step (a): the unit's RESERVED slot becomes EMPTY (the gap)."""
        buf, i = self.where.pop(unit_id)
        self._clear(buf, i)
        return SlotRef(buf.v, i)

    def shift_candidate(self, gap: SlotRef) -> tuple[Buffer, int] | None:
        """First RESERVED slot strictly before the gap (by buffer, then slot), outside READY
        buffers, whose unit may legally sit in the gap's buffer."""
        gv = gap.buffer
        min_version = gv - self.eta  # legal in buffer gv: gv <= v_traj + eta
        for v in range(self.head, gv + 1):
            buf = self.buffers[v]
            if not buf.n_res or self.ready(buf):
                continue
            end = gap.index if v == gv else len(buf.state)
            i = self.first_reservation_from(buf, min_version, end)
            if i >= 0:
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
        first = buf.state.find(RESERVED, 0, hole)
        if first < 0:
            return []
        return [self._move(buf, first, buf, hole, MoveReason.RELABEL)]

    def place(self, unit_id: UnitId) -> SlotRef:
        """Step (c): the finished unit takes the earliest EMPTY slot of a legal, not-READY
        buffer. One always exists: the gap, or the slot the shift freed before it."""
        v_traj = self.v_traj[unit_id]
        last = min(self.top, v_traj + self.eta)
        for v in range(self.head, last + 1):
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                i = buf.state.find(EMPTY)
                self._put(buf, i, OCCUPIED, unit_id, v_traj)
                return SlotRef(buf.v, i)  # buf.v: one int per buffer for every unit record
        raise AssertionError(f"no legal EMPTY slot for finished unit {unit_id!r}")

    # ----------------------------------------------------------------- Filter / holes -------

    def remove_occupied(self, unit_id: UnitId) -> SlotRef:
        buf, i = self.locate(unit_id)
        self._clear(buf, i)
        return SlotRef(buf.v, i)

    def earliest_hole(self) -> tuple[Buffer, int] | None:
        """Earliest EMPTY slot of an open, not-READY buffer."""
        for v in range(self.head, self.top + 1):
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                return buf, buf.state.find(EMPTY)
        return None

    def donor(self, hole_buf: Buffer, hole: int) -> tuple[Buffer, int] | None:
        """The last OCCUPIED slot of the earliest buffer (the hole's own, or a later one) that
        has an OCCUPIED slot after the hole."""
        for v in range(hole_buf.v, self.top + 1):
            buf = self.buffers[v]
            if not buf.n_occ:
                continue
            i = buf.state.rfind(OCCUPIED)
            if v != hole_buf.v or i > hole:
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
            if state != RESERVED:
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

    # ----------------------------------------------------------------- Stream ----------------

    @staticmethod
    def occupied_prefix(buf: Buffer) -> bool:
        """Whether the buffer's OCCUPIED slots are exactly its first ``n_occ`` slots (the
        ordering invariant's O* prefix). The buffer holds ``n_occ`` OCCUPIED slots (its
        counter, which ``check_indexes`` verifies), so they fill slots 0..n_occ-1 iff the last
        of them is slot n_occ - 1: one ``rfind``, at memrchr speed over the E/R tail.
        ``bytearray.count`` of one byte, used before, runs a plain byte loop (about 2 µs over
        4,096 slots: the growth in B of stream and consume)."""
        return buf.state.rfind(OCCUPIED) == buf.n_occ - 1

    def stream_head(self, handed: dict[UnitId, None] | set[UnitId]) -> tuple[BatchUnit, ...]:
        """The OCCUPIED units of buffer ``head`` not in ``handed``, in slot order, as their batch
        entries (the staleness they train at). Only the head: its OCCUPIED units can no longer
        leave it except by consume (spec/PROTOCOL.md §3.8); a later buffer's may move forward.
        Empty when there is no head buffer (eta = 0 while training)."""
        buf = self.buffers.get(self.head)
        if buf is None or not buf.n_occ:
            return ()
        # In O(new units), not O(B): when the OCCUPIED slots are the prefix 0..n-1 (the
        # ordering invariant, one memrchr-speed rfind) and none of the units in slots h..n-1 was
        # handed (h = units handed), then -- every handed unit being an OCCUPIED unit of the
        # head (the controller's 'streamed' invariant, which check() verifies) -- the handed
        # units are exactly slots 0..h-1 and the answer is slots h..n-1. Anything else (the
        # proofs' mutants break the order on purpose) takes the scan below, which is the rule.
        n, h = buf.n_occ, len(handed)
        if h <= n and self.occupied_prefix(buf):
            unit = buf.unit
            if not any(unit[i] in handed for i in range(h, n)):
                return tuple(buf.entry[h:n])  # type: ignore[arg-type]
        return tuple(e for st, e in zip(buf.state, buf.entry)
                     if st == OCCUPIED and e.unit_id not in handed)  # type: ignore[union-attr]

    # ----------------------------------------------------------------- Consume ---------------

    def take_head(self) -> BatchUnits:
        """Remove the head buffer; hand out its OCCUPIED units' entries in slot order, in place.

        When the OCCUPIED slots form a prefix (the ordering invariant: ``occupied_prefix``),
        the batch is the first ``n_occ`` items of the buffer's prebuilt ``entry`` list, which
        the buffer gives up (``entry`` becomes None, so nothing can write it again): no copy;
        else the entries are picked by ``compress`` (the proofs' mutants break the order on
        purpose). The consumed buffer rides along as
        the sequence's owner, so none of its per-slot arrays and no unit's ``pos`` entry is
        freed here: they go when the batch is dropped. The units' indexes leave with the
        buffer; the controller's unit records need no per-unit update either (machine.py,
        "Unit records").
        """
        buf = self.buffers.pop(self.head)
        n = buf.n_occ
        entry = buf.entry
        buf.entry = None  # type: ignore[assignment]
        if self.occupied_prefix(buf):
            units = BatchUnits(entry, n, buf)  # type: ignore[arg-type]
        else:
            units = BatchUnits(list(compress(entry, map(OCCUPIED.__eq__, buf.state))), owner=buf)
        self.head += 1
        return units

    def head_buffer(self) -> Buffer | None:
        return self.buffers.get(self.head)

    # ----------------------------------------------------------------- Checks ----------------

    def check_indexes(self) -> None:
        """Raise ``InvariantViolation`` ("conservation") unless every index the hot paths read
        instead of scanning agrees with the slots: ``where`` and ``v_traj`` (in-flight units),
        each buffer's counters, versions, reservation counts per version, ``pos`` (finished
        units' slots) and prebuilt batch entries."""
        for u, (buf, i) in self.where.items():
            if buf.unit[i] != u or buf.state[i] != RESERVED or self.buffers.get(buf.v) is not buf:
                raise InvariantViolation("conservation", f"index says {u!r} at ({buf.v}, {i})")
        for v, buf in self.buffers.items():
            if (buf.state.count(OCCUPIED), buf.state.count(RESERVED)) != (buf.n_occ, buf.n_res):
                raise InvariantViolation("conservation", f"buffer {v} counters out of step")
            reserved = [w for st, w in zip(buf.state, buf.version) if st == RESERVED]
            occupied = {u: i for i, (st, u) in enumerate(zip(buf.state, buf.unit))
                        if st == OCCUPIED}
            entries = {i: BatchUnit(u, buf.version[i], v - buf.version[i])
                       for u, i in occupied.items()}
            if (any((st == EMPTY) != (w == NO_VERSION) for st, w in zip(buf.state, buf.version))
                    or buf.res_versions != Counter(reserved) or buf.pos != occupied
                    or any(buf.entry[i] != e for i, e in entries.items())
                    or any(e is not None for i, e in enumerate(buf.entry) if i not in entries)
                    or any(self.v_traj.get(buf.unit[i]) != w for i, (st, w)
                           in enumerate(zip(buf.state, buf.version)) if st == RESERVED)):
                raise InvariantViolation("conservation", f"buffer {v} indexes out of step")
        if set(self.v_traj) != set(self.where):
            raise InvariantViolation("conservation", "slot index and unit records disagree")

    # ----------------------------------------------------------------- Views -----------------

    def views(self) -> tuple[BufferView, ...]:
        return tuple(
            BufferView(v, self.status(b), tuple(zip(b.slot_states(), b.unit)))
            for v, b in sorted(self.buffers.items())
        )
