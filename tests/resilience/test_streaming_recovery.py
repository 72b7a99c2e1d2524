"""Recovery of a streaming run: units the controller handed to a trainer (STREAMED) whose
partial gradient died with the process are trained again, with the rest of their batch.

The crash is a trainer that dies inside a chunk; the log is the controller's events up to that
moment (what the journal holds: the last test writes and reads it back). Recovery's steps run
on it as ``recover`` runs them after reading the file: in-flight units are settled, finished
and streamed units get their data back, and the driver continues from the ``ResumePoint``.

The first tests build the log by hand (a controller that streamed two units, then died before
consume): the journal replays its ``stream`` lines, and recovery's step 4 reloads the streamed
units so that they train again at consume (docs/recovery.md, "Streaming: units handed to a
trainer that died"). The rest crash a driver's trainer inside a chunk. (One file since issue 35:
``test_stream_recovery.py`` held the first tests.)
"""

from __future__ import annotations

import asyncio

import pytest

from reserve_occupy import Config, UnitState, apply, replay
from runtime.clock import VirtualClock
from runtime.controller import make_controller
from runtime.driver import Driver
from runtime.recovery.durable import RecoverySettings
from runtime.recovery.journal import EventLog, JournaledController, read_log, rebuild
from runtime.recovery.resume import Recovery, RecoveryError, RecoveryReport
from runtime.rollout.fake import FakeRollout, FakeTrainer, random_script
from runtime.records import DriverSettings
from tests.runtime.helpers import PROMPTS, parity_reward

# ------------------------------------------------------------ the log, built by hand ----

CORE_CONFIG = Config(1, 3, streaming=True)


def _crashed_log(tmp_path):
    """A controller that streamed a and b, then died before consume: its log, read back."""
    path = tmp_path / "events.jsonl"
    c = JournaledController(CORE_CONFIG, EventLog.create(path, CORE_CONFIG, fsync=False))
    for u in "abcd":
        c.reserve(u)
    c.occupy("a")
    c.stream(meta={"chunk": 0})
    c.occupy("b")
    c.stream()
    c.occupy("c")  # finished, not handed yet
    return c, read_log(path)


def test_the_journal_replays_stream_lines(tmp_path) -> None:
    c, contents = _crashed_log(tmp_path)
    assert [e.op for e in contents.events].count("stream") == 2
    again = rebuild(contents, CORE_CONFIG)
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
    _, contents = _crashed_log(tmp_path)
    step = _Step(rebuild(contents, CORE_CONFIG), on_disk={"a", "b", "c"})
    step.reload_finished()
    assert step.report.restream == ["a", "b"]
    assert step.report.finished == ["a", "b", "c"]
    assert "train again" in " ".join(step.report.lines())
    # the next consume still returns them: the resumed trainer trains the whole batch
    assert step.controller.consume().unit_ids == ("a", "b", "c")


def test_a_streamed_unit_without_its_file_stops_recovery(tmp_path) -> None:
    _, contents = _crashed_log(tmp_path)
    step = _Step(rebuild(contents, CORE_CONFIG), on_disk={"b", "c"})
    with pytest.raises(RecoveryError, match="'a' was handed to the trainer"):
        step.reload_finished()


# ------------------------------------------------------------ a driver's trainer dies ----

SETTINGS = DriverSettings(max_staleness=1, batch_size=4, group_size=4, steps=6, max_tokens=6,
                          check_invariants=True, streaming=True, chunk_groups=1)


class TrainerDied(RuntimeError):
    pass


class DyingTrainer(FakeTrainer):
    """Dies in its ``die_at``-th chunk, after noting how many events the log had then."""

    def __init__(self, clock, die_at: int) -> None:
        super().__init__(clock, train_s=1.0, step_s=0.02, batch_size=4)
        self.die_at, self.driver, self.log_length = die_at, None, None

    async def accumulate(self, chunk):
        if len(self.chunks) + 1 == self.die_at:
            self.log_length = len(self.driver.controller.events)
            raise TrainerDied("the trainer process died inside a chunk")
        await super().accumulate(chunk)


def _crashed_run(die_at: int):
    clock = VirtualClock()
    trainer = DyingTrainer(clock, die_at)
    driver = Driver(SETTINGS, FakeRollout(clock, random_script(2, per_token_s=0.2)), trainer,
                    parity_reward, PROMPTS, clock,
                    controller=make_controller(SETTINGS, clock.now))
    trainer.driver = driver
    try:
        clock.run(driver.run())
    except TrainerDied:
        pass
    else:
        raise AssertionError("the trainer did not die")
    return driver, driver.controller.events[:trainer.log_length]


