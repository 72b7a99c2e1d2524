"""The trace checker: accepts the reference's traces (full, stripped to the minimum, or logged by
buffer only) and rejects each kind of wrong trace with the field or invariant that is wrong."""

from __future__ import annotations

import copy
import json

import pytest

from reserve_occupy import Config
from reserve_occupy.trace import dumps, header
from reserve_occupy_porting.checker import check

from .conftest import CONFIGS, lines_of, records, reference_lines


def _strip(recs: list[dict], keep: set[str]) -> list[dict]:
    out = [recs[0]]
    for r in recs[1:]:
        out.append({k: v for k, v in r.items() if k in keep or (k == "aborted" and v)})
    return out


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("seed", [1, 2])
def test_reference_traces_conform(config: Config, seed: int) -> None:
    lines = reference_lines(config, seed, steps=250, group_size=seed, candidates=seed + 1)
    for mode in ("strict", "lenient"):
        report = check(lines, mode)
        assert report.ok, report.problem
        assert report.events == len(lines) - 1 and report.batches > 0
    # an implementation that logs only ops, units and batches is still checkable
    minimal = lines_of(_strip(records(lines), {"op", "unit", "batch", "refused"}))
    for mode in ("strict", "lenient"):
        report = check(minimal, mode)
        assert report.ok, report.problem
    assert "occupy.slot" in report.not_logged()


def test_buffer_granularity_trace_conforms(seed_trace: list[str]) -> None:
    """A port with per-buffer counters logs buffers, not slots, and no moves inside a buffer."""
    recs = records(seed_trace)
    recs[0]["granularity"] = "buffer"
    for r in recs[1:]:
        if "slot" in r:
            r["slot"] = r["slot"][0]
        if "moves" in r:
            r["moves"] = [{**m, "from": m["from"][0], "to": m["to"][0]} for m in r["moves"]
                          if m["from"][0] != m["to"][0]]
    assert check(lines_of(recs)).ok
    # but a wrong buffer is still caught
    k = next(i for i, r in enumerate(recs) if r["op"] == "reserve" and "slot" in r)
    recs[k]["slot"] += 1
    report = check(lines_of(recs))
    assert not report.ok and report.problem.differences[0].field == "slot"


def _first(recs: list[dict], pred) -> int:
    return next(i for i, r in enumerate(recs) if i and pred(r))


def _problem(recs: list[dict], mode: str = "strict"):
    report = check(lines_of(recs), mode)
    assert not report.ok, f"{mode} accepted the edited trace"
    return report.problem


def test_wrong_reserve_slot(seed_trace: list[str]) -> None:
    recs = records(seed_trace)
    k = _first(recs, lambda r: r["op"] == "reserve" and r.get("slot") == [1, 2])
    recs[k]["slot"] = [1, 1]
    p = _problem(recs)
    assert p.entry.line == k + 1 and p.differences[0].field == "slot"
    assert p.differences[0].expected == [1, 2] and "latest legal" in p.differences[0].rule
    assert check(lines_of(recs), "lenient").ok  # a legal slot: safe, just different


def test_wrong_occupy_slot_and_moves(seed_trace: list[str]) -> None:
    recs = records(seed_trace)
    k = _first(recs, lambda r: r["op"] == "occupy" and r["moves"])
    bad = copy.deepcopy(recs)
    bad[k]["moves"][0]["to"] = [9, 9]
    p = _problem(bad)
    assert p.differences[0].field == "moves[0]" and "shift" in p.differences[0].actual
    bad = copy.deepcopy(recs)
    bad[k]["slot"] = [bad[k]["slot"][0] + 1, 0]
    assert _problem(bad).differences[0].field == "slot"


def test_missing_closing_abort(seed_trace: list[str]) -> None:
    recs = records(seed_trace)
    k = _first(recs, lambda r: r["op"] == "occupy" and r["aborted"])
    recs[k]["aborted"] = []
    p = _problem(recs)
    assert [d.field for d in p.differences] == ["aborted"] and "closes" in p.differences[0].rule


def test_over_admission_is_a_capacity_violation() -> None:
    lines = reference_lines(Config(1, 2), 4, steps=200)
    recs = records(lines)
    k = _first(recs, lambda r: r["op"] == "reserve" and r.get("refused"))
    recs[k] = {"op": "reserve", "unit": recs[k]["unit"]}
    recs = recs[:k + 1]
    p = _problem(recs)
    assert p.differences[0].field == "decision" and "wait" in p.differences[0].expected
    assert p.violation.invariant == "capacity"
    assert _problem(recs, "lenient").violation.invariant == "capacity"


def test_concurrency_limit() -> None:
    recs = records(reference_lines(Config(2, 3, max_concurrency=2), 1, steps=200))
    k = _first(recs, lambda r: r["op"] == "reserve" and r.get("refused"))
    recs = recs[:k] + [{"op": "reserve", "unit": recs[k]["unit"]}]
    assert _problem(recs, "lenient").violation.invariant == "concurrency"


