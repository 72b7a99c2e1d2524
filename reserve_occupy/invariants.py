"""The protocol's invariants, by name, as checks over a ``Snapshot``.

Each check returns None when the invariant holds, or a sentence saying where it fails. They read
only the snapshot, so the same functions judge the real controller, a mutant of it, a state built
by a model checker, or a state rebuilt from another implementation's trace. ``INVARIANTS`` is the
catalogue spec/PROTOCOL.md refers to; ``check_snapshot`` raises on the first failure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import InvariantViolation
from .table import EMPTY, NO_VERSION, OCCUPIED, RESERVED
from .types import BatchUnit, BufferStatus, Phase, SlotState, Snapshot, UnitState

if TYPE_CHECKING:
    from .machine import StalenessController

E, R, O = SlotState.EMPTY, SlotState.RESERVED, SlotState.OCCUPIED
_RANK = {O: 0, E: 1, R: 2}


def window(s: Snapshot) -> str | None:
    """head = version when idle, version + 1 while training; open buffers are exactly
    head .. version + eta (buffers are consumed strictly in order, the window grows on publish)."""
    expected_head = s.version if s.phase is Phase.IDLE else s.version + 1
    if s.head != expected_head:
        return f"head={s.head} but version={s.version} and phase={s.phase.value}"
    expected = list(range(s.head, s.version + s.config.max_staleness + 1))
    got = [b.v_buffer for b in s.buffers]
    if got != expected:
        return f"open buffers {got}, expected {expected}"
    return None


def capacity(s: Snapshot) -> str | None:
    """Every buffer has exactly `capacity` slots and at most batch_size OCCUPIED."""
    for b in s.buffers:
        if len(b.slots) != s.config.capacity:
            return f"buffer {b.v_buffer} has {len(b.slots)} slots, capacity {s.config.capacity}"
        n_occ = sum(1 for st, _ in b.slots if st is O)
        if n_occ > s.config.batch_size:
            return f"buffer {b.v_buffer} holds {n_occ} OCCUPIED > batch_size"
    return None


def status(s: Snapshot) -> str | None:
    """Each buffer's status is the one its slots imply (READY at batch_size OCCUPIED)."""
    for b in s.buffers:
        n_occ = sum(1 for st, _ in b.slots if st is O)
        if n_occ >= s.config.batch_size:
            want = BufferStatus.READY
        elif any(st is E for st, _ in b.slots):
            want = BufferStatus.PENDING
        else:
            want = BufferStatus.STUCK
        if b.status is not want:
            return f"buffer {b.v_buffer} reports {b.status.value}, slots say {want.value}"
    return None


def ordering(s: Snapshot) -> str | None:
    """Inside each buffer the slots read OCCUPIED* EMPTY* RESERVED*."""
    for b in s.buffers:
        ranks = [_RANK[st] for st, _ in b.slots]
        if ranks != sorted(ranks):
            return f"buffer {b.v_buffer} reads {b.render()}"
    return None


def closure(s: Snapshot) -> str | None:
    """A READY buffer holds no reservation (its spare slots are closed)."""
    for b in s.buffers:
        if b.status is BufferStatus.READY and any(st is R for st, _ in b.slots):
            return f"READY buffer {b.v_buffer} still holds a reservation: {b.render()}"
    return None


def staleness(s: Snapshot) -> str | None:
    """Every reserved or occupied unit sits in a buffer v with v_traj <= v <= v_traj + eta; the
    last consumed batch has staleness in [0, eta]."""
    eta = s.config.max_staleness
    v_traj = {u.unit_id: u.v_traj for u in s.units}
    for b in s.buffers:
        for st, u in b.slots:
            if st is E or u not in v_traj:
                continue  # unknown units are conservation's business
            v = v_traj[u]
            if not (v <= b.v_buffer <= v + eta):
                return f"unit {u!r} (v_traj={v}) sits in buffer {b.v_buffer}, eta={eta}"
    batch = s.last_batch
    if batch is not None:
        for unit in batch.units:
            if not (0 <= unit.staleness <= eta) or unit.staleness != batch.version - unit.v_traj:
                return f"batch {batch.version} trained {unit} with eta={eta}"
    return None


def batch(s: Snapshot) -> str | None:
    """The last consumed batch has exactly batch_size distinct units and was the buffer just
    before head (buffers are consumed strictly in order)."""
    b = s.last_batch
    if b is None:
        return None
    if len(b.units) != s.config.batch_size:
        return f"batch {b.version} has {len(b.units)} units, batch_size {s.config.batch_size}"
    if len({u.unit_id for u in b.units}) != len(b.units):
        return f"batch {b.version} repeats a unit"
    if b.version != s.head - 1:
        return f"last batch is buffer {b.version} but head is {s.head}"
    return None


