"""Text and JSON reports of a trace check: the verdict, the differences with the rules that
decide them, and the buffer tables before and after the offending event -- the reference's
after-table next to the one the trace describes, when the trace logs enough to draw it."""

from __future__ import annotations

from typing import Any

from reserve_occupy import Snapshot
from reserve_occupy.trace import TraceEntry, dumps, event_to_record, refused_record

from .checker import Problem, Report

EXIT_OK, EXIT_FAIL, EXIT_UNREADABLE = 0, 1, 2


def logged_record(entry: TraceEntry) -> dict[str, Any]:
    """The entry's fields as the trace logged them (without wall time or annotations)."""
    e = entry.event
    if entry.refused:
        return refused_record(e.op, e.unit_id, e.version, e.head)
    record = event_to_record(e)
    out = {k: v for k, v in record.items() if k in entry.logged or (k == "aborted" and v)}
    if "batch" in out:  # a batch unit's optional v_traj/staleness: shown only where logged
        out["batch"]["units"] = [{k: v for k, v in u.items() if v is not None}
                                 for u in out["batch"]["units"]]
    if entry.served is not None:
        out["served"] = list(entry.served)
    if "batch.streamed" in entry.logged:  # logged, even empty ("none streamed")
        out["batch"]["streamed"] = list(e.batch.streamed)  # type: ignore[union-attr]
    return out


def _table(s: Snapshot) -> dict[int, list[list[Any]]]:
    return {b.v_buffer: [[st.value, u] for st, u in b.slots] for b in s.buffers}


def _find(table: dict[int, list[list[Any]]], unit: Any) -> tuple[int, int] | None:
    for v, slots in table.items():
        for i, (st, u) in enumerate(slots):
            if st != "E" and u == unit:
                return v, i
    return None


def _clear(table: dict[int, list[list[Any]]], unit: Any) -> bool:
    at = _find(table, unit)
    if at is None:
        return False
    table[at[0]][at[1]] = ["E", None]
    return True


def described_after(before: Snapshot, entry: TraceEntry) -> dict[int, list[list[Any]]] | None:
    """Apply what the trace says happened to the reference's before-table. None when the trace
    does not log enough (no slot) or its moves do not fit the table."""
    e, table = entry.event, _table(before)
    if entry.refused or ("slot" not in entry.logged and e.op != "consume"):
        return None
    refs = [e.slot] + [m.src for m in e.moves] + [m.dst for m in e.moves]
    if any(r is not None and r.index is None for r in refs):
        return None  # logged by buffer only: no slot picture to draw
    try:
        if e.op == "consume":
            table.pop(before.head, None)
            return table
        if e.op in ("occupy", "abort", "filter") and not _clear(table, e.unit_id):
            return None
        for m in e.moves:
            src = table[m.src.buffer][m.src.index]
            if src[1] != m.unit_id or table[m.dst.buffer][m.dst.index][0] != "E":
                return None
            table[m.dst.buffer][m.dst.index] = src
            table[m.src.buffer][m.src.index] = ["E", None]
        if e.op in ("reserve", "occupy"):
            slot = table[e.slot.buffer][e.slot.index]  # type: ignore[union-attr]
            if slot[0] != "E":
                return None
            table[e.slot.buffer][e.slot.index] = ["R" if e.op == "reserve" else "O", e.unit_id]
        for u in e.aborted:
            _clear(table, u)
    except (KeyError, IndexError):
        return None  # the trace names a slot outside the reference's open buffers
    return table


def _render(table: dict[int, list[list[Any]]], batch_size: int) -> list[str]:
    lines = []
    for v in sorted(table):
        cells = " ".join("_" if st == "E" else f"{st}({u})" for st, u in table[v])
        n_occ = sum(1 for st, _ in table[v] if st == "O")
        status = "READY" if n_occ >= batch_size else (
            "PENDING" if any(st == "E" for st, _ in table[v]) else "STUCK")
        lines.append(f"b{v} [{status:7}] {cells}")
    return lines


def _state(s: Snapshot, batch_size: int) -> list[str]:
    return ([f"version={s.version} head={s.head} phase={s.phase.value}"]
            + _render(_table(s), batch_size))


def _side_by_side(left: list[str], right: list[str], titles: tuple[str, str]) -> str:
    width = max([len(titles[0])] + [len(x) for x in left]) + 4
    rows = [f"    {titles[0]:<{width}}{titles[1]}"]
    for k in range(max(len(left), len(right))):
        a = left[k] if k < len(left) else ""
        b = right[k] if k < len(right) else ""
        rows.append(f"    {a:<{width}}{b}")
    return "\n".join(rows)


def _where(entry: TraceEntry) -> str:
    e = entry.event
    seq = f" (seq {e.seq})" if "seq" in entry.logged else ""
    unit = f" {e.unit_id!r}" if e.unit_id is not None else ""
    refused = " (refused)" if entry.refused else ""
    return f"line {entry.line}{seq}: {e.op}{unit}{refused}"


