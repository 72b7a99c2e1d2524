"""The clairvoyant limit (reserve_occupy_sim/studies/bound.py): every strictly bounded, drop-free
policy stays under the upper bound, the bound's argument is needed as written (a variant that
forgets that staleness windows overlap is beaten), the constructed schedule is valid, and the
CLI."""

from __future__ import annotations

import dataclasses

import pytest
from sim_helpers import BATCH, run_policy

from reserve_occupy_sim.studies import bound as bound_mod
from reserve_occupy_sim.studies.bound import (Bound, BoundError, _train_time, bound_terms,
                                              check_drop_free, clairvoyant_bound,
                                              inflight_collect_time, window_groups)
from reserve_occupy_sim.model.checks import CheckFailed
from reserve_occupy_sim.model.metrics import steady_throughput

BATCHES = 20
WARMUP = BATCHES // 5
BOUNDED_DROP_FREE = [("reserve_occupy", {}), ("nemo_in_order", {}), ("nemo_weight_fifo", {}),
                     ("synchronous", {}), ("clairvoyant", {"fill": "long"}),
                     ("clairvoyant", {"fill": "fifo", "max_running": 8}),
                     ("clairvoyant", {"fill": "long", "start": "longest"})]


def _steady(name, eta, opts, workload, cost):
    sim = run_policy((name, eta, opts), workload, cost, batches=BATCHES)
    check_drop_free(sim, sim.policy.eta)
    return steady_throughput(sim, WARMUP)


@pytest.fixture(scope="module")
def bounds(workload, cost):
    return {eta: clairvoyant_bound(workload, cost, eta=eta, batch_size=BATCH, batches=BATCHES)
            for eta in (0, 1, 2)}


@pytest.mark.parametrize("eta", [0, 1, 2])
@pytest.mark.parametrize("name,opts", BOUNDED_DROP_FREE)
def test_bounded_policies_stay_under_the_bound(bounds, workload, cost, eta, name, opts):
    tok_s = _steady(name, eta, opts, workload, cost)
    assert 0 < tok_s <= bounds[eta].upper_tok_s


@pytest.mark.parametrize("eta", [0, 1, 2])
def test_schedule_is_a_valid_lower_bound_under_the_upper_bound(bounds, eta):
    b = bounds[eta]
    assert 0 < b.schedule_tok_s <= b.upper_tok_s
    assert b.schedule_max_staleness <= eta
    assert b.upper_tok_s == min(b.trainer_tok_s, b.rollout_tok_s, b.window_tok_s,
                                b.inflight_tok_s)
    assert b.notes.startswith("binding: ")


def test_a_bound_that_forgets_overlapping_windows_is_beaten(bounds, workload, cost):
    """The staleness-window term sums eta + 1 periods per step because windows overlap. A bound
    that instead demands every *single* period hold the slowest group's decode (the eta = 0
    window) is too tight: bounded policies at eta = 2 exceed it. So the test above can fail."""
    groups = window_groups(workload, BATCH, BATCHES, WARMUP)
    wrong = bound_terms(groups, cost, eta=0, batch_size=BATCH, group_size=workload.group_size)
    too_tight = min(wrong.values())
    beaten = [name for name, opts in BOUNDED_DROP_FREE
              if _steady(name, 2, opts, workload, cost) > too_tight]
    assert beaten, "no bounded policy beats the eta=0 window at eta=2: the check cannot fail"
    assert bounds[2].upper_tok_s > too_tight


def test_inflight_term_is_the_combined_trainer_and_rollout_limit(workload, cost):
    """The in-flight term never exceeds the trainer or the rollout term (it adds the collection
    time to the training time, and its engine work includes the rollout term's), and at eta = 0,
    where nothing may decode while a batch trains, it is far below both."""
    groups = window_groups(workload, BATCH, BATCHES, WARMUP)
    for eta in (0, 1, 2):
        t = bound_terms(groups, cost, eta=eta, batch_size=BATCH, group_size=workload.group_size)
        assert t["inflight"] <= min(t["trainer"], t["rollout"]) * (1 + 1e-12)
    t0 = bound_terms(groups, cost, eta=0, batch_size=BATCH, group_size=workload.group_size)
    assert t0["inflight"] < 0.7 * min(t0["trainer"], t0["rollout"])


def test_an_inflight_bound_that_forgets_decoding_during_training_is_beaten(workload, cost):
    """The in-flight term lets the engines decode while a batch trains (up to eta*B groups in
    flight). A variant that forgets this (nothing decodes during training, as at eta = 0) is
    too tight: bounded policies at eta = 2 beat it. So the in-flight argument is needed as
    written, and the bound check above can fail."""
    groups = window_groups(workload, BATCH, BATCHES, WARMUP)
    steps, G = len(groups) // BATCH, workload.group_size
    train = _train_time(groups, cost, steps, BATCH, G)
    tokens = sum(g.prompt_len * G + sum(g.response_lens) for g in groups)
    collect = inflight_collect_time(groups, cost, eta=2, batch_size=BATCH, group_size=G,
                                    train=train, decode_while_training=False)
    too_tight = tokens / (collect + train + steps * cost.train.sync_s)
    beaten = [name for name, opts in BOUNDED_DROP_FREE
              if _steady(name, 2, opts, workload, cost) > too_tight]
    assert beaten, "no bounded policy decodes usefully while training: the check cannot fail"