def conservation(s: Snapshot) -> str | None:
    """Each in-flight unit owns exactly one RESERVED slot, each finished unconsumed unit exactly
    one OCCUPIED slot, no slot holds an unknown or ended unit, and every admitted unit is live,
    consumed, aborted or filtered."""
    seen: Counter = Counter()
    where: dict = {}
    for b in s.buffers:
        for st, u in b.slots:
            if st is E:
                if u is not None:
                    return f"EMPTY slot of buffer {b.v_buffer} names unit {u!r}"
                continue
            seen[u] += 1
            where[u] = st
    for u, n in seen.items():
        if n > 1:
            return f"unit {u!r} holds {n} slots"
    live = {u.unit_id: u for u in s.units}
    for u, st in where.items():
        if u not in live:
            return f"slot holds unit {u!r} that is not live"
    for u, view in live.items():
        want = R if view.state is UnitState.IN_FLIGHT else O
        if where.get(u) is not want:
            return f"{view.state.value} unit {u!r} holds {where.get(u)} instead of one {want.name}"
    total = len(live) + s.consumed + s.aborted + s.filtered
    if total != s.admitted:
        return (f"admitted {s.admitted} != live {len(live)} + consumed {s.consumed} + "
                f"aborted {s.aborted} + filtered {s.filtered}")
    return None


def streamed(s: Snapshot) -> str | None:
    """Every STREAMED unit (handed to the trainer by stream) is OCCUPIED in buffer head, so the
    next consumed batch contains it; none exists while training or without Config.streaming; the
    last batch's ``streamed`` units are units of that batch."""
    handed = [u.unit_id for u in s.units if u.state is UnitState.STREAMED]
    if handed:
        if not s.config.streaming:
            return f"unit {handed[0]!r} is STREAMED but Config.streaming is off"
        if s.phase is not Phase.IDLE:
            return f"unit {handed[0]!r} is STREAMED while the trainer is {s.phase.value}"
        head = s.buffers[0] if s.buffers and s.buffers[0].v_buffer == s.head else None
        in_head = set() if head is None else {u for st, u in head.slots if st is O}
        for u in handed:
            if u not in in_head:
                return f"STREAMED unit {u!r} is not OCCUPIED in head buffer {s.head}"
    b = s.last_batch
    if b is not None and b.streamed:
        if not s.config.streaming:
            return f"batch {b.version} has streamed units but Config.streaming is off"
        ids = set(b.unit_ids)
        if len(set(b.streamed)) != len(b.streamed) or not ids.issuperset(b.streamed):
            return f"batch {b.version} streamed {list(b.streamed)}, not distinct units of it"
    return None


def concurrency(s: Snapshot) -> str | None:
    """At most max_concurrency units are in flight."""
    limit = s.config.max_concurrency
    if limit is not None and s.in_flight > limit:
        return f"{s.in_flight} units in flight > max_concurrency {limit}"
    return None


def prefix(s: Snapshot) -> str | None:
    """Across open buffers no EMPTY slot of a not-READY buffer precedes an OCCUPIED slot, so
    buffers fill in order."""
    hole = None
    for b in s.buffers:
        for i, (st, _) in enumerate(b.slots):
            if st is E and b.status is not BufferStatus.READY and hole is None:
                hole = (b.v_buffer, i)
            elif st is O and hole is not None:
                return f"EMPTY slot {hole} precedes OCCUPIED slot ({b.v_buffer}, {i})"
    return None


def no_deadlock(s: Snapshot) -> str | None:
    """With the trainer idle and nothing in flight, admission is possible or the head buffer
    is READY."""
    if s.phase is not Phase.IDLE or s.in_flight:
        return None
    head = s.buffers[0] if s.buffers else None
    if head is not None and head.status is BufferStatus.READY:
        return None
    for b in s.buffers:  # all open buffers are legal for a unit admitted now
        if b.status is not BufferStatus.READY and any(st is E for st, _ in b.slots):
            return None
    return "trainer idle, nothing in flight, head not READY and no slot to reserve"


INVARIANTS: dict[str, Callable[[Snapshot], str | None]] = {
    "window": window,
    "capacity": capacity,
    "status": status,
    "ordering": ordering,
    "closure": closure,
    "staleness": staleness,
    "batch": batch,
    "conservation": conservation,
    "streamed": streamed,
    "concurrency": concurrency,
    "prefix": prefix,
    "no_deadlock": no_deadlock,
}


