"""check-trace judges every field it reads: a field a trace logs is either compared with what the
events say or refused, never parsed and then ignored; and the peer checker accepts what the
trace format makes optional (a batch unit's ``v_traj``/``staleness``, a consume's ``streamed``)
and reports the eta the named rule enforces (synchronous: 0), not the config's."""

from __future__ import annotations

import copy
import json

import pytest

from reserve_occupy import Config
from reserve_occupy.trace import TraceFormatError, parse_record
from runtime.cli import main
from reserve_occupy_porting.checker import check
from reserve_occupy_porting.report import render_json, render_text

from .conftest import lines_of, records, reference_lines
from .test_trace import VALIDATOR

MODES = ("strict", "lenient")


def _edit(lines: list[str], edit) -> list[str]:
    recs = copy.deepcopy(records(lines))
    edit(recs)
    return lines_of(recs)


def _first(recs: list[dict], op: str, start: int = 0, **where) -> int:
    return next(i for i in range(start, len(recs)) if recs[i]["op"] == op
                and not recs[i].get("refused") and all(recs[i].get(k) == v
                                                       for k, v in where.items()))


def _streaming() -> list[str]:
    return reference_lines(Config(1, 3, streaming=True), 3, steps=250, stream=0.6, filter=0.4)


def _stream_then_consume(recs: list[dict]) -> tuple[int, int]:
    k = _first(recs, "stream")
    return k, _first(recs, "consume", k)


def _problem(report) -> str:
    p = report.problem
    assert p is not None, "the trace was called conforming"
    return p.differences[0].field if p.differences else p.violation.invariant


# ----------------------------------------------------------------------- served ----------

def test_served_newer_than_the_published_version_is_caught(tmp_path, capsys):
    lines = reference_lines(Config(1, 2), 3, steps=60)

    def late_publish(recs):
        k = _first(recs, "occupy")
        recs[k]["served"] = [recs[k]["v_traj"], recs[k]["version"] + 1]

    bad = _edit(lines, late_publish)
    for mode in MODES:  # before: CONFORMING in both modes
        report = check(bad, mode)
        assert _problem(report) == "window", mode
        assert "served" in report.problem.violation.detail
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(bad) + "\n")
    assert main(["check-trace", str(path)]) == 1
    assert "served" in capsys.readouterr().out

    def honest(recs):  # the published version itself is fine
        k = _first(recs, "occupy")
        recs[k]["served"] = [recs[k]["v_traj"], recs[k]["version"]]

    assert all(check(_edit(lines, honest), mode).ok for mode in MODES)


# ----------------------------------------------------------------------- streamed --------

def test_an_empty_streamed_list_after_a_stream_is_caught():
    def empty(recs):
        _, c = _stream_then_consume(recs)
        assert recs[c]["batch"]["streamed"]
        recs[c]["batch"]["streamed"] = []

    bad = _edit(_streaming(), empty)
    strict, lenient = check(bad, "strict"), check(bad, "lenient")
    # before: CONFORMING in both modes ("streamed": [] read as "not logged")
    assert _problem(strict) == "batch.streamed"
    assert _problem(lenient) == "streamed"
    text = render_text(strict, "t")
    assert '"streamed":[]' in text  # the report shows the empty list the trace logged

    def none(recs):  # where nothing was streamed, an empty list is right
        recs[_first(recs, "consume")]["batch"]["streamed"] = []

    plain = reference_lines(Config(1, 2), 3, steps=60)
    assert all(check(_edit(plain, none), mode).ok for mode in MODES)


def test_a_streamed_unit_named_twice_is_caught():
    def twice(recs):
        _, c = _stream_then_consume(recs)
        s = recs[c]["batch"]["streamed"]
        recs[c]["batch"]["streamed"] = s + s[:1]

    bad = _edit(_streaming(), twice)
    assert _problem(check(bad, "strict")) == "batch.streamed"
    assert _problem(check(bad, "lenient")) == "streamed"


def test_a_streams_batch_has_no_streamed_field():
    record = {"op": "stream", "batch": {"version": 0, "units": [{"unit": "a"}],
                                        "streamed": ["b"]}}
    # before: parsed into the stream's Batch and never looked at
    with pytest.raises(TraceFormatError) as info:
        parse_record(record, 2)
    assert info.value.field == "batch.streamed"
    assert not VALIDATOR.is_valid(record)  # spec/trace.schema.json says the same
    del record["batch"]["streamed"]
    parse_record(record, 2)
    VALIDATOR.validate(record)


# ----------------------------------------------------------------------- batch units -----

def test_a_consumed_units_logged_staleness_alone_is_judged():
    lines = reference_lines(Config(1, 2), 3, steps=60)

    def wrong(recs):
        c = _first(recs, "consume")
        u = recs[c]["batch"]["units"][0]
        recs[c]["batch"]["units"][0] = {"unit": u["unit"], "staleness": u["staleness"] + 1}

    bad = _edit(lines, wrong)
    assert "staleness" in _problem(check(bad, "strict"))
    lenient = check(bad, "lenient")  # before: CONFORMING
    assert _problem(lenient) == "staleness" and "logs staleness" in \
        lenient.problem.violation.detail


def test_a_streamed_units_logged_v_traj_is_judged_in_lenient_mode():
    def wrong(recs):
        k, _ = _stream_then_consume(recs)
        recs[k]["batch"]["units"][0]["v_traj"] += 1
        recs[k]["batch"]["units"][0].pop("staleness", None)

    lenient = check(_edit(_streaming(), wrong), "lenient")  # before: CONFORMING
    assert _problem(lenient) == "staleness" and "logs v_traj" in lenient.problem.violation.detail


