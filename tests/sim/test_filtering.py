"""Reward filtering: the seeded no-gradient outcome, and every policy's handling of it.
Filtered groups are counted, never trained, never lost; each check is shown to fail on a broken
variant."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import BATCH

from reserve_occupy_sim.model.checks import (CheckFailed, check_conservation, check_filtering,
                                             check_run)
from reserve_occupy_sim.model.core import SimulationStalled, Simulator
from reserve_occupy_sim.model.filtering import FilterError, RewardFilter
from reserve_occupy_sim.model.metrics import summarize
from reserve_occupy_peers import POLICIES, make_policy
from reserve_occupy_peers.unbounded import Unbounded

FILTER = RewardFilter(0.3, skew=1.0, seed=3)


def run(policy, workload, cost, batches=8, filtering=FILTER):
    if isinstance(policy, tuple):
        name, eta, opts = (policy + ({},))[:3]
        policy = make_policy(name, eta, **opts)
    return Simulator(policy, workload, cost, batches=batches, batch_size=BATCH,
                     filtering=filtering).run()


# ------------------------------------------------------------------ the outcome model -------

def test_rate_and_tilt(workload):
    for rate in (0.1, 0.3, 0.6):
        for skew in (-1.0, 0.0, 1.0, 2.0):
            p = RewardFilter(rate, skew).probabilities(workload)
            assert p.min() >= 0 and p.max() <= 1
            assert p.mean() == pytest.approx(rate, abs=1e-6)
    mean_len = np.array([np.mean(g.response_lens) for g in workload.groups])
    long = mean_len > np.median(mean_len)
    p = RewardFilter(0.3, 1.0).probabilities(workload)
    assert p[long].mean() > 2 * p[~long].mean()  # hard (long) groups are all-wrong more often
    p = RewardFilter(0.3, -1.0).probabilities(workload)
    assert p[~long].mean() > 2 * p[long].mean()
    assert np.allclose(RewardFilter(0.3, 0.0).probabilities(workload), 0.3)


def test_outcome_is_seeded_and_order_free(workload):
    a, b = FILTER.bind(workload), FILTER.bind(workload)
    forward = [a.no_gradient(k) for k in range(5000)]
    backward = [b.no_gradient(k) for k in reversed(range(5000))][::-1]
    assert forward == backward
    assert 0.2 < np.mean(forward) < 0.4
    other = RewardFilter(0.3, 1.0, seed=4).bind(workload)
    assert forward != [other.no_gradient(k) for k in range(5000)]


@pytest.mark.parametrize("bad", [{"rate": 1.0}, {"rate": -0.1}, {"rate": "x"},
                                 {"rate": 0.2, "skew": float("nan")}, {"rate": 0.2, "seed": 1.5}])
def test_bad_parameters_are_named(bad):
    with pytest.raises(FilterError, match="filter"):
        RewardFilter(**bad)


# ------------------------------------------------------------------ every policy ------------

VARIANTS = [(name, {}) for name in POLICIES] + [
    ("nemo_in_order", {"on_no_gradient": "drop"})]


@pytest.mark.parametrize("name,opts", VARIANTS, ids=lambda v: str(v))
@pytest.mark.parametrize("eta", [1, 3])
def test_filtered_groups_are_counted_never_trained_never_lost(name, opts, eta, workload, cost):
    sim = run((name, eta, opts), workload, cost)
    check_run(sim)  # conservation (with the filtered fate), filtering, batches, staleness
    counts = check_conservation(sim)
    fates = check_filtering(sim)
    assert fates["no_gradient"] > 0
    if sim.policy.filters:
        assert fates["filtered"] > 0 and fates["trained"] == 0
        assert counts["filtered"] == fates["filtered"] * workload.group_size
    else:  # NeMo-RL (its code) and TRL train groups without gradient
        assert fates["filtered"] == 0 and fates["trained"] > 0
    result = summarize(sim)
    assert result.fates["filtered"] == counts["filtered"]
    trained_useful = sum(b.useful_tokens for b in sim.ledger.batches)
    assert result.tokens_useful == trained_useful
    assert result.no_gradient_tokens == result.tokens_trained - trained_useful


def test_every_policy_sees_the_same_outcome_for_the_same_group(workload, cost):
    outcomes = {}
    for name in ("reserve_occupy", "verl_drop", "roll"):
        sim = run((name, 2), workload, cost)
        outcomes[name] = {g.gid: g.no_grad for g in sim.groups if g.state != "running"
                          and g.n_done == workload.group_size}
    a, b, c = outcomes.values()
    for other in (b, c):
        shared = set(a) & set(other)
        assert len(shared) > 20 and all(a[k] == other[k] for k in shared)


def test_filtering_off_changes_nothing(workload, cost):
    off = summarize(run(("reserve_occupy", 2), workload, cost, filtering=None)).to_json()
    zero = summarize(run(("reserve_occupy", 2), workload, cost,
                         filtering=RewardFilter(0.0))).to_json()
    assert off == zero


def test_synchronous_equals_reserve_occupy_at_eta_0_with_filtering(workload, cost):
    a = run(("synchronous", 0), workload, cost)
    b = run(("reserve_occupy", 0), workload, cost)
    assert [sorted(x.tids) for x in a.ledger.batches] == [sorted(x.tids) for x in b.ledger.batches]
    assert sorted(a.ledger.filtered) == sorted(b.ledger.filtered)
    assert [x.t_published for x in a.ledger.batches] == [x.t_published for x in b.ledger.batches]


def test_in_order_drop_path_promotes_and_keeps_the_bound(workload, cost):
    sim = run(("nemo_in_order", 2, {"on_no_gradient": "drop"}), workload, cost, batches=12)
    check_run(sim)
    assert sim.policy.promotions > 0 and sim.policy.replacements >= sim.policy.promotions


def test_weight_fifo_drop_path_can_wedge(workload, cost):
    # weight_fifo stamps no target step, so a dropped prompt is not replaced; at a high rate
    # the (W+1)*B prompts the gate releases cannot fill the steps and the run stalls for good.
    with pytest.raises(SimulationStalled, match="nemo_weight_fifo"):
        run(("nemo_weight_fifo", 1, {"on_no_gradient": "drop"}), workload, cost, batches=8,
            filtering=RewardFilter(0.6, seed=1))


# ------------------------------------------------------------------ the checks can fail ------

class FiltersAGoodGroup(Unbounded):
    """Broken: also discards the first group that carries a gradient."""

    harmed = False

    def on_group_done(self, group):
        if group.no_grad or not self.harmed:
            self.harmed = self.harmed or not group.no_grad
            self.sim.filter(group)
            return
        self._finished.append(group)


class TrainsWhatItFilters(Unbounded):
    """Broken: claims to filter, but trains no-gradient groups."""

    def on_group_done(self, group):
        self._finished.append(group)


class FiltersAndTrains(Unbounded):
    """Broken: records the filter but trains the group anyway."""

    def on_group_done(self, group):
        if group.no_grad:
            self.sim.filter(group)
        self._finished.append(group)


class FiltersHalf(Unbounded):
    """Broken: filters only part of a group."""

    def on_group_done(self, group):
        if group.no_grad:
            self.sim.ledger.filtered.extend(r.tid for r in group.requests[:2])
            group.state = "filtered"
            return
        self._finished.append(group)


def test_filter_check_catches_filtering_a_group_with_gradient(workload, cost):
    sim = run(FiltersAGoodGroup(1), workload, cost, batches=2)
    with pytest.raises(CheckFailed, match="carries a gradient"):
        check_filtering(sim)


def test_filter_check_catches_a_filtering_policy_that_trains_no_gradient(workload, cost):
    sim = run(TrainsWhatItFilters(1), workload, cost)
    with pytest.raises(CheckFailed, match="filters, yet trained"):
        check_filtering(sim)


def test_conservation_catches_filtered_and_trained(workload, cost):
    sim = run(FiltersAndTrains(1), workload, cost)
    with pytest.raises(CheckFailed, match="more than one fate"):
        check_conservation(sim)


def test_filter_check_catches_a_partial_filter(workload, cost):
    sim = run(FiltersHalf(1), workload, cost)
    with pytest.raises(CheckFailed, match="filtered in part"):
        check_filtering(sim)


def test_conservation_catches_a_lost_filter_record(workload, cost):
    sim = run(("reserve_occupy", 1), workload, cost)
    tid = sim.ledger.filtered.pop()  # the ledger forgets one filtered trajectory
    assert tid is not None
    with pytest.raises(CheckFailed, match="no filter was recorded"):
        check_conservation(sim)
