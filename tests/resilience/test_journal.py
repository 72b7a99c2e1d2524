"""The durable event log: it is the controller's own event list in the trace format, flushed per
event; a torn last line is dropped with a message, a bad line anywhere else is refused."""

from __future__ import annotations

import json

import pytest

from reserve_occupy import Config, UnitState, UnknownUnit, replay
from reserve_occupy_porting.checker import STRICT, check
from runtime.recovery.journal import (
    EmptyLog,
    EventLog,
    JournaledController,
    LogCorrupt,
    read_log,
    rebuild,
)

CONFIG = Config(max_staleness=1, batch_size=2, capacity=3)


def _scenario(ctl: JournaledController) -> None:
    """Every operation, refusals and errors included."""
    for u in "abcdef":
        assert ctl.reserve(u, meta={"prompt": ord(u)}) is not None
    assert ctl.reserve("g") is None  # refused (every slot reserved): nothing is logged
    assert ctl.consume() is None  # nothing READY: refused
    with pytest.raises(UnknownUnit):
        ctl.occupy("zz", meta={"reason": "never"})  # an error logs nothing, not even the meta
    ctl.occupy("a")
    ctl.abort("b", meta={"reason": "timeout"})
    ctl.occupy("c")
    ctl.filter("c", meta={"reason": "bad data"})
    batch = None
    for u in "def":
        if ctl.unit_state(u) is UnitState.IN_FLIGHT:
            ctl.occupy(u)
        batch = batch or ctl.consume()
    assert batch is not None
    ctl.publish()
    ctl.reserve(7, meta={"prompt": 7})  # integer ids too


def _write(tmp_path):
    path = tmp_path / "events.jsonl"
    ctl = JournaledController(CONFIG, EventLog.create(path, CONFIG, fsync=False))
    _scenario(ctl)
    ctl.log.close()  # type: ignore[union-attr]
    return path, ctl


def test_the_log_is_the_controllers_events_as_a_trace(tmp_path):
    path, ctl = _write(tmp_path)
    contents = read_log(path)
    assert contents.events == list(ctl.events)  # refused and failed operations left nothing
    assert contents.torn is None and contents.config == CONFIG
    assert contents.metas[0] == {"prompt": ord("a")}
    assert {m.get("reason") for m in contents.metas.values()} >= {"timeout", "bad data"}
    assert "never" not in path.read_text()
    assert replay(CONFIG, contents.events).snapshot() == ctl.snapshot()
    with path.open() as f:
        assert check(f, STRICT).ok  # `reserve-occupy check-trace` accepts the log as it is
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + len(ctl.events) and json.loads(lines[0])["op"] == "config"


def test_a_torn_last_line_is_dropped_with_a_message_and_the_log_continues(tmp_path):
    path, ctl = _write(tmp_path)
    whole = path.read_bytes()
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    path.write_bytes(whole[:len(whole) - len(last) // 2 - 1])  # cut the last line in half
    contents = read_log(path)
    assert contents.events == list(ctl.events)[:-1]
    assert "torn last line" in contents.torn and f"line {len(ctl.events) + 1}" in contents.torn
    # Recovery cuts the torn bytes off and appends after the last good line.
    log = EventLog.reopen(path, contents.good_bytes, fsync=False)
    again = rebuild(contents, CONFIG)
    again.log = log
    again.reserve("g", meta={"prompt": 1})
    log.close()
    after = read_log(path)
    assert after.torn is None and after.events == list(again.events)
    with path.open() as f:
        assert check(f, STRICT).ok


def test_a_complete_last_line_without_its_newline_is_kept(tmp_path):
    path, ctl = _write(tmp_path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    contents = read_log(path)
    assert contents.torn is None and contents.events == list(ctl.events)
    log = EventLog.reopen(path, contents.good_bytes, fsync=False)
    log.append(ctl.events[-1]._replace(seq=len(ctl.events)))  # the newline is restored first
    log.close()
    assert path.read_text().count("\n") == len(ctl.events) + 2


@pytest.mark.parametrize("damage", ["garbage", "half"])
def test_a_bad_line_before_the_last_is_refused(tmp_path, damage):
    path, _ = _write(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = "{not json\n" if damage == "garbage" else lines[3][: len(lines[3]) // 2] + "\n"
    path.write_text("".join(lines))
    with pytest.raises(LogCorrupt, match="line 4 is corrupt and is not the last line"):
        read_log(path)


def test_a_log_the_reference_does_not_reproduce_is_refused(tmp_path):
    path, _ = _write(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    record = json.loads(lines[1])
    record["slot"] = [1, 0]  # the first reservation claims another slot
    lines[1] = json.dumps(record) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(LogCorrupt, match="event 0"):
        rebuild(read_log(path), CONFIG)


def test_resuming_with_other_staleness_settings_is_refused(tmp_path):
    path, _ = _write(tmp_path)
    with pytest.raises(LogCorrupt, match="resume with the same staleness settings"):
        rebuild(read_log(path), Config(max_staleness=2, batch_size=2, capacity=3))


@pytest.mark.parametrize("text", [b"", b'{"op":"con'])
def test_a_log_without_a_complete_header_means_nothing_happened(tmp_path, text):
    path = tmp_path / "events.jsonl"
    path.write_bytes(text)
    with pytest.raises(EmptyLog):
        read_log(path)


def test_a_clone_never_writes_to_the_log(tmp_path):
    path, ctl = _write(tmp_path)
    ctl.log = EventLog.reopen(path, path.stat().st_size, fsync=False)
    branch = ctl.clone()
    branch.reserve("x")
    ctl.log.close()
    assert "\"x\"" not in path.read_text()