def violations(s: Snapshot) -> list[tuple[str, str]]:
    """Every invariant that fails on ``s``, as (name, detail) pairs."""
    out = []
    for name, check in INVARIANTS.items():
        detail = check(s)
        if detail is not None:
            out.append((name, detail))
    return out


def check_snapshot(s: Snapshot) -> None:
    for name, check in INVARIANTS.items():
        detail = check(s)
        if detail is not None:
            raise InvariantViolation(name, detail)


def check_controller(c: StalenessController) -> None:
    """Snapshot invariants plus the controller's private indexes agreeing with its slots."""
    check_snapshot(c.snapshot())
    t = c._table
    for u, (buf, i) in t.where.items():
        if buf.unit[i] != u or buf.state[i] != RESERVED or t.buffers.get(buf.v) is not buf:
            raise InvariantViolation("conservation", f"index says {u!r} at ({buf.v}, {i})")
    for v, buf in t.buffers.items():
        if (buf.state.count(OCCUPIED), buf.state.count(RESERVED)) != (buf.n_occ, buf.n_res):
            raise InvariantViolation("conservation", f"buffer {v} counters out of step")
        # the indexes the hot paths read instead of scanning: versions, reservation counts per
        # version, finished units' slots and prebuilt batch entries
        reserved = [w for st, w in zip(buf.state, buf.version) if st == RESERVED]
        occupied = {u: i for i, (st, u) in enumerate(zip(buf.state, buf.unit)) if st == OCCUPIED}
        entries = {i: BatchUnit(u, buf.version[i], v - buf.version[i])
                   for u, i in occupied.items()}
        if (any((st == EMPTY) != (w == NO_VERSION) for st, w in zip(buf.state, buf.version))
                or buf.res_versions != Counter(reserved) or buf.pos != occupied
                or any(buf.entry[i] != e for i, e in entries.items())
                or any(e is not None for i, e in enumerate(buf.entry) if i not in entries)
                or any(t.v_traj.get(buf.unit[i]) != w for i, (st, w)
                       in enumerate(zip(buf.state, buf.version)) if st == RESERVED)):
            raise InvariantViolation("conservation", f"buffer {v} indexes out of step")
    states = c._unit_states()
    in_table = len(t.where) + sum(len(b.pos) for b in t.buffers.values())
    live = sum(1 for st in states.values()
               if st in (UnitState.IN_FLIGHT, UnitState.FINISHED, UnitState.STREAMED))
    if in_table != live or set(t.v_traj) != set(t.where):
        raise InvariantViolation("conservation", "slot index and unit records disagree")
    if c.in_flight != sum(1 for st in states.values() if st is UnitState.IN_FLIGHT):
        raise InvariantViolation("conservation", "in-flight counter out of step")
    # A FINISHED unit is recorded by its buffer's number and reads CONSUMED once the controller's
    # watermark passed it (machine.py, "Unit records"): the watermark, the records and the
    # consumed counter are kept apart from the table, so each is checked against it here.
    if c._consumed_below != t.head:
        raise InvariantViolation("conservation", f"consumed watermark {c._consumed_below} but "
                                                 f"head {t.head}")
    consumed = 0
    for u, rec in c._units.items():
        if rec.__class__ is not int:
            if not (rec is UnitState.IN_FLIGHT or rec is UnitState.ABORTED
                    or rec is UnitState.FILTERED):  # FINISHED and CONSUMED are never stored
                raise InvariantViolation("conservation", f"unit {u!r} has record {rec!r}")
        elif rec < t.head:
            consumed += 1
        elif rec not in t.buffers or u not in t.buffers[rec].pos:
            raise InvariantViolation("conservation",
                                     f"finished unit {u!r} is recorded in buffer {rec}, not there")
    # The handed set is the controller's, kept apart from the slots: each unit in it must still
    # be a FINISHED record of the head buffer and OCCUPIED there (streamed, above, reads the
    # snapshot, which takes its STREAMED states from this same set).
    head_buf = t.buffers.get(t.head)
    for u in c._streamed:
        if c._units.get(u) != t.head or head_buf is None or u not in head_buf.pos:
            raise InvariantViolation("streamed", f"unit {u!r} was streamed but is not a finished "
                                                 f"unit of head buffer {t.head}")
    if c._streamed and c.phase is not Phase.IDLE:
        raise InvariantViolation("streamed", "units are streamed while the trainer trains")
    if consumed != c._consumed:
        raise InvariantViolation("conservation", f"{consumed} units recorded consumed, counter "
                                                 f"{c._consumed}")
