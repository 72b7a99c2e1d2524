"""The fault harness's rank loss: the sharded trainer's ``RankLost`` at a chosen trainer call,
handled by the production driver and recovery (``reserve_occupy_faults.harness``). The run stops
with the ``RankLost`` (nothing of the failed step is published), is resumed from its run directory
on a trainer of another world size, and ends with the log's lineage; every check of
``reserve_occupy_faults.properties`` runs at the end, and the broken variants that mishandle the
loss are caught."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from runtime.clock import VirtualClock
from runtime.driver import Driver
from reserve_occupy_faults.fakes import Crash, HashTrainer, SimulatedCrash
from reserve_occupy_faults.harness import Run, Variant
from reserve_occupy_faults.schedule import FIRST_WORLD_SIZE, TRAINER_CALLS, Fault, Schedule
from reserve_occupy_faults.variants import VARIANTS
from runtime.recovery.journal import read_log
from runtime.trainer.sharded import RankLost

BASE = Schedule(seed=3, eta=1, batch_size=2, group_size=2, candidates=2, capacity=2, engines=1,
                steps=4, commit_every=2)


def _run(tmp_path, schedule, variant=None, name="run"):
    root = tmp_path / name
    root.mkdir()
    run = Run(schedule, root, variant or Variant())
    return run, run.run()


def _loss(what, n, world):
    return Fault("rank_loss", what=what, arg=n, target=world)


@pytest.mark.parametrize("what", TRAINER_CALLS)
@pytest.mark.parametrize("world", [1, 3])
def test_a_lost_rank_stops_the_run_and_it_resumes_on_another_world_size(tmp_path, what, world):
    # The second call of each kind: train #2 and train-end #2 are batch 1's step, export #2 its
    # weights, save #2 the checkpoint of version 4 (commit_every 2).
    run, out = _run(tmp_path, replace(BASE, faults=(_loss(what, 2, world),)))
    assert out.ok, out.violations
    assert out.incarnations == 2 and out.injected["rank_loss"] == 1
    assert run.worlds == [FIRST_WORLD_SIZE, world]
    (loss,) = run.ev.rank_losses
    assert loss.rank_lost and loss.ended_with.startswith("RankLost(")
    # After the loss the driver only stopped: the units still in flight aborted, no consume,
    # no checkpoint, no publish.
    assert set(loss.writes_after) <= {"log:abort"}, loss.writes_after
    log = read_log(run.root / "events.jsonl")
    stop = run.ev.crashes[0].events  # the durable log when the run was resumed
    after = log.events[stop - len(loss.writes_after):stop]
    assert all(e.op == "abort" and log.metas[e.seq]["reason"] == "shutdown" for e in after)
    published = sum(e.op == "publish" for e in log.events[:stop])
    report = run.reports[0]
    if what in ("train", "train-end", "export"):  # batch 1 consumed, never published
        assert published == 1 and report.version_logged == 1 and report.published
    else:  # the checkpoint of version 4 failed: version 4 was not published
        assert published == 3 and report.version_logged == 3 and report.published
    assert run.trainer.world_size == world and run.trainer.steps == BASE.steps


@pytest.mark.parametrize("what, n", [("train", 4), ("train-end", 4), ("export", 4),
                                     ("save", 2)])
def test_a_rank_lost_in_the_last_step_ends_with_the_uninterrupted_runs_weights(tmp_path, what,
                                                                             n):
    # Every batch was consumed before the loss, so the resumed run (one rank) trains the same
    # batches as the run without the fault: the same hash chain, the same log of batches.
    clean, out = _run(tmp_path, BASE, name="clean")
    assert out.ok, out.violations
    run, out = _run(tmp_path, replace(BASE, faults=(_loss(what, n, 1),)))
    assert out.ok and out.incarnations == 2, out.violations
    assert run.trainer.digest == clean.trainer.digest and run.trainer.steps == BASE.steps

    def batches(r):
        return [e.batch for e in read_log(r.root / "events.jsonl").events if e.op == "consume"]

    assert batches(run) == batches(clean)


def test_the_checkpoint_of_one_world_size_resumes_on_another(tmp_path):
    # The rank is lost in batch 2's step: checkpoint 2 (two ranks) is loaded by three ranks,
    # which retrain batch 2 and go on; the final chain is the log's (the lineage check).
    run, out = _run(tmp_path, replace(BASE, faults=(_loss("train", 3, 3),)))
    assert out.ok, out.violations
    report = run.reports[0]
    assert report.checkpoint == 2 and report.retrained == [2] and report.published
    state = json.loads((run.root / "checkpoints" / "step-000002" / "trainer.json").read_text())
    assert state["world_size"] == FIRST_WORLD_SIZE and run.trainer.world_size == 3


def test_a_lost_rank_inside_recovery_is_recovered_from(tmp_path):
    # The process dies in batch 1's step; the second incarnation's recovery retrains batch 0
    # (train #1) and batch 1 (train #2), and a rank is lost there: recovery stops with the
    # RankLost, and the third incarnation recovers again on one rank.
    schedule = replace(BASE, faults=(Fault("trainer_crash", what="train", arg=2),
                                     _loss("train", 2, 1)))
    run, out = _run(tmp_path, schedule)
    assert out.ok, out.violations
    assert out.incarnations == 3 and len(run.reports) == 1  # the first recovery stopped
    assert run.worlds == [FIRST_WORLD_SIZE, FIRST_WORLD_SIZE, 1]
    assert run.ev.rank_losses[0].incarnation == 2 and run.ev.rank_losses[0].rank_lost


def test_the_fake_trainer_refuses_every_call_after_a_lost_rank(tmp_path):
    async def go():
        trainer = HashTrainer(VirtualClock(), 0.0, Crash(trainer=("export", 1), rank_loss=True),
                              world_size=2)
        with pytest.raises(RankLost, match="lost while in 'export'"):
            await trainer.export_weights(0)
        for call in (trainer.export_weights(0), trainer.save_checkpoint(tmp_path),
                     trainer.load_checkpoint(tmp_path)):
            with pytest.raises(RankLost, match="^the sharded trainer is stopped: "):
                await call
        # a process crash at the same point is no RankLost: the process dies
        dying = HashTrainer(VirtualClock(), 0.0, Crash(trainer=("export", 1)))
        with pytest.raises(SimulatedCrash):
            await dying.export_weights(0)

    asyncio.run(go())


class _StopsWithAnother(Driver):
    async def run(self):
        try:
            return await super().run()
        except RankLost as exc:
            raise RuntimeError("the trainer failed") from exc


class _StopsWithAnotherVariant(Variant):
    name = "stops_with_another"

    def driver_class(self):
        return _StopsWithAnother


@pytest.mark.parametrize("name, needles", [
    ("swallow_rank_loss", ("the incarnation still finished the run", "wrote a publish line")),
    ("publish_on_rank_loss", ("wrote a publish line",)),
])
def test_a_driver_that_mishandles_a_lost_rank_is_caught(tmp_path, name, needles):
    # Batch 2's step loses a rank; the weights of version 2 were exported before it.
    run, out = _run(tmp_path, replace(BASE, faults=(_loss("train", 3, 1),)), VARIANTS[name])
    assert not out.ok
    found = [v for v in out.violations if v.startswith("rank_loss: incarnation 1:")]
    assert all(any(n in v for v in found) for n in needles), out.violations
    assert any(v.startswith("lineage: an engine loaded weights claiming version 3") for v in
               out.violations), out.violations


def test_a_run_that_stops_with_another_error_than_the_rank_lost_is_caught(tmp_path):
    _, out = _run(tmp_path, replace(BASE, faults=(_loss("train", 2, 1),)),
                  _StopsWithAnotherVariant())
    assert any(v.startswith("rank_loss: incarnation 1:") and "not with the RankLost" in v
               for v in out.violations), out.violations
