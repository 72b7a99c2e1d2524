"""The trace format: core events round-trip, bad lines name their line and field, and the hand
validator and spec/trace.schema.json agree."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from reserve_occupy import Config, StalenessController, replay
from reserve_occupy.trace import (
    SCHEMA_VERSION,
    TraceFormatError,
    dumps,
    event_to_record,
    parse_header,
    parse_lines,
    parse_record,
    trace_records,
)
from reserve_occupy_porting.drive import Profile, drive

from .conftest import CONFIGS

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "spec" / "trace.schema.json")
                    .read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
HEADER_VALIDATOR = jsonschema.Draft202012Validator({"$ref": "#/$defs/header",
                                                    "$defs": SCHEMA["$defs"]})

HEADER = {"op": "config", "format": "reserve-occupy-trace", "schema_version": 1,
          "config": {"max_staleness": 1, "batch_size": 2}}


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_core_events_round_trip(config: Config) -> None:
    c = StalenessController(config)
    drive(c, 3, Profile(steps=150, group_size=2, candidates=3), reraise=True)
    lines = [dumps(r) for r in trace_records(config, c.events, producer="test")]
    head, entries = parse_lines(lines)
    assert head.config == config and head.producer == "test"
    parsed = [e.event for e in entries]
    assert parsed == list(c.events)
    # and the parsed events rebuild the same controller state
    assert replay(config, parsed).snapshot() == c.snapshot()
    for line in lines:
        VALIDATOR.validate(json.loads(line))


def test_refused_records_and_buffer_slots_parse() -> None:
    entry = parse_record({"op": "reserve", "unit": "G", "refused": True}, 7)
    assert entry.refused and entry.event.unit_id == "G" and entry.line == 7
    entry = parse_record({"op": "occupy", "unit": 3, "slot": 2,
                          "moves": [{"unit": 4, "from": 1, "to": 2, "reason": "shift"}]}, 2)
    assert entry.event.slot == (2, None) and entry.event.moves[0].src == (1, None)
    assert event_to_record(entry.event)["slot"] == 2


GOOD = [
    {"op": "reserve", "unit": "a"},
    {"op": "reserve", "unit": 1, "v_traj": 0, "slot": [1, 0], "seq": 4, "t": 1.5,
     "meta": {"host": "x"}, "x_engine": "vllm"},
    {"op": "reserve", "unit": "a", "refused": True},
    {"op": "occupy", "unit": "a", "slot": 0, "aborted": ["b"]},
    {"op": "occupy", "unit": "a", "served": [1, 2]},
    {"op": "abort", "unit": "a", "moves": []},
    {"op": "filter", "unit": "a"},
    {"op": "release_stuck", "aborted": ["a", 2]},
    {"op": "release_stuck", "refused": True},
    {"op": "consume", "batch": {"version": 0, "units": [{"unit": "a"}, {"unit": "b",
                                                                          "v_traj": 0}]}},
    {"op": "consume", "refused": True},
    {"op": "publish", "version": 3},
]

# (record, field the error must name)
BAD = [
    ({"op": "reserv", "unit": "a"}, "op"),
    ({"unit": "a"}, "op"),
    ({"op": ["reserve"]}, "op"),
    ({"op": "reserve"}, "unit"),
    ({"op": "reserve", "unit": True}, "unit"),
    ({"op": "reserve", "unit": 1.5}, "unit"),
    ({"op": "reserve", "unit": "a", "v_traj": -1}, "v_traj"),
    ({"op": "reserve", "unit": "a", "slot": [1]}, "slot"),
    ({"op": "reserve", "unit": "a", "slot": [1, "x"]}, "slot"),
    ({"op": "reserve", "unit": "a", "refused": True, "slot": [1, 0]}, "slot"),
    ({"op": "reserve", "unit": "a", "refused": "yes"}, "refused"),
    ({"op": "reserve", "unit": "a", "unit_id": "a"}, "unit_id"),
    ({"op": "occupy", "unit": "a", "moves": [{"unit": "b", "from": [0, 0], "to": [1, 0]}]},
     "moves[0]"),
    ({"op": "occupy", "unit": "a", "moves": [{"unit": "b", "from": [0, 0], "to": [1, 0],
                                              "reason": "teleport"}]}, "moves[0].reason"),
    ({"op": "occupy", "unit": "a", "aborted": "b"}, "aborted"),
    ({"op": "abort", "unit": "a", "v_traj": 0}, "v_traj"),
    ({"op": "occupy", "unit": "a", "served": [2]}, "served"),
    ({"op": "occupy", "unit": "a", "served": [2, 1]}, "served"),
    ({"op": "reserve", "unit": "a", "served": [1, 1]}, "served"),
    ({"op": "consume"}, "batch"),
    ({"op": "consume", "batch": {"units": []}}, "batch.version"),
    ({"op": "consume", "batch": {"version": 0, "units": [{"v_traj": 0}]}}, "batch.units[0].unit"),
    ({"op": "consume", "batch": {"version": 2, "units": [{"unit": "a", "v_traj": 0,
                                                           "staleness": 1}]}},
     "batch.units[0].staleness"),
    ({"op": "consume", "refused": True, "batch": {"version": 0, "units": []}}, "batch"),
    ({"op": "publish", "unit": "a"}, "unit"),
    ({"op": "publish", "version": "1"}, "version"),
    ({"op": "publish", "t": "noon"}, "t"),
    ({"op": "config", "schema_version": 1, "config": {}}, "op"),
    ([1, 2], None),
]


@pytest.mark.parametrize("record", GOOD, ids=lambda r: r["op"])
def test_good_records_pass_both_validators(record: dict) -> None:
    parse_record(record, 2)
    VALIDATOR.validate(record)


@pytest.mark.parametrize("record,field", BAD, ids=[str(f) for _, f in BAD])
def test_bad_records_name_line_and_field(record: object, field: str | None) -> None:
    with pytest.raises(TraceFormatError) as info:
        parse_record(record, 12)
    assert info.value.line == 12 and info.value.field == field
    assert str(info.value).startswith(f"line 12: {field + ': ' if field else ''}")
    # the schema rejects it too, except for what JSON Schema cannot state (arithmetic)
    arithmetic = field == "batch.units[0].staleness" or (
        isinstance(record, dict) and record.get("served") == [2, 1])
    if not arithmetic:
        assert not VALIDATOR.is_valid(record)


BAD_HEADERS = [
    ({"op": "reserve", "unit": "a"}, "op"),
    ({**HEADER, "schema_version": SCHEMA_VERSION + 1}, "schema_version"),
    ({**HEADER, "format": "other"}, "format"),
    ({k: v for k, v in HEADER.items() if k != "schema_version"}, "schema_version"),
    ({**HEADER, "config": {"max_staleness": 1}}, "config.batch_size"),
    ({**HEADER, "config": {"max_staleness": -1, "batch_size": 2}}, "config.max_staleness"),
    ({**HEADER, "config": {"max_staleness": 1, "batch_size": 2, "capacity": 1}},
     "config.capacity"),
    ({**HEADER, "config": {"max_staleness": 1, "batch_size": 2, "eta": 1}}, "config.eta"),
    ({**HEADER, "granularity": "unit"}, "granularity"),
    ({**HEADER, "extra": 1}, "extra"),
]


@pytest.mark.parametrize("record,field", BAD_HEADERS, ids=[f for _, f in BAD_HEADERS])
def test_bad_headers_are_named(record: dict, field: str) -> None:
    with pytest.raises(TraceFormatError) as info:
        parse_header(record)
    assert info.value.field == field and info.value.line == 1
    if field != "config.capacity":  # capacity >= batch_size is arithmetic
        assert not HEADER_VALIDATOR.is_valid(record)
    assert HEADER_VALIDATOR.is_valid(HEADER)


def test_parse_lines_errors_name_the_line() -> None:
    good = [json.dumps(HEADER), "", json.dumps({"op": "reserve", "unit": "a", "seq": 3})]
    with pytest.raises(TraceFormatError, match="line 4: not valid JSON"):
        list(parse_lines(good + ['{"op": "reserve", "un'])[1])
    with pytest.raises(TraceFormatError, match="line 4: seq: is 3, not after"):
        list(parse_lines(good + [json.dumps({"op": "reserve", "unit": "b", "seq": 3})])[1])
    with pytest.raises(TraceFormatError, match="empty trace"):
        parse_lines(["", "  "])
    _head, entries = parse_lines(good)
    assert [e.line for e in entries] == [3]  # blank lines are skipped but counted