def test_unbounded_may_exceed_only_by_breaking_staleness(bounds, workload, cost):
    sim = run_policy(("unbounded", 1), workload, cost, batches=BATCHES)
    if steady_throughput(sim, WARMUP) > bounds[1].upper_tok_s:
        assert max(max(b.staleness) for b in sim.ledger.batches) > 1


def test_drop_free_check_catches_drops(workload, cost):
    sim = run_policy(("verl_drop", 1), workload, cost, batches=BATCHES)
    assert sim.ledger.dropped, "verl drops at eta=1 on this workload"
    with pytest.raises(CheckFailed, match="drop_free"):
        check_drop_free(sim, 1)


def test_drop_free_check_catches_a_group_left_behind(workload, cost):
    class LeavesOneBehind(bound_mod.make_policy("clairvoyant", 1).__class__):
        name = "leaves_one_behind"

        def on_group_done(self, group):
            if group.gid == 5:
                self._untrained.remove(group)  # never trained, never dropped: silently lost
                return
            super().on_group_done(group)

    from reserve_occupy_sim.model.core import Simulator
    sim = Simulator(LeavesOneBehind(1), workload, cost, batches=BATCHES, batch_size=BATCH).run()
    with pytest.raises(CheckFailed, match="group 5"):
        check_drop_free(sim, 1)


def test_clairvoyant_at_eta_0_is_the_synchronous_loop(workload, cost):
    a = run_policy(("clairvoyant", 0, {"fill": "fifo"}), workload, cost, batches=6)
    b = run_policy(("synchronous", 0), workload, cost, batches=6)
    assert [r.t_published for r in a.ledger.batches] == [r.t_published for r in b.ledger.batches]


def test_clairvoyant_longest_first_queues_each_admission_burst_longest_first(workload, cost):
    """start="longest": the groups the deadlines allow are admitted together, in the order of
    their longest member (not workload order); nothing is skipped or admitted twice."""
    sim = run_policy(("clairvoyant", 1, {"start": "longest"}), workload, cost, batches=6)
    plain = run_policy(("clairvoyant", 1), workload, cost, batches=6)
    n = len(workload.groups)
    longest = [max(g.spec.response_lens) for g in sim.groups]
    first = BATCH * 2  # eta = 1: the first burst is two batches' worth of groups
    assert longest[:first] == sorted(longest[:first], reverse=True)
    assert (sorted(g.spec.group for g in sim.groups[:first])
            == sorted(workload.groups[i % n].group for i in range(first)))
    assert ([g.spec.group for g in plain.groups[:first]]
            == [workload.groups[i].group for i in range(first)])  # fifo: workload order
    check_drop_free(sim, 1)


def test_clairvoyant_rejects_bad_options():
    with pytest.raises(ValueError, match="fill"):
        bound_mod.make_policy("clairvoyant", 1, fill="random")
    with pytest.raises(ValueError, match="max_running"):
        bound_mod.make_policy("clairvoyant", 1, max_running=0)
    with pytest.raises(ValueError, match="start"):
        bound_mod.make_policy("clairvoyant", 1, start="shortest")
    with pytest.raises(ValueError, match="max_running applies"):
        bound_mod.make_policy("clairvoyant", 1, start="longest", max_running=8)


def test_bound_api_and_bad_arguments(workload, cost, bounds):
    b = bounds[1]
    assert isinstance(b, Bound)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.upper_tok_s = 0.0  # type: ignore[misc]
    for kwargs, name in [({"eta": -1}, "eta"), ({"batch_size": 0}, "batch_size"),
                         ({"batches": 0}, "batches"), ({"warmup": -2}, "warmup")]:
        args = {"eta": 1, "batch_size": BATCH, "batches": 4, **kwargs}
        with pytest.raises(BoundError, match=name):
            clairvoyant_bound(workload, cost, **args)


def test_cli_prints_the_table_and_rejects_bad_input(capsys):
    assert bound_mod.main(["--seeds", "0", "--eta", "1", "--batches", "5",
                           "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and "| 1 |" in out and "reserve_occupy" in out
    assert bound_mod.main(["--eta", "one"]) == 2
    assert "--eta" in capsys.readouterr().err
    for bad, needle in ((["--batches", "4,5"], "takes one integer"),
                        (["--eta", "5000"], "--eta must be in")):
        assert bound_mod.main(bad) == 2  # refused before any run, not cut or left to the core
        assert needle in capsys.readouterr().err
    assert bound_mod.main(["--preset", "nope"]) == 2
