"""Behaviour specific to single policies: the synchronous reference equals Reserve–Occupy at
eta = 0; NeMo-RL's weight_fifo can wedge; verl refills what it drops; TRL drops per sample."""

from __future__ import annotations

import pytest

from reserve_occupy_sim.model.core import SimulationStalled
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.runner import RunSpec, simulate
from reserve_occupy_sim.model.workload import generate
from sim_helpers import run_policy


def test_synchronous_equals_reserve_occupy_at_eta_zero(workload, cost):
    a = run_policy(("reserve_occupy", 0), workload, cost, batches=10)
    b = run_policy(("synchronous", 0), workload, cost, batches=10)
    assert ([(x.t_consume, x.t_published, sorted(x.tids)) for x in a.ledger.batches]
            == [(x.t_consume, x.t_published, sorted(x.tids)) for x in b.ledger.batches])


def test_weight_fifo_wedges_with_min_groups_equal_to_the_batch():
    # 16 prompts per step, eta = 3: max_inflight_prompts = 32 splits a dispatch batch across a
    # weight update, a version ends up with fewer groups than the step still needs, forever.
    w, c = generate(0), preset("qwen3-8b-h20")
    with pytest.raises(SimulationStalled, match="nemo_weight_fifo"):
        simulate(RunSpec("nemo_weight_fifo", 3, 10,
                         options=(("min_groups_for_streaming_train", 16),)), w, c)
    result, _ = simulate(RunSpec("nemo_weight_fifo", 3, 10), w, c)  # streaming default: fine
    assert result.batches == 10


def test_verl_keeps_its_outstanding_prompts_constant(workload, cost):
    sim = run_policy(("verl_drop", 1), workload, cost, batches=12)
    policy = sim.policy
    dropped_groups = len(sim.ledger.dropped) // sim.group_size
    # (1 + warmup) batches at start, one per published step, one refill per evicted group
    assert len(sim.groups) == (2 + 12) * sim.batch_size + dropped_groups
    assert dropped_groups > 0 and policy.threshold == 2


def test_trl_drops_single_samples_at_dequeue(workload, cost):
    sim = run_policy(("trl", 1), workload, cost, batches=12)
    assert sim.ledger.dropped
    by_tid = {r.tid: r for r in sim.ledger.requests}
    for batch in sim.ledger.batches:  # it kept what passed at dequeue: one version earlier
        checked_at = max(batch.version - 1, 0)  # (the loader fetches a batch ahead)
        assert all(checked_at - by_tid[t].group.v_tag <= 1 for t in batch.tids)
    assert max(max(b.staleness) for b in sim.ledger.batches) <= 2  # trained: max_staleness + 1
