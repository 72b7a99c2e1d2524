"""Compare one logged event with the reference controller's outcome, field by field.

Only fields the trace logged are compared (an implementation need not log slots or moves), with
one exception: ``aborted`` is a decision, so an absent list means "aborted nothing". Lists whose
order carries no meaning (aborted units, batch members) are compared as sets; moves are compared
in order because each one depends on the previous. Every difference names the protocol rule that
decides that field, so a porter knows where to look.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from reserve_occupy import Event
from reserve_occupy.trace import TraceEntry

# (op, field) -> the rule that decides it, in spec/PROTOCOL.md's words.
RULES: dict[tuple[str, str], str] = {
    ("reserve", "decision"): "Reserve guard: admission waits only when in-flight = max_concurrency "
                             "or no legal, not-READY buffer has an EMPTY slot",
    ("reserve", "slot"): "Reserve: the latest legal, not-READY buffer with an EMPTY slot, and "
                         "its last EMPTY slot",
    ("reserve", "v_traj"): "Reserve: a unit is stamped with the latest published version",
    ("occupy", "slot"): "Occupy (c): the finished unit takes the earliest EMPTY slot of a "
                        "legal, not-READY buffer",
    ("occupy", "v_traj"): "a unit keeps the version it was reserved with",
    ("release_stuck", "aborted"): "release_stuck: abort every reservation of a STUCK head buffer",
    ("release_stuck", "decision"): "release_stuck acts only when the trainer is idle and the "
                                   "head buffer is STUCK",
    ("consume", "decision"): "Consume: allowed exactly when the trainer is idle and the head "
                             "buffer is READY",
    ("consume", "batch"): "Consume: the batch is the head buffer's batch_size OCCUPIED units",
    ("consume", "streamed"): "Consume: the batch names as streamed exactly the units stream "
                             "handed from its buffer",
    ("stream", "decision"): "Stream: allowed exactly when streaming is on, the trainer is idle "
                            "and the head buffer holds an OCCUPIED unit not handed yet",
    ("stream", "batch"): "Stream: the head buffer's OCCUPIED units not handed yet",
    ("abort", "slot"): "Abort: the unit's RESERVED slot is freed",
    ("filter", "slot"): "Filter: the unit's OCCUPIED slot is freed",
    ("*", "version"): "window: version counts publishes",
    ("*", "head"): "window: head is the next buffer to consume (version while idle, "
                   "version + 1 while training)",
    ("*", "aborted"): "Oversampling (correction 2): a buffer that becomes READY closes its spare "
                      "slots; a reservation with no later legal EMPTY slot is aborted",
    ("*", "error"): "the reference refuses this operation in this state",
}
MOVE_RULES = {
    "shift": "Occupy/Abort (b): the first RESERVED slot before the gap whose unit may legally "
             "sit in the gap's buffer moves into the gap (one move, no cascade)",
    "relabel": "correction 1: after a reservation leaves a buffer, the first reservation of "
               "that buffer takes its slot so the buffer reads O* E* R*",
    "fill": "Abort/Filter: the earliest hole takes the last OCCUPIED unit of the earliest "
            "later buffer, repeatedly",
    "close": "Oversampling (correction 2): reservations leave a READY buffer for the latest "
             "legal EMPTY slot of a later buffer",
    "truncate": "release_stuck with stuck_action truncate (§6.2): each reservation of the head, "
                "front to back, is finished by Occupy's rule (earliest legal EMPTY slot)",
}


def rule_for(op: str, field: str) -> str:
    return RULES.get((op, field)) or RULES.get(("*", field), "")


class Difference(NamedTuple):
    field: str
    expected: Any
    actual: Any
    rule: str


def _slot(ref: Any) -> Any:
    if ref is None:
        return None
    return ref.buffer if ref.index is None else [ref.buffer, ref.index]


def _coarse(ref: Any) -> Any:
    """A slot reduced to its buffer (for traces that log buffers, not slot indices)."""
    return None if ref is None else ref._replace(index=None)


def _move(m: Any) -> str:
    return f"{m.unit_id!r} {_slot(m.src)}->{_slot(m.dst)} {m.reason.value}"


def _coarse_moves(moves: tuple) -> tuple:
    """Moves as a buffer-level implementation sees them: moves inside one buffer vanish."""
    return tuple(m._replace(src=_coarse(m.src), dst=_coarse(m.dst)) for m in moves
                 if m.src.buffer != m.dst.buffer)


def _unit_set(units: Any) -> list:
    return sorted(units, key=lambda u: (isinstance(u, str), u))


def _compare_moves(op: str, expected: tuple, actual: tuple) -> Difference | None:
    if expected == actual:
        return None
    for k in range(max(len(expected), len(actual))):
        e = expected[k] if k < len(expected) else None
        a = actual[k] if k < len(actual) else None
        if e != a:
            reason = (e or a).reason.value
            return Difference(f"moves[{k}]", _move(e) if e else "no further move",
                              _move(a) if a else "no further move", MOVE_RULES[reason])
    return None  # unreachable: unequal tuples differ somewhere


def _compare_batch(expected: Any, actual: Any, op: str = "consume",
                   streamed_logged: bool = False) -> list[Difference]:
    rule = rule_for(op, "batch")
    out = []
    if expected.version != actual.version:
        out.append(Difference("batch.version", expected.version, actual.version, rule))
    want = {u.unit_id: u.v_traj for u in expected.units}
    got = {u.unit_id: u.v_traj for u in actual.units}
    if set(want) != set(got) or len(actual.units) != len(got):
        out.append(Difference("batch.units", _unit_set(want), [u.unit_id for u in actual.units],
                              rule))
        return out
    want_stale = {u.unit_id: u.staleness for u in expected.units}
    for u in actual.units:
        if u.v_traj is not None and u.v_traj != want[u.unit_id]:
            out.append(Difference(f"batch unit {u.unit_id!r} v_traj", want[u.unit_id], u.v_traj,
                                  rule))
        elif u.staleness is not None and u.staleness != want_stale[u.unit_id]:
            out.append(Difference(f"batch unit {u.unit_id!r} staleness", want_stale[u.unit_id],
                                  u.staleness, rule))
    # ``streamed`` is optional on a consume (a runtime may track it itself); when logged, even
    # empty ("none streamed"), it must name exactly the units stream handed, each once.
    if streamed_logged and (set(expected.streamed) != set(actual.streamed)
                            or len(set(actual.streamed)) != len(actual.streamed)):
        out.append(Difference("batch.streamed", _unit_set(expected.streamed),
                              list(actual.streamed), rule_for(op, "streamed")))
    return out


def differences(expected: Event, entry: TraceEntry, coarse: bool = False) -> list[Difference]:
    """What the logged event says differently from the reference's ``expected`` event.
    ``coarse``: the trace places units in buffers, not slots (header ``granularity: buffer``);
    slots are then compared by buffer and moves inside one buffer are not expected."""
    actual, logged, op = entry.event, entry.logged, entry.op
    coarse = coarse or (actual.slot is not None and actual.slot.index is None) or any(
        m.src.index is None or m.dst.index is None for m in actual.moves)
    out: list[Difference] = []
    moved = None
    if "moves" in logged:
        want_moves, got_moves = expected.moves, actual.moves
        if coarse:
            want_moves, got_moves = _coarse_moves(want_moves), _coarse_moves(got_moves)
        moved = _compare_moves(op, want_moves, got_moves)
    # Differences come in the order the rules act, so that the first one names the cause: an
    # occupy shifts before it places (a wrong shift moves the placement too) and closes after;
    # abort and filter free their slot first, then move units.
    early = moved is not None and op == "occupy" and moved.rule != MOVE_RULES["close"]
    for name in ("version", "head", "v_traj", "slot"):
        if name == "slot" and early:
            out.append(moved)  # type: ignore[arg-type]
        if name in logged:
            want, got = getattr(expected, name), getattr(actual, name)
            if name == "slot" and coarse:
                want, got = _coarse(want), _coarse(got)
            if want != got:
                out.append(Difference(name, _slot(want) if name == "slot" else want,
                                      _slot(got) if name == "slot" else got, rule_for(op, name)))
    if moved is not None and not early:
        out.append(moved)
    if op in ("occupy", "abort", "filter", "release_stuck") and (
            set(expected.aborted) != set(actual.aborted)
            or len(actual.aborted) != len(set(actual.aborted))):
        out.append(Difference("aborted", _unit_set(expected.aborted), list(actual.aborted),
                              rule_for(op, "aborted")))
    if op in ("consume", "stream"):
        out.extend(_compare_batch(expected.batch, actual.batch, op,
                                  "batch.streamed" in logged))
    return out
