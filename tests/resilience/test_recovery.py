"""Crash recovery at chosen crash points: before every durable write of a small run (each with
and without a torn log line), and the interesting ones named, with what recovery must do there.

The runs are the fault harness's (``reserve_occupy_faults.harness``): the production driver, durable
store and recovery on a virtual clock, the fake engine and the hash-chain trainer, every check
of ``reserve_occupy_faults.properties`` at the end.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from reserve_occupy_faults.harness import Run, Variant
from reserve_occupy_faults.schedule import Fault, Schedule

BASE = Schedule(seed=3, eta=1, batch_size=2, group_size=2, candidates=2, capacity=2, engines=1,
                steps=4, commit_every=2)


def _run(tmp_path, schedule, name="run"):
    root = tmp_path / name
    root.mkdir()
    run = Run(schedule, root, Variant())
    return run, run.run()


def _writes(tmp_path, schedule):
    """The kinds of the durable writes of the crash-free run, in order."""
    run, out = _run(tmp_path, schedule, "clean")
    assert out.ok, out.violations
    return run.crash_log[0].kinds


def _crash(tmp_path, schedule, before, torn=None, name="crashed"):
    """Crash just before durable write number ``before`` (0-based index into ``_writes``)."""
    run, out = _run(tmp_path, replace(schedule, faults=(Fault("crash", target=before + 1,
                                                              arg=torn),)), name)
    assert out.ok, out.violations
    assert out.incarnations == 2
    return run.reports[0]


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [
    BASE,
    replace(BASE, commit_every=1, eta=2),
    replace(BASE, capacity=3, candidates=3, commit_every=0),  # both oversamplings
], ids=["every2", "every1-eta2", "oversampling-nockpt"])
def test_a_crash_before_any_durable_write_recovers(tmp_path, schedule):
    kinds = _writes(tmp_path, schedule)
    tried: Counter[str] = Counter()
    for k, kind in enumerate(kinds):
        for torn in ((None, 7) if kind.startswith("log") else (None,)):
            crashing = replace(schedule, faults=(Fault("crash", target=k + 1, arg=torn),))
            _, out = _run(tmp_path, crashing, f"w{k}-{torn}")
            assert out.ok, (k, kind, torn, out.violations)
            tried[kind] += 1
    print(f"\n{sum(tried.values())} crash points, by the write interrupted: {dict(tried)}")
    assert tried["checkpoint-commit"] or not schedule.commit_every


def test_consumed_but_not_trained(tmp_path):
    # The process dies in the middle of training batch 1: the log has its consume, no publish.
    run, out = _run(tmp_path, replace(BASE, faults=(Fault("trainer_crash", what="train",
                                                          arg=2),)))
    assert out.ok, out.violations
    report = run.reports[0]
    assert report.version_logged == 1 and report.version == 2
    assert report.retrained == [0, 1] and report.published and report.checkpoint is None


def test_checkpoint_committed_but_not_published(tmp_path):
    kinds = _writes(tmp_path, BASE)
    commit = kinds.index("checkpoint-commit")
    publish = kinds.index("log:publish", commit)
    report = _crash(tmp_path, BASE, publish)  # after the rename, before the publish line
    assert report.checkpoint == 2 and report.version_logged == 1 and report.version == 2
    assert report.retrained == [] and report.published  # nothing to retrain: just publish


def test_checkpoint_saved_but_not_committed(tmp_path):
    kinds = _writes(tmp_path, BASE)
    report = _crash(tmp_path, BASE, kinds.index("checkpoint-commit"))  # before the rename
    assert report.checkpoint is None and report.retrained == [0, 1] and report.published
    assert report.deleted >= 1  # the uncommitted .tmp- directory


def test_published_then_crashed_replays_from_the_checkpoint(tmp_path):
    schedule = replace(BASE, commit_every=2, steps=5)
    kinds = _writes(tmp_path, schedule)
    third = [i for i, k in enumerate(kinds) if k == "log:publish"][2]
    report = _crash(tmp_path, schedule, third + 1)  # version 3 published, checkpoint at 2
    assert report.checkpoint == 2 and report.version_logged == 3
    assert report.retrained == [2] and not report.published


def test_trajectory_written_but_occupy_not_logged_is_salvaged(tmp_path):
    kinds = _writes(tmp_path, BASE)
    at = next(i for i in range(1, len(kinds)) if kinds[i] == "log:occupy"
              and kinds[i - 1] == "trajectory")
    report = _crash(tmp_path, BASE, at)
    assert len(report.salvaged) == 1  # its data is complete on disk: occupied, not regenerated


def test_a_torn_publish_line_is_dropped_and_the_batch_published_again(tmp_path):
    kinds = _writes(tmp_path, BASE)
    at = kinds.index("log:publish")
    report = _crash(tmp_path, BASE, at, torn=12)
    assert report.torn and "torn last line" in report.torn
    assert report.version_logged == 0 and report.version == 1 and report.published


def test_a_crash_inside_recovery_is_recovered_from(tmp_path):
    kinds = _writes(tmp_path, BASE)
    mid = kinds.index("log:publish", kinds.index("log:publish") + 1) - 3
    schedule = replace(BASE, faults=(Fault("crash", target=mid), Fault("crash", target=1)))
    run, out = _run(tmp_path, schedule)
    assert out.ok, out.violations
    assert out.incarnations == 3 and len(run.reports) == 1  # the first recovery died
