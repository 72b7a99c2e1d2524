"""The STUCK release's options (spec/PROTOCOL.md §6.2, "Options of the release"):
``Config.stuck_action`` (release | retry | truncate) and ``Config.stuck_threshold``, on
hand-worked traces; their validation; their trace header and ``truncate`` moves, replayed and
strict-checked."""

from __future__ import annotations

import json

import pytest

from reserve_occupy import (
    BufferStatus,
    Config,
    ConfigError,
    MoveReason,
    StalenessController,
    UnitState,
    replay,
)
from reserve_occupy.trace import event_to_record, header, parse_header, parse_record
from reserve_occupy_porting.checker import LENIENT, check


def _stuck_head(config: Config) -> StalenessController:
    """eta 1, B 2: A..D fill both buffers (A (1,1), B (1,0), C (0,1), D (0,0)); A finishes,
    shifts D into its gap (1,1) and takes (0,0): buffer 0 reads [O(A), R(C)], STUCK with one of
    its two units missing."""
    c = StalenessController(config)
    for u in "ABCD":
        c.reserve(u)
    c.occupy("A")
    assert c.head_status is BufferStatus.STUCK
    assert [(s.value, u) for s, u in c.snapshot().buffers[0].slots] == [("O", "A"), ("R", "C")]
    return c


def test_release_is_the_default_and_aborts_the_head_reservation():
    c = _stuck_head(Config(1, 2))
    assert c.config.stuck_action == "release" and c.release_action == "release"
    assert c.release_stuck() == ["C"]
    assert c.unit_state("C") is UnitState.ABORTED
    assert c.head_status is BufferStatus.PENDING


def test_truncate_occupies_the_head_reservation_with_its_v_traj_in_the_head():
    c = _stuck_head(Config(1, 2, stuck_action="truncate"))
    assert c.release_action == "truncate"
    assert c.release_stuck() == ["C"]
    assert c.unit_state("C") is UnitState.FINISHED
    ev = c.last_event
    assert ev.op == "release_stuck" and ev.aborted == ()
    assert [(m.unit_id, tuple(m.src), tuple(m.dst), m.reason) for m in ev.moves] == [
        ("C", (0, 1), (0, 1), MoveReason.TRUNCATE)]
    batch = c.consume()
    assert [(u.unit_id, u.v_traj, u.staleness) for u in batch.units] == [
        ("A", 0, 0), ("C", 0, 0)]
    c.check()


def test_retry_releases_as_release_and_the_same_prompt_is_readmitted_as_a_new_unit():
    c = _stuck_head(Config(1, 2, stuck_action="retry"))
    assert c.release_action == "retry"
    assert c.release_stuck() == ["C"]
    assert c.unit_state("C") is UnitState.ABORTED
    r = c.reserve("C#retry")  # the caller's new unit for C's prompt: the normal rule
    assert (r.v_traj, tuple(r.slot)) == (0, (0, 1))
    c.check()


def test_the_threshold_leaves_larger_gaps_to_the_release():
    # eta 1, B 3: A..F; A finishes, F shifts into A's gap; buffer 0 reads [O(A), R(E), R(D)]
    cfg = Config(1, 3, stuck_action="truncate", stuck_threshold=1)
    c = StalenessController(cfg)
    for u in "ABCDEF":
        c.reserve(u)
    c.occupy("A")
    d = c.clone()
    assert c.head_status is BufferStatus.STUCK
    assert c.release_action == "release"  # two of three missing > 1
    assert c.release_stuck() == ["E", "D"]
    assert {c.unit_state(u) for u in "ED"} == {UnitState.ABORTED}
    d.occupy("E")  # [O(A), O(E), R(D)]: one missing <= 1
    assert d.release_action == "truncate"
    assert d.release_stuck() == ["D"] and d.unit_state("D") is UnitState.FINISHED
    assert d.head_status is BufferStatus.READY
    d.check()


def test_release_action_is_none_when_a_release_would_be_refused():
    c = StalenessController(Config(1, 2, stuck_action="truncate"))
    assert c.release_action is None  # head PENDING
    c.reserve("A")
    c.reserve("B")
    c.reserve("C")
    c.reserve("D")
    c.occupy("A")
    c.occupy("C")
    c.consume()
    assert c.release_action is None  # training


@pytest.mark.parametrize("kw, field", [
    (dict(stuck_action="drop"), "stuck_action"),
    (dict(stuck_action=None), "stuck_action"),
    (dict(stuck_action="truncate", stuck_threshold=0), "stuck_threshold"),
    (dict(stuck_action="truncate", stuck_threshold=3), "stuck_threshold"),
    (dict(stuck_action="retry", stuck_threshold=True), "stuck_threshold"),
    (dict(stuck_action="retry", stuck_threshold=1.0), "stuck_threshold"),
    (dict(stuck_threshold=1), "stuck_threshold"),  # a threshold without an action
])
def test_bad_stuck_options_are_typed_config_errors(kw, field):
    with pytest.raises(ConfigError) as e:
        Config(1, 2, **kw)
    assert e.value.field == field
    assert str(e.value).startswith(f"invalid Config.{field}=")


def test_the_trace_header_names_the_options_and_a_truncating_run_replays_and_checks():
    assert "stuck_action" not in header(Config(1, 2))["config"]  # the source's: as before
    cfg = Config(1, 2, stuck_action="truncate", stuck_threshold=2)
    h = header(cfg)
    assert h["config"]["stuck_action"] == "truncate" and h["config"]["stuck_threshold"] == 2
    assert parse_header(json.loads(json.dumps(h))).config == cfg
    c = _stuck_head(cfg)
    c.release_stuck()
    c.consume()
    c.publish()
    events = c.events
    assert replay(cfg, events).snapshot() == c.snapshot()
    lines = [json.dumps(h)] + [json.dumps(event_to_record(e)) for e in events]
    assert parse_record(json.loads(lines[-3]), len(lines) - 2).event == events[-3]
    report = check(lines)
    assert report.ok, report
    assert check(lines, LENIENT).ok  # the safety tracker follows the truncate move too
    # the same log under the source's release diverges at the release: the header decides
    lines[0] = json.dumps(header(Config(1, 2)))
    assert not check(lines).ok
