"""Reserve–Occupy inside AReaL's real rollout dispatcher (areal==1.0.4 on CPU, toy tasks).

The same task schedule (a straggler every tenth task, longer than ``prepare_batch``'s 1 s wait)
runs through AReaL's ``WorkflowExecutor`` twice: with AReaL's own ``StalenessManager``, a
straggler admitted at version v trains many versions later; with Reserve–Occupy installed,
no trained trajectory is older than eta and every finished trajectory is trained.
"""

from __future__ import annotations

import pytest

from reserve_occupy import IllegalOperation
from reserve_occupy.integrations.areal import (
    AReaLIntegrationError,
    ReserveOccupyStalenessManager,
)

from .areal_helpers import ToyEngine, run_toy_training, straggler_schedule  # skips w/o AReaL

ETA, B, STEPS = 1, 4, 8
SCHEDULE = straggler_schedule(every=10, long_s=1.5)


@pytest.mark.slow
def test_areal_as_shipped_exceeds_eta_and_reserve_occupy_does_not():
    shipped = run_toy_training(reserve_occupy=False, steps=STEPS, batch_size=B, eta=ETA,
                               durations=SCHEDULE)
    ours = run_toy_training(reserve_occupy=True, steps=STEPS, batch_size=B, eta=ETA,
                            durations=SCHEDULE)
    print(f"\nAReaL as shipped   (max_head_offpolicyness={ETA}): staleness "
          f"{shipped.histogram()} max {shipped.max_staleness}, {shipped.seconds:.1f} s")
    print(f"AReaL + Reserve–Occupy (eta={ETA}):                staleness "
          f"{ours.histogram()} max {ours.max_staleness}, {ours.seconds:.1f} s")
    assert shipped.max_staleness > ETA  # AReaL bounds counts: the straggler trains late
    assert ours.max_staleness <= ETA
    assert all(len(b) == B for b in ours.batches)
    # nothing dropped: every task up to the last trained one was trained or is still live
    assert all(i in ours.trained or i in ours.live for i in range(max(ours.trained) + 1))
    assert not [e for e in ours.events if e.op in ("abort", "filter")]


def test_rejected_rollouts_free_their_slot_and_the_bound_holds():
    rejected = frozenset({3, 9, 14})
    run = run_toy_training(reserve_occupy=True, steps=5, batch_size=B, eta=ETA,
                           durations=straggler_schedule(every=7, long_s=0.3),
                           rejected=rejected)
    assert run.max_staleness <= ETA
    assert not rejected & set(run.trained)
    assert len(set(run.trained)) == len(run.trained)
    for i in range(max(run.trained) + 1):  # nothing dropped: trained, rejected or still live
        assert i in run.trained or i in rejected or i in run.live, i
    aborted = [e.unit_id for e in run.events if e.op == "abort"]
    assert sorted(aborted) == sorted(rejected)


def test_get_capacity_is_exactly_what_reserve_grants():
    engine = ToyEngine()
    manager = ReserveOccupyStalenessManager(engine, max_concurrent_rollouts=6,
                                            consumer_batch_size=2, max_staleness=2)
    granted = 0
    while manager.get_capacity() > 0:
        assert manager.reserve(granted)
        granted += 1
    assert granted == 6  # the concurrency limit, below (eta + 1) * B = 6 slots
    assert not manager.reserve(granted)
    manager.finished(0, accepted=True)
    manager.finished(1, accepted=True)
    manager.finished(2, accepted=False)  # its slot is free again
    assert manager.get_capacity() == 1  # the aborted one's slot; the rest are taken
    assert manager.reserve(100)
    assert manager.get_capacity() == 0 and not manager.reserve(999)


def test_publish_follows_the_version_provider():
    engine = ToyEngine()
    manager = ReserveOccupyStalenessManager(engine, None, consumer_batch_size=1, max_staleness=0)
    assert manager.reserve("a")
    manager.finished("a", accepted=True)
    batch = manager.next_batch()
    assert batch is not None and batch.unit_ids == ("a",)
    manager.handed_out()
    with pytest.raises(IllegalOperation):  # trained but the weights were not published
        manager.next_batch()
    engine.set_version(1)
    assert manager.get_capacity() == 1 and manager.controller.version == 1
    engine.set_version(3)  # two versions for one trained batch: a bug in the loop
    with pytest.raises(AReaLIntegrationError, match="once per trained batch"):
        manager.get_capacity()


def test_recovered_version_is_the_origin():
    engine = ToyEngine()
    engine.set_version(7)
    manager = ReserveOccupyStalenessManager(engine, None, consumer_batch_size=1, max_staleness=1)
    manager.on_version_recovered(7)
    assert manager.get_capacity() == 2
    assert manager.reserve("x")
    with pytest.raises(AReaLIntegrationError, match="before the first rollout"):
        manager.on_version_recovered(9)


def test_install_refuses_an_executor_that_is_not_initialized():
    from areal.api.cli_args import InferenceEngineConfig
    from areal.infra.workflow_executor import WorkflowExecutor

    from reserve_occupy.integrations.areal import install

    executor = WorkflowExecutor(InferenceEngineConfig(consumer_batch_size=2), ToyEngine())
    with pytest.raises(AReaLIntegrationError, match="initialize"):
        install(executor)
