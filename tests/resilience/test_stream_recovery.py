"""Crash recovery with streaming consume: the journal logs and replays ``stream`` lines, and
recovery reloads the units handed to the crashed trainer so that they train again at consume
(docs/recovery.md, "Streaming: units handed to a trainer that died")."""

from __future__ import annotations

import pytest

from reserve_occupy import Config, UnitState
from runtime.recovery.journal import EventLog, JournaledController, read_log, rebuild
from runtime.recovery.resume import Recovery, RecoveryError, RecoveryReport

CONFIG = Config(1, 3, streaming=True)


def _crashed_run(tmp_path):
    """A run that streamed a and b, then died before consume: its log, read back."""
    path = tmp_path / "events.jsonl"
    c = JournaledController(CONFIG, EventLog.create(path, CONFIG, fsync=False))
    for u in "abcd":
        c.reserve(u)
    c.occupy("a")
    c.stream(meta={"chunk": 0})
    c.occupy("b")
    c.stream()
    c.occupy("c")  # finished, not handed yet
    return c, read_log(path)


def test_the_journal_replays_stream_lines(tmp_path) -> None:
    c, contents = _crashed_run(tmp_path)
    assert [e.op for e in contents.events].count("stream") == 2
    again = rebuild(contents, CONFIG)
    again.check()
    assert again.snapshot() == c.snapshot()
    assert again.unit_state("a") is UnitState.STREAMED and again.metas[5] == {"chunk": 0}


class _Step(Recovery):
    """Only step 4 of recovery, on a replayed controller, with the store's files faked."""

    def __init__(self, controller, on_disk) -> None:  # noqa: D107 -- no run directory needed
        self.controller, self.on_disk = controller, on_disk
        self.report, self.groups = RecoveryReport(), {}
        self.order = [e.unit_id for e in controller.events if e.op == "reserve"]

    def load(self, unit):
        return object() if unit in self.on_disk else None


def test_streamed_units_are_reloaded_to_train_again(tmp_path) -> None:
    _, contents = _crashed_run(tmp_path)
    step = _Step(rebuild(contents, CONFIG), on_disk={"a", "b", "c"})
    step.reload_finished()
    assert step.report.restream == ["a", "b"]
    assert step.report.finished == ["a", "b", "c"]
    assert "train again" in " ".join(step.report.lines())
    # the next consume still returns them: the resumed trainer trains the whole batch
    assert step.controller.consume().unit_ids == ("a", "b", "c")


def test_a_streamed_unit_without_its_file_stops_recovery(tmp_path) -> None:
    _, contents = _crashed_run(tmp_path)
    step = _Step(rebuild(contents, CONFIG), on_disk={"b", "c"})
    with pytest.raises(RecoveryError, match="'a' was handed to the trainer"):
        step.reload_finished()
