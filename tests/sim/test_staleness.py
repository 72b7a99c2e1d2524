"""The staleness bound: every bounded policy trains nothing older than eta; the check catches a
policy that does, and AReaL's count-based control shows why the check matters."""

from __future__ import annotations

import pytest

from reserve_occupy_sim.model.checks import CheckFailed, check_staleness
from reserve_occupy_peers import POLICIES
from reserve_occupy_peers.reserve_occupy import ReserveOccupy
from sim_helpers import run_policy

BOUNDED = [name for name, cls in POLICIES.items() if cls.bounded]


@pytest.mark.parametrize("name", BOUNDED)
@pytest.mark.parametrize("eta", [0, 1, 2, 3])
def test_bounded_policies_respect_eta(name, eta, workload, cost):
    sim = run_policy((name, eta), workload, cost, batches=10)
    worst = check_staleness(sim, sim.policy.eta)
    assert worst <= eta


def test_reserve_occupy_uses_its_whole_window(workload, cost):
    # not vacuous: with eta = 3 some trajectories do train at staleness 2 or 3
    sim = run_policy(("reserve_occupy", 3), workload, cost, batches=12)
    assert check_staleness(sim, 3) >= 2


def test_reserve_occupy_invariants_hold_throughout(workload, cost):
    policy = ReserveOccupy(2, check_every=1)  # the controller's own check after every operation
    run_policy(policy, workload, cost, batches=6)


class ClaimsTighterBound(ReserveOccupy):
    """Broken: runs the controller with eta + 1 but claims eta."""

    def attach(self, sim):
        self.eta += 1
        super().attach(sim)
        self.eta -= 1


def test_check_catches_a_policy_exceeding_its_bound(workload, cost):
    sim = run_policy(ClaimsTighterBound(1), workload, cost, batches=12)
    with pytest.raises(CheckFailed, match=r"staleness 2, outside \[0, 1\]"):
        check_staleness(sim, sim.policy.eta)


def test_areal_counts_do_not_bound_each_trajectory(workload, cost):
    # AReaL bounds how far rollout runs ahead in *counts*; a straggler still trains late
    sim = run_policy(("areal", 1), workload, cost, batches=12)
    with pytest.raises(CheckFailed, match="staleness"):
        check_staleness(sim, 1)