# ----------------------------------------------------------------------- windows ---------

def test_a_refused_lines_version_and_head_are_judged():
    lines = reference_lines(Config(1, 2), 3, steps=80)
    assert any(r.get("refused") and "version" in r for r in records(lines))

    def wrong(recs):
        k = next(i for i, r in enumerate(recs) if r.get("refused") and "version" in r)
        recs[k]["version"] += 3

    for mode in MODES:  # before: CONFORMING in both modes
        assert _problem(check(_edit(lines, wrong), mode)) == "window", mode


# ----------------------------------------------------------------------- slots and moves -

_HEAD = {"op": "config", "schema_version": 1, "config": {"max_staleness": 1, "batch_size": 1}}


def _hand(*events: dict) -> list[str]:
    return lines_of([_HEAD, *events])


def test_an_abort_or_filter_slot_outside_the_legal_buffers_is_caught_in_lenient_mode():
    abort = _hand({"op": "reserve", "unit": "a", "v_traj": 0},
                  {"op": "abort", "unit": "a", "slot": [5, 0]})
    filt = _hand({"op": "reserve", "unit": "a", "v_traj": 0},
                 {"op": "occupy", "unit": "a"}, {"op": "filter", "unit": "a", "slot": [7, 0]})
    for bad in (abort, filt):
        report = check(bad, "lenient")  # before: CONFORMING
        assert _problem(report) == "staleness" and "freed a slot in buffer" in \
            report.problem.violation.detail
        assert not check(bad, "strict").ok


@pytest.mark.parametrize("move, words", [
    ({"unit": "ghost", "from": [1, 0], "to": [0, 0], "reason": "shift"}, "never reserved"),
    ({"unit": "b", "from": [1, 0], "to": [9, 0], "reason": "shift"}, "to buffer 9"),
])
def test_a_logged_move_is_judged_in_lenient_mode(move, words):
    bad = _hand({"op": "reserve", "unit": "a", "v_traj": 0},
                {"op": "reserve", "unit": "b", "v_traj": 0},
                {"op": "occupy", "unit": "a", "moves": [move]})
    report = check(bad, "lenient")  # before: CONFORMING
    assert report.problem is not None and words in report.problem.violation.detail
    assert not check(bad, "strict").ok


# ----------------------------------------------------------------------- peer logs -------

_PEER = {"op": "config", "format": "reserve-occupy-trace", "schema_version": 1,
         "config": {"max_staleness": 1, "batch_size": 1}, "x_policy": "synchronous"}


def _peer(*events: dict, **header: object) -> list[str]:
    return lines_of([{**_PEER, **header}, *events])


_PEER_RUN = ({"op": "reserve", "unit": "a", "version": 0, "v_traj": 0},
             {"op": "occupy", "unit": "a", "version": 0},
             {"op": "consume", "version": 0, "batch": {"version": 0, "units": [{"unit": "a"}]}},
             {"op": "publish", "version": 0})


def test_a_peer_batch_without_the_optional_fields_holds():
    report = check(_peer(*_PEER_RUN), peer="synchronous")
    # before: PEER RULE BROKEN, "unit 'a' logged v_traj None staleness None"
    assert report.ok, report.problem


def test_the_synchronous_rules_report_says_eta_0(tmp_path, capsys):
    path = tmp_path / "sync.jsonl"
    path.write_text("\n".join(_peer(*_PEER_RUN)) + "\n")
    assert main(["check-trace", "--peer", "synchronous", str(path)]) == 0
    out = capsys.readouterr().out
    # before: "eta=1 batch_size=1 ..." and "largest staleness trained: 0 (eta 1)"
    assert "eta=0 (config max_staleness 1)" in out and "(eta 0)" in out
    assert "eta=1" not in out and "(eta 1)" not in out
    assert main(["check-trace", "--peer", "synchronous", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["eta"] == 0


def test_a_peer_batch_streamed_is_compared_only_where_logged():
    head = {"config": {"max_staleness": 1, "batch_size": 1, "streaming": True},
            "x_policy": "nemo_in_order"}
    run = [{"op": "reserve", "unit": "a", "version": 0, "v_traj": 0},
           {"op": "occupy", "unit": "a", "version": 0},
           {"op": "stream", "version": 0, "batch": {"version": 0, "units": [{"unit": "a"}]}},
           {"op": "consume", "version": 0, "batch": {"version": 0, "units": [{"unit": "a"}]}},
           {"op": "publish", "version": 0}]
    assert check(_peer(*run, **head), peer="nemo_in_order").ok  # before: BROKEN
    run[3]["batch"]["streamed"] = []
    report = check(_peer(*run, **head), peer="nemo_in_order")
    assert not report.ok and "streamed" in report.problem.violation.detail


@pytest.mark.parametrize("edit, words", [
    (lambda ev: ev[1].update(served=[0, 1]), "logs served=[0, 1]"),
    (lambda ev: ev[0].update(head=1), "logs head 1"),
    (lambda ev: ev[1].update(slot=[0, 0]), "logs slot"),
    (lambda ev: ev[1].update(aborted=["a"]), "logs aborted"),
    (lambda ev: ev.insert(1, {"op": "reserve", "unit": "z", "refused": True, "version": 4}),
     "logs version 4"),
])
def test_every_field_of_a_peer_log_is_judged(edit, words):
    events = copy.deepcopy(list(_PEER_RUN))
    edit(events)
    report = check(_peer(*events), peer="synchronous")  # before: PEER RULE HELD
    assert not report.ok and words in report.problem.violation.detail, report.problem
    assert render_json(report, "t")["ok"] is False
