"""A catalogue of deliberately broken controllers: each breaks exactly one protocol rule.

``MUTANTS`` maps a name to a ``Mutant`` whose ``make(config)`` builds a ``StalenessController``
(or subclass) whose slot table (or controller) overrides exactly one rule method of the real
core. ``pytest proofs/`` runs every mutant through the model checker, the spec-conformance check
and the Hypothesis state machine and fails if any mutant survives (``proofs/test_mutants.py``);
the porting kit imports this catalogue to produce mutant traces, so this interface is stable:
``name``, ``description``, ``rule`` (the spec rule it breaks), ``make(config)``. Importing this
module needs only ``reserve_occupy`` (no z3, no hypothesis).

Each override below is a copy of the real method with one deliberate change, marked ``# MUTANT``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reserve_occupy import Config, IllegalUnitState, StalenessController, UnitState, UnknownUnit
from reserve_occupy.machine import UNIT_LIFECYCLE
from reserve_occupy.table import EMPTY, OCCUPIED, RESERVED, Buffer, SlotTable
from reserve_occupy.types import Batch, BatchUnit, Move, MoveReason, SlotRef, UnitId


@dataclass(frozen=True)
class Mutant:
    """One broken variant of the core. ``make(config)`` returns a ready controller."""

    name: str
    description: str
    rule: str  # the rule of spec/PROTOCOL.md it breaks
    make: Callable[[Config], StalenessController]
    oversampling: bool = False  # True if it can only misbehave when capacity > batch_size
    streaming: bool = False  # True if it can only misbehave with Config.streaming


def _with_table(table_cls: type[SlotTable]) -> Callable[[Config], StalenessController]:
    def make(config: Config) -> StalenessController:
        c = StalenessController(config)
        c._table = table_cls(config)
        return c

    make.__qualname__ = f"make[{table_cls.__name__}]"
    return make


def _with_controller(cls: type[StalenessController]) -> Callable[[Config], StalenessController]:
    def make(config: Config) -> StalenessController:
        return cls(config)

    make.__qualname__ = f"make[{cls.__name__}]"
    return make


# ------------------------------------------------------------------ slot-table mutants ------

class StalenessOffByOne(SlotTable):
    def shift_candidate(self, gap: SlotRef) -> tuple[Buffer, int] | None:
        gv = gap.buffer
        min_version = gv - self.eta - 1  # MUTANT: legal when gv <= v_traj + eta + 1
        for v in range(self.head, gv + 1):
            buf = self.buffers[v]
            if not buf.n_res or self.ready(buf):
                continue
            end = gap.index if v == gv else len(buf.state)
            i = self.first_reservation_from(buf, min_version, end)
            if i >= 0:
                return buf, i
        return None


class ReserveEarliest(SlotTable):
    def plan_reserve(self, v_traj: int) -> SlotRef | None:
        for v in range(self.head, min(self.top, v_traj + self.eta) + 1):  # MUTANT: earliest
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                return SlotRef(v, buf.state.rfind(EMPTY))
        return None


class ReserveFirstEmpty(SlotTable):
    def plan_reserve(self, v_traj: int) -> SlotRef | None:
        for v in range(min(self.top, v_traj + self.eta), self.head - 1, -1):
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                return SlotRef(v, buf.state.find(EMPTY))  # MUTANT: first EMPTY, not last
        return None


class ReserveIntoReady(SlotTable):
    def plan_reserve(self, v_traj: int) -> SlotRef | None:
        for v in range(min(self.top, v_traj + self.eta), self.head - 1, -1):
            buf = self.buffers[v]
            if buf.n_empty:  # MUTANT: READY buffers' spare slots stay open for reservations
                return SlotRef(v, buf.state.rfind(EMPTY))
        return None


class NoShift(SlotTable):
    def shift_into(self, gap: SlotRef) -> list[Move]:
        return []  # MUTANT: the gap is never refilled by an earlier reservation


class ShiftAfterGap(SlotTable):
    def shift_candidate(self, gap: SlotRef) -> tuple[Buffer, int] | None:
        gv = gap.buffer
        min_version = gv - self.eta
        for v in range(gv, self.top + 1):  # MUTANT: scans from the gap onwards
            buf = self.buffers[v]
            if not buf.n_res or self.ready(buf):
                continue
            start = gap.index + 1 if v == gv else 0
            for i in range(start, len(buf.state)):
                if buf.state[i] == RESERVED and buf.version[i] >= min_version:
                    return buf, i
        return None


class LiteralShiftNoRelabel(SlotTable):
    def relabel(self, buf: Buffer, hole: int) -> list[Move]:
        return []  # MUTANT: the source's literal rule (correction 1 left out)


class RelabelLast(SlotTable):
    def relabel(self, buf: Buffer, hole: int) -> list[Move]:
        # MUTANT: the *last* reservation before the hole takes it, not the first of the run.
        for i in range(hole - 1, -1, -1):
            if buf.state[i] == RESERVED:
                return [self._move(buf, i, buf, hole, MoveReason.RELABEL)]
        return []


class PlaceLatest(SlotTable):
    def place(self, unit_id: UnitId) -> SlotRef:
        v_traj = self.v_traj[unit_id]
        last = min(self.top, v_traj + self.eta)
        for v in range(last, self.head - 1, -1):  # MUTANT: latest legal buffer first
            buf = self.buffers[v]
            if buf.n_empty and not self.ready(buf):
                i = buf.state.find(EMPTY)
                self._put(buf, i, OCCUPIED, unit_id, v_traj)
                return SlotRef(v, i)
        raise AssertionError(f"no legal EMPTY slot for finished unit {unit_id!r}")


class PlaceIntoReady(SlotTable):
    def place(self, unit_id: UnitId) -> SlotRef:
        v_traj = self.v_traj[unit_id]
        last = min(self.top, v_traj + self.eta)
        for v in range(self.head, last + 1):
            buf = self.buffers[v]
            if buf.n_empty:  # MUTANT: a READY buffer's spare slot accepts finished units
                i = buf.state.find(EMPTY)
                self._put(buf, i, OCCUPIED, unit_id, v_traj)
                return SlotRef(v, i)
        raise AssertionError(f"no legal EMPTY slot for finished unit {unit_id!r}")


class NoClose(SlotTable):
    def close_ready(self, buf: Buffer) -> tuple[list[Move], list[UnitId]]:
        return [], []  # MUTANT: READY buffers keep their reservations (correction 2 left out)


class CloseAbortsSilently(SlotTable):
    def close_ready(self, buf: Buffer) -> tuple[list[Move], list[UnitId]]:
        moves: list[Move] = []
        for i, state in enumerate(buf.state):
            if state != RESERVED:
                continue
            unit_id = buf.unit[i]
            target = self.relocation_target(buf.v, self.v_traj[unit_id])  # type: ignore[index]
            if target is None:
                self.release(unit_id)  # type: ignore[arg-type]
                self.discard(unit_id)  # type: ignore[arg-type]
                # MUTANT: the dropped unit is not reported, so nobody marks it ABORTED
            else:
                dst = self.buffers[target.buffer]
                moves.append(self._move(buf, i, dst, target.index, MoveReason.CLOSE))
        return moves, []


class NoFillHoles(SlotTable):
    def fill_holes(self) -> tuple[list[Move], list[UnitId]]:
        return [], []  # MUTANT: filter/abort leave their hole; later finished units stay put


class DonorFirstOccupied(SlotTable):
    def donor(self, hole_buf: Buffer, hole: int) -> tuple[Buffer, int] | None:
        for v in range(hole_buf.v, self.top + 1):
            buf = self.buffers[v]
            for i, state in enumerate(buf.state):  # MUTANT: first OCCUPIED, not last
                if state == OCCUPIED and (v > hole_buf.v or i > hole):
                    return buf, i
        return None


class ReadyEarly(SlotTable):
    def ready(self, buf: Buffer) -> bool:
        return buf.n_occ >= max(1, self.batch_size - 1)  # MUTANT: READY one unit early


class StreamLaterBuffer(SlotTable):
    def stream_head(self, handed: dict[UnitId, None] | set[UnitId]) -> tuple[BatchUnit, ...]:
        out = []
        for v in range(self.head, self.top + 1):  # MUTANT: every open buffer, not the head only
            buf = self.buffers[v]
            out += [BatchUnit(u, w, self.head - w)  # handed as if it trained in the head
                    for st, u, w in zip(buf.state, buf.unit, buf.version)
                    if st == OCCUPIED and u not in handed]
        return tuple(out)


class StreamNewestFirst(SlotTable):
    def stream_head(self, handed: dict[UnitId, None] | set[UnitId]) -> tuple[BatchUnit, ...]:
        buf = self.buffers.get(self.head)
        if buf is None or not buf.n_occ:
            return ()
        new = [e for st, e in zip(buf.state, buf.entry)
               if st == OCCUPIED and e.unit_id not in handed]  # type: ignore[union-attr]
        return tuple(new[-1:])  # type: ignore[arg-type]  # MUTANT: one unit, the newest


# ------------------------------------------------------------------ controller mutants ------

class AbortKeepsSlot(StalenessController):
    def _abort_one(self, unit_id: UnitId):  # type: ignore[override]
        # MUTANT: the unit is marked ABORTED but its RESERVED slot is never freed.
        self._end(unit_id, "abort")
        buf, i = self._table.where[unit_id]
        return SlotRef(buf.v, i), [], []


class ConsumeBeforeReady(StalenessController):
    def _head_ready(self) -> bool:
        buf = self._table.head_buffer()
        return buf is not None and buf.n_occ > 0  # MUTANT: any OCCUPIED unit will do


class PublishKeepsWindow(StalenessController):
    def _do_publish(self) -> None:
        version, head = self._version, self._table.head
        self._version += 1
        # MUTANT: the window does not grow (no open_through)
        self._log("publish", version=version, head=head)


class ConcurrencyUnchecked(StalenessController):
    def _can_reserve(self, unit_id: UnitId) -> bool:
        self._plan = self._table.plan_reserve(self._version)  # MUTANT: no max_concurrency
        return self._plan is not None


class StuckReleasesOne(StalenessController):
    def _do_release_stuck(self) -> None:
        t = self._table
        head = t.head
        buf = t.buffers[head]
        unit_id = buf.unit[buf.state.index(RESERVED)]
        _, moves, more = self._abort_one(unit_id)  # type: ignore[arg-type]
        # MUTANT: only the first reservation is released; the head can stay STUCK
        self._result = [unit_id, *more]
        self._log("release_stuck", version=self._version, head=head, moves=tuple(moves),
                  aborted=tuple(self._result))


class StreamWhileTraining(StalenessController):
    def stream(self) -> tuple[BatchUnit, ...]:
        if self._phase == "TRAINING":  # MUTANT: the phase guard is skipped while training
            return self._result if self._can_stream() and self._do_stream() is None else ()
        return super().stream()


# filter's lifecycle edge with STREAMED added: a handed unit may be filtered (after the trainer
# took its gradient, so the batch and what was trained disagree).
_FILTER_ANY = {UnitState.FINISHED: UnitState.FILTERED, UnitState.STREAMED: UnitState.FILTERED}


class FilterStreamed(StalenessController):
    def _require(self, operation: str, unit_id: UnitId) -> None:
        self._check_id(operation, unit_id)
        state = self._state_of(unit_id)
        if state is None:
            raise UnknownUnit(operation, unit_id)
        edges = _FILTER_ANY if operation == "filter" else UNIT_LIFECYCLE[operation]  # MUTANT
        if state not in edges:
            raise IllegalUnitState(operation, unit_id, state.value)

    def _end(self, unit_id: UnitId, operation: str) -> None:
        record = self._state_of(unit_id)
        edges = _FILTER_ANY if operation == "filter" else UNIT_LIFECYCLE[operation]  # MUTANT
        state = edges[record]  # type: ignore[index]
        self._units[unit_id] = state
        self._count(state, 1)


class ConsumeLeavesOutStreamed(StalenessController):
    def _do_consume(self) -> None:
        head = self._table.head
        entries = self._table.take_head()
        self._end_batch(len(entries), head)
        handed = tuple(self._streamed)
        # MUTANT: the batch is only the units the trainer has not had yet
        batch = Batch(head, tuple(e for e in entries if e.unit_id not in self._streamed), handed)
        self._streamed = {}
        self._last_batch = batch
        self._result = batch
        self._log("consume", version=self._version, head=head, batch=batch)


class TruncatePlacesLate(StalenessController):
    def _truncate_one(self, unit_id: UnitId) -> tuple[list[Move], list[UnitId]]:
        t = self._table
        gap = t.release(unit_id)
        moves = t.shift_into(gap)
        v_traj = t.v_traj[unit_id]
        # MUTANT: the truncated unit takes the *latest* legal EMPTY slot (as a reservation
        # would), not occupy's earliest: it can land later than its reservation
        for v in range(min(t.top, v_traj + t.eta), t.head - 1, -1):
            buf = t.buffers[v]
            if buf.n_empty and not t.ready(buf):
                i = buf.state.find(EMPTY)
                t._put(buf, i, OCCUPIED, unit_id, v_traj)
                slot = SlotRef(buf.v, i)
                break
        aborted: list[UnitId] = []
        if t.ready(buf):
            closing_moves, aborted = t.close_ready(buf)
            moves.extend(closing_moves)
        self._finish(unit_id, slot.buffer)
        for u in aborted:
            self._end(u, "abort")
        return [Move(unit_id, gap, slot, MoveReason.TRUNCATE), *moves], aborted


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("staleness_off_by_one", "a reservation may shift into a buffer one beyond "
           "v_traj + eta", "staleness: legal(b, u) iff head <= b <= v_traj + eta",
           _with_table(StalenessOffByOne)),
    Mutant("reserve_earliest", "Reserve takes the earliest legal buffer instead of the latest",
           "Reserve: latest legal, not-READY buffer", _with_table(ReserveEarliest)),
    Mutant("reserve_first_empty", "Reserve takes the first EMPTY slot of the buffer, not the "
           "last", "Reserve: last EMPTY slot of the buffer", _with_table(ReserveFirstEmpty)),
    Mutant("reserve_into_ready", "Reserve may use a READY buffer's spare slot",
           "Reserve: not-READY buffers only (§6.6)", _with_table(ReserveIntoReady),
           oversampling=True),
    Mutant("occupy_without_shift", "the gap a finished (or aborted) unit leaves is never taken "
           "by an earlier reservation", "Occupy (b): shift", _with_table(NoShift)),
    Mutant("shift_after_gap", "the shift takes a reservation after the gap instead of before it",
           "Occupy (b): first reservation strictly before the gap", _with_table(ShiftAfterGap)),
    Mutant("literal_shift_no_relabel", "the source's literal shift: no within-buffer relabel "
           "after a reservation leaves a buffer", "correction 1: relabel",
           _with_table(LiteralShiftNoRelabel)),
    Mutant("relabel_last", "relabel moves the last reservation before the hole instead of the "
           "first of the run", "correction 1: relabel takes the first reservation",
           _with_table(RelabelLast)),
    Mutant("place_latest", "a finished unit goes to the latest legal EMPTY slot",
           "Occupy (c): earliest legal EMPTY slot", _with_table(PlaceLatest)),
    Mutant("place_into_ready", "a finished unit may land in a READY buffer's spare slot",
           "Occupy (c): not-READY buffers only (§6.6)", _with_table(PlaceIntoReady),
           oversampling=True),
    Mutant("ready_not_closed", "READY buffers keep their reservations under oversampling",
           "correction 2: close READY buffers", _with_table(NoClose), oversampling=True),
    Mutant("close_aborts_silently", "closing drops a reservation without reporting it",
           "correction 2 / conservation: aborts are explicit", _with_table(CloseAbortsSilently),
           oversampling=True),
    Mutant("filter_without_refill", "filter/abort leave their hole (no forward refill)",
           "Filter/Abort: later OCCUPIED units move forward", _with_table(NoFillHoles)),
    Mutant("donor_first_occupied", "the forward refill takes the first OCCUPIED unit of the "
           "donor buffer, not the last", "Filter/Abort: refill from the last OCCUPIED slot",
           _with_table(DonorFirstOccupied)),
    Mutant("ready_one_early", "a buffer counts as READY with batch_size - 1 OCCUPIED",
           "status: READY at batch_size OCCUPIED", _with_table(ReadyEarly)),
    Mutant("abort_keeps_slot", "abort marks the unit ABORTED but never frees its slot",
           "Abort: free the slot as Occupy (a)+(b)", _with_controller(AbortKeepsSlot)),
    Mutant("consume_before_ready", "the trainer may consume a head buffer that is not READY",
           "Consume: head buffer READY", _with_controller(ConsumeBeforeReady)),
    Mutant("publish_keeps_window", "publish advances the version but opens no new buffer",
           "Publish: the window grows by one buffer", _with_controller(PublishKeepsWindow)),
    Mutant("concurrency_unchecked", "admission ignores max_concurrency",
           "Reserve: in-flight < max_concurrency", _with_controller(ConcurrencyUnchecked)),
    Mutant("release_stuck_one", "the stuck-head timeout aborts only the first reservation",
           "Abort timeout (§6.2): abort all reservations of a STUCK head",
           _with_controller(StuckReleasesOne)),
    Mutant("stream_later_buffer", "stream also hands finished units of buffers after the head",
           "Stream (§3.8): the head buffer only", _with_table(StreamLaterBuffer), streaming=True),
    Mutant("stream_newest_first", "stream hands one unit per call, the newest: a refill can "
           "then move a handed unit", "Stream (§3.8): every new unit of the head, in slot order",
           _with_table(StreamNewestFirst), streaming=True),
    Mutant("stream_while_training", "stream runs while a batch trains (its weights do not "
           "exist yet)", "Stream (§3.8): trainer IDLE", _with_controller(StreamWhileTraining),
           streaming=True),
    Mutant("filter_streamed", "filter accepts a unit already handed to the trainer",
           "Stream (§3.8): a STREAMED unit cannot be filtered", _with_controller(FilterStreamed),
           streaming=True),
    Mutant("consume_leaves_out_streamed", "consume's batch holds only the units not streamed",
           "Stream (§3.8): the batch is the whole head buffer",
           _with_controller(ConsumeLeavesOutStreamed), streaming=True),
)}


# Mutants of the STUCK release's options (spec §6.2, "Options of the release"): they misbehave
# only with Config.stuck_action="truncate", so they run on their own configurations
# (proofs/test_stuck_options.py) and stay out of ``MUTANTS``, whose every member the porting
# kit's mutant traces classify (tests/porting/test_mutants.py).
STUCK_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("truncate_places_late", "a truncated unit takes the latest legal EMPTY slot, not "
           "occupy's earliest (it may land after its reservation)",
           "truncate (§6.2): occupy's rule, no later than the reservation",
           _with_controller(TruncatePlacesLate)),
)}