def _recover(tmp_path, driver, events, drop=()):
    """Recovery's steps on the logged events; ``drop``: units whose trajectory file is lost."""
    controller = JournaledController(SETTINGS.controller_config())
    for e in events:
        assert apply(controller, e) == e
    trainer_clock = VirtualClock()
    trainer = FakeTrainer(trainer_clock, train_s=1.0, step_s=0.02, batch_size=4)
    rec = Recovery(tmp_path, SETTINGS, RecoverySettings(fsync=False), trainer, PROMPTS,
                   log=lambda _: None)
    rec.controller = controller
    rec.reserve_meta = {e.unit_id: driver.controller.metas.get(e.seq, {}) for e in events
                        if e.op == "reserve"}
    rec.order = [e.unit_id for e in events if e.op == "reserve"]
    # the trajectory store: every unit the crashed driver still held as finished
    rec.groups = {u: g for u, g in driver.groups.items()
                  if g.fate == "finished" and u not in drop}
    rec.settle_in_flight()
    rec.reload_finished()
    recovered = asyncio.run(rec.finish())
    return controller, recovered


def test_streamed_units_are_trained_again_after_a_crash(tmp_path):
    driver, events = _crashed_run(die_at=3)
    streamed = [u.unit_id for e in events if e.op == "stream" for u in e.batch.units]
    consumed = {u for e in events if e.op == "consume" for u in e.batch.unit_ids}
    handed = [u for u in streamed if u not in consumed]  # handed, their step never taken
    assert handed, "the crash should fall while units of the head buffer were handed"
    controller, recovered = _recover(tmp_path, driver, events)
    assert all(controller.unit_state(u) is UnitState.STREAMED for u in handed)
    assert sorted(recovered.report.restream) == sorted(handed)
    assert set(handed) <= set(recovered.resume.groups)  # their data goes to the driver

    clock = VirtualClock()
    trainer = FakeTrainer(clock, train_s=1.0, step_s=0.02, batch_size=4)
    resumed = Driver(SETTINGS, FakeRollout(clock, random_script(2, per_token_s=0.2)), trainer,
                     parity_reward, PROMPTS, clock, controller=controller,
                     resume=recovered.resume)
    records = clock.run(resumed.run())
    assert len(records) == SETTINGS.steps - recovered.resume.step
    first = [g.unit_id for g in trainer.batches[0].groups]
    assert set(handed) <= set(first) and len(first) == 4
    # the new trainer never had them in a chunk: its finish_step trained them with the rest
    assert not set(handed) & {u for c in trainer.chunks for u in c}
    assert records[0].streamed_units == len(set(first) & {u for c in trainer.chunks for u in c})
    replay(controller.config, controller.events)  # one continuous, valid log


def test_a_streamed_unit_without_its_trajectory_stops_recovery(tmp_path):
    # It cannot be filtered, and its file is written before its occupy line: a damaged run
    # directory, refused by name rather than trained without.
    driver, events = _crashed_run(die_at=3)
    consumed = {u for e in events if e.op == "consume" for u in e.batch.unit_ids}
    handed = [u.unit_id for e in events if e.op == "stream" for u in e.batch.units
              if u.unit_id not in consumed]
    with pytest.raises(RecoveryError, match=f"unit {handed[0]!r} was handed to the trainer"):
        _recover(tmp_path, driver, events, drop=(handed[0],))


def test_the_journal_holds_the_stream_lines_and_rebuilds_the_streamed_state(tmp_path):
    driver, events = _crashed_run(die_at=3)
    config = SETTINGS.controller_config()
    log = EventLog.create(tmp_path / "events.jsonl", config, fsync=False)
    for e in events:
        log.append(e, driver.controller.metas.get(e.seq))
    log.close()
    contents = read_log(tmp_path / "events.jsonl")
    assert contents.config == config and contents.config.streaming
    assert [e.op for e in contents.events].count("stream") == \
        [e.op for e in events].count("stream") > 0
    rebuilt = rebuild(contents, config)
    live = JournaledController(config)
    for e in events:
        apply(live, e)
    assert rebuilt.snapshot() == live.snapshot()
    assert any(v.state is UnitState.STREAMED for v in rebuilt.snapshot().units)