def test_wrong_batch(seed_trace: list[str]) -> None:
    recs = records(seed_trace)
    k = _first(recs, lambda r: r["op"] == "consume" and not r.get("refused"))
    in_flight = next(r["unit"] for r in recs[1:k] if r["op"] == "reserve" and "slot" in r
                     and not any(x.get("unit") == r["unit"] and x["op"] != "reserve"
                                 for x in recs[1:k]))
    bad = copy.deepcopy(recs)
    bad[k]["batch"]["units"][0] = {"unit": in_flight, "v_traj": 0}
    p = _problem(bad)
    assert p.differences[0].field == "batch.units"
    assert _problem(bad, "lenient").violation.invariant == "conservation"
    bad = copy.deepcopy(recs)
    bad[k]["batch"]["units"].pop()
    assert _problem(bad, "lenient").violation.invariant == "batch"
    bad = copy.deepcopy(recs)
    bad[k]["batch"]["version"] += 1
    for u in bad[k]["batch"]["units"]:
        u["staleness"] += 1
    assert _problem(bad).differences[0].field == "batch.version"
    assert _problem(bad, "lenient").violation.invariant == "order"


def test_missing_publish_and_duplicate_reserve(seed_trace: list[str]) -> None:
    trace = [header(Config(1, 1)), {"op": "reserve", "unit": "a"},
             {"op": "reserve", "unit": "b"}, {"op": "occupy", "unit": "a"},
             {"op": "consume", "batch": {"version": 0, "units": [{"unit": "a"}]}},
             {"op": "occupy", "unit": "b"},
             {"op": "consume", "batch": {"version": 1, "units": [{"unit": "b"}]}}]
    p = _problem(trace)
    assert p.entry.line == 7 and p.differences[0].field == "error"
    assert "can't consume when trainer=TRAINING" in p.differences[0].expected
    lenient = _problem(trace, "lenient")
    assert lenient.violation.invariant == "order" and "still training" in lenient.violation.detail
    recs = records(seed_trace)
    j = _first(recs, lambda r: r["op"] == "reserve")
    bad = recs[:j + 1] + [{"op": "reserve", "unit": recs[j]["unit"]}]
    assert "already known" in _problem(bad).differences[0].expected
    assert _problem(bad, "lenient").violation.invariant == "conservation"


def test_wrong_stamp_and_window(seed_trace: list[str]) -> None:
    recs = records(seed_trace)
    k = _first(recs, lambda r: r["op"] == "reserve" and r.get("version") == 1 and "v_traj" in r)
    bad = copy.deepcopy(recs)
    bad[k]["v_traj"] = 0
    assert _problem(bad).differences[0].field == "v_traj"
    assert _problem(bad, "lenient").violation.invariant == "staleness"
    bad = copy.deepcopy(recs)
    bad[k]["head"] += 1
    assert _problem(bad).differences[0].field == "head"
    assert _problem(bad, "lenient").violation.invariant == "window"


def test_stale_unit_is_caught_in_both_modes() -> None:
    """eta=1, B=1: unit b (v0) is still live when buffer 1 is consumed without it."""
    trace = [header(Config(1, 1)), {"op": "reserve", "unit": "a"},
             {"op": "reserve", "unit": "b"}, {"op": "occupy", "unit": "a"},
             {"op": "consume", "batch": {"version": 0, "units": [{"unit": "a"}]}},
             {"op": "publish"}, {"op": "reserve", "unit": "c"}, {"op": "occupy", "unit": "c"},
             {"op": "consume", "batch": {"version": 1, "units": [{"unit": "c"}]}},
             {"op": "publish"}, {"op": "occupy", "unit": "b"},
             {"op": "consume", "batch": {"version": 2, "units": [{"unit": "b"}]}}]
    lenient = _problem(trace, "lenient")
    assert lenient.violation.invariant == "staleness" and lenient.entry.line == 9
    assert "can never train within eta" in lenient.violation.detail
    # without the early detection the consume itself is the violation
    strict = _problem(trace)
    assert strict.entry.line == 9 and strict.differences[0].field == "decision"
    late = trace[:8] + trace[10:]
    late[-1] = {"op": "consume", "batch": {"version": 1, "units": [{"unit": "b"}]}}
    assert check(lines_of(late), "lenient").ok  # b trained at staleness 1: legal


def test_problem_report_has_tables(seed_trace: list[str]) -> None:
    from reserve_occupy_porting.report import render_text

    recs = records(seed_trace)
    k = _first(recs, lambda r: r["op"] == "reserve" and r.get("slot") == [1, 2])
    recs[k]["slot"] = [1, 0]
    text = render_text(check(lines_of(recs)), "t.jsonl")
    assert "DIVERGES FROM THE REFERENCE" in text and f"line {k + 1}" in text
    assert "buffers before (reference):" in text and "(as the trace describes it)" in text
    assert "R(" in text and "rule: Reserve" in text
    json.dumps(__import__("reserve_occupy_porting.report", fromlist=["render_json"])
               .render_json(check(lines_of(recs)), "t"), default=str)


def test_header_only_and_dumps_round_trip() -> None:
    report = check([dumps(header(Config(1, 2)))])
    assert report.ok and report.events == 0


def test_served_versions_catch_an_early_publish(seed_trace: list[str]) -> None:
    """A port that publishes before the weights are live stamps units one version too new; the
    versions the generators report (``served``) give it away, in both modes."""
    recs = records(seed_trace)
    for r in recs[1:]:
        if r["op"] == "occupy":
            r["served"] = [r["v_traj"], r["version"]]
    assert check(lines_of(recs)).ok and check(lines_of(recs), "lenient").ok
    k = _first(recs, lambda r: r["op"] == "occupy" and r["v_traj"] == 1)
    recs[k]["served"] = [0, 1]
    for mode in ("strict", "lenient"):
        p = _problem(recs, mode)
        assert p.entry.line == k + 1 and p.violation.invariant == "staleness"
        assert "published before those weights were live" in p.violation.detail