def render_problem(p: Problem, report: Report) -> str:
    out = [f"first problem at {_where(p.entry)}",
           f"  trace logged: {dumps(logged_record(p.entry))}"]
    if p.differences:
        out.append(f"  reference:    {p.expected}")
        for d in p.differences:
            out.append(f"  - {d.field}: reference {d.expected!s}, trace {d.actual!s}")
            if d.rule:
                out.append(f"      rule: {d.rule}")
    if p.violation:
        out.append(f"  violates invariant '{p.violation.invariant}': {p.violation.detail}")
    if p.before is not None and p.after is not None:
        b = report.config.batch_size
        out.append("  buffers before (reference):")
        out.append("\n".join("    " + line for line in _state(p.before, b)))
        ref_after = _state(p.after, b)
        described = described_after(p.before, p.entry)
        if described is not None and p.differences and described != _table(p.after):
            out.append("  buffers after:")
            out.append(_side_by_side(ref_after, ["(as the trace describes it)"]
                                     + _render(described, b), ("reference", "trace")))
        else:
            out.append("  buffers after (reference):")
            out.append("\n".join("    " + line for line in ref_after))
    elif p.tracked:
        out.append("  live units when the problem was found (" + (
            "a peer's log" if report.policy is not None else "lenient mode")
            + " tracks units, not slots):")
        out.append("\n".join("    " + line for line in p.tracked.splitlines()))
    return "\n".join(out)


def render_text(report: Report, name: str) -> str:
    c = report.config
    peer = report.policy is not None
    eta = _eta(report)
    # a peer's rule enforces its own eta (synchronous: 0), which the config's may not be
    config_eta = (f" (config max_staleness {c.max_staleness})"
                  if eta != c.max_staleness else "")
    params = (f"eta={eta}{config_eta} batch_size={c.batch_size} capacity={c.capacity} "
              f"max_concurrency={c.max_concurrency}")
    if report.ok:
        # CONFORMING is Reserve–Occupy conformance; a peer's log held its own rule, no more
        held = f"PEER RULE HELD ({report.policy})" if peer else f"CONFORMING ({report.mode})"
        verdict = (f"{name}: {held} -- {report.events} events, "
                   f"{report.units} units, {report.batches} batches, {params}")
        stats = (f"  largest staleness trained: {max(report.max_staleness, 0)} (eta "
                 f"{eta}); most units in flight: {report.max_in_flight}; "
                 f"live at the end: {report.live_at_end}")
        lines = [verdict, stats]
        if peer:
            lines.append(_peer_line(report))
        missing = report.not_logged()
        if missing and report.mode == "strict":
            lines.append(f"  not logged, so not compared: {', '.join(missing)}")
        return "\n".join(lines)
    what = "DIVERGES FROM THE REFERENCE" if report.problem.differences else "VIOLATES AN INVARIANT"
    if peer:
        return (f"{name}: PEER RULE BROKEN ({report.policy}) -- {params}\n"
                + render_problem(report.problem, report))  # type: ignore[arg-type]
    return (f"{name}: {what} ({report.mode}) -- {params}\n"
            + render_problem(report.problem, report))  # type: ignore[arg-type]


def _eta(report: Report) -> int:
    """The eta the check held the log to: a peer rule's own where one was named (synchronous:
    0), else the config's."""
    return report.config.max_staleness if report.eta is None else report.eta


def _peer_line(report: Report) -> str:
    """A peer's log: its rule, and the staleness it trained (over eta: reported, no failure
    for a rule that does not promise the bound)."""
    trained = ", ".join(f"{k}: {v}" for k, v in report.staleness.items()) or "none"
    eta = _eta(report)
    if report.bounded:
        bound = f"bounded by its rule: every unit trained within eta {eta}"
    else:
        bound = (f"not bounded by its rule: {report.over_eta} units trained staler than eta "
                 f"{eta} (the rule's own, not a protocol failure)")
    return (f"  policy {report.policy} ({bound}); trained staleness {{staleness: units}}: "
            f"{{{trained}}}; discarded untrained: {report.dropped} finished (filter), "
            f"{report.aborted} in flight (abort)")


def render_json(report: Report, name: str) -> dict[str, Any]:
    p = report.problem
    out: dict[str, Any] = {
        "file": name, "mode": report.mode, "ok": report.ok, "events": report.events,
        "units": report.units, "batches": report.batches,
        "max_staleness": report.max_staleness, "not_logged": report.not_logged(),
    }
    if report.policy is not None:  # a peer's log: "ok" is the rule held, not conformance
        out.update(policy=report.policy, bounded=report.bounded, eta=report.eta,
                   over_eta=report.over_eta, dropped=report.dropped,
                   aborted=report.aborted,
                   staleness={str(k): v for k, v in report.staleness.items()})
    if p is not None:
        out["problem"] = {
            "line": p.entry.line, "op": p.entry.op, "unit": p.entry.event.unit_id,
            "logged": logged_record(p.entry), "reference": p.expected,
            "differences": [{"field": d.field, "reference": d.expected, "trace": d.actual,
                             "rule": d.rule} for d in p.differences],
            "violation": None if p.violation is None else
            {"invariant": p.violation.invariant, "detail": p.violation.detail},
        }
    return out
