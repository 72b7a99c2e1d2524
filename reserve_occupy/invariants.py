"""The protocol's invariants, by name, as checks over a ``Snapshot``.

Each check returns None when the invariant holds, or a sentence saying where it fails. They read
only the snapshot, so the same functions judge the real controller, a mutant of it, a state built
by a model checker, or a state rebuilt from another implementation's trace. ``INVARIANTS`` is the
catalogue spec/PROTOCOL.md refers to; ``check_snapshot`` raises on the first failure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from .errors import InvariantViolation
from .types import BufferStatus, Phase, SlotState, Snapshot, UnitState

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
