"""Streaming consume in the porting kit: the trace format, check-trace in both modes, and the
conformance runner all know ``stream`` (spec/PROTOCOL.md §3.8)."""

from __future__ import annotations

import copy
import itertools

import pytest

from reserve_occupy import Config, replay
from reserve_occupy.trace import TraceFormatError, header, parse_header, parse_lines, parse_record
from reserve_occupy_porting.checker import check
from reserve_occupy_porting.vector_runner import ReferenceAdapter, run
from reserve_occupy_porting.vectors import load

from .conftest import lines_of, records, reference_lines
from .test_trace import HEADER_VALIDATOR, VALIDATOR
from .toy_port import ToyAdapter

STREAMING = [Config(0, 2, streaming=True), Config(1, 3, streaming=True),
             Config(2, 2, capacity=3, max_concurrency=5, streaming=True)]


def _trace(config: Config, seed: int) -> list[str]:
    return reference_lines(config, seed, steps=250, stream=0.6, filter=0.4)


@pytest.mark.parametrize("config", STREAMING, ids=str)
def test_streaming_traces_round_trip_validate_and_conform(config: Config) -> None:
    lines = _trace(config, 3)
    recs = records(lines)
    assert recs[0]["config"]["streaming"] is True
    HEADER_VALIDATOR.validate(recs[0])
    for r in recs[1:]:
        VALIDATOR.validate(r)
    assert any(r["op"] == "stream" and not r.get("refused") for r in recs)
    assert any(r["op"] == "consume" and r.get("batch", {}).get("streamed") for r in recs)
    head, entries = parse_lines(lines)
    events = [e.event for e in entries if not e.refused]
    assert head.config == config
    replay(config, events).check()
    for mode in ("strict", "lenient"):
        report = check(lines, mode)
        assert report.ok, report.problem


def test_headers_without_streaming_are_unchanged() -> None:
    assert "streaming" not in header(Config(1, 2))["config"]
    with pytest.raises(TraceFormatError) as info:
        parse_header({"op": "config", "schema_version": 1,
                      "config": {"max_staleness": 1, "batch_size": 2, "streaming": "yes"}})
    assert info.value.field == "config.streaming"


def test_stream_record_needs_its_units() -> None:
    with pytest.raises(TraceFormatError) as info:
        parse_record({"op": "stream"}, 2)
    assert info.value.field == "batch"
    with pytest.raises(TraceFormatError) as info:
        parse_record({"op": "consume", "batch": {"version": 0, "units": [{"unit": "a"}],
                                                 "streamed": "a"}}, 2)
    assert info.value.field == "batch.streamed"
    assert parse_record({"op": "stream", "refused": True}, 2).refused


def _edit(lines: list[str], edit) -> list[str]:
    recs = copy.deepcopy(records(lines))
    edit(recs)
    return lines_of(recs)


def _first_stream(recs: list[dict]) -> tuple[int, str]:
    k = next(i for i, r in enumerate(recs) if r["op"] == "stream" and not r.get("refused"))
    return k, recs[k]["batch"]["units"][0]["unit"]


def _consume_after(recs: list[dict], k: int) -> int:
    return next(i for i in range(k, len(recs)) if recs[i]["op"] == "consume"
                and not recs[i].get("refused"))


def test_a_batch_without_a_streamed_unit_is_caught() -> None:
    lines = _trace(Config(1, 3, streaming=True), 3)

    def drop(recs):
        k, unit = _first_stream(recs)
        c = _consume_after(recs, k)
        recs[c]["batch"]["units"] = [u for u in recs[c]["batch"]["units"] if u["unit"] != unit]
        recs[c]["batch"]["streamed"] = [u for u in recs[c]["batch"]["streamed"] if u != unit]

    bad = _edit(lines, drop)
    strict = check(bad, "strict")
    assert not strict.ok and strict.problem.differences[0].field == "batch.units"
    lenient = check(bad, "lenient")
    assert not lenient.ok and lenient.problem.violation.invariant == "streamed"


def test_filter_of_a_streamed_unit_is_caught() -> None:
    lines = _trace(Config(1, 3, streaming=True), 3)

    def filter_it(recs):
        k, unit = _first_stream(recs)
        recs.insert(k + 1, {"op": "filter", "unit": unit})

    bad = _edit(lines, filter_it)
    strict = check(bad, "strict")
    assert not strict.ok and strict.problem.differences[0].field == "error"
    lenient = check(bad, "lenient")
    assert not lenient.ok and lenient.problem.violation.invariant == "conservation"


def test_stream_while_training_or_without_the_option_is_caught() -> None:
    lines = _trace(Config(1, 3, streaming=True), 3)

    def while_training(recs):
        k, _ = _first_stream(recs)
        c = _consume_after(recs, k)
        again = {key: v for key, v in recs[k].items() if key not in ("seq", "version", "head")}
        recs.insert(c + 1, again)

    for mode in ("strict", "lenient"):
        report = check(_edit(lines, while_training), mode)
        assert not report.ok
    assert check(_edit(lines, while_training), "lenient").problem.violation.invariant == "order"

    def off(recs):
        del recs[0]["config"]["streaming"]

    report = check(_edit(lines, off), "lenient")
    assert not report.ok and report.problem.violation.invariant == "streamed"
    assert not check(_edit(lines, off), "strict").ok


def test_streaming_family_passes_the_reference_and_a_different_port() -> None:
    vecs = list(itertools.islice(load(["streaming"]), 0, None, 5))
    assert any(v["id"].startswith("streaming/spec-") for v in vecs[:1])
    strict = run(ReferenceAdapter(), vecs, "strict")
    assert strict.ok, strict.failures[:2]
    assert strict.steps > 5_000
    lenient = run(ToyAdapter(), vecs, "lenient")
    assert lenient.ok, lenient.failures[:2]


def test_streaming_family_catches_a_port_that_streams_later_buffers() -> None:
    from proofs.mutants import MUTANTS

    vecs = list(itertools.islice(load(["streaming"]), 0, 200, 2))
    result = run(ReferenceAdapter(MUTANTS["stream_later_buffer"].make), vecs, "strict")
    assert result.failures
