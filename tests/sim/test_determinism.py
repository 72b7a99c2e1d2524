"""Same inputs, same results; a policy with hidden randomness is caught."""

from __future__ import annotations

import random

import pytest
from sim_helpers import run_policy

from reserve_occupy_sim.model.checks import CheckFailed, check_deterministic
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.metrics import summarize
from reserve_occupy_peers import POLICIES
from reserve_occupy_peers.base import members
from reserve_occupy_peers.unbounded import Unbounded
from reserve_occupy_sim.model.runner import RunSpec, simulate
from reserve_occupy_sim.model.workload import MathReasoningShape, generate


@pytest.mark.parametrize("name", list(POLICIES))
def test_same_seed_same_result(name, workload, cost):
    check_deterministic(lambda: summarize(run_policy((name, 2), workload, cost)).to_json())


def test_the_seed_matters(cost):
    def run(seed):
        w = generate(seed, MathReasoningShape(groups=128))
        return simulate(RunSpec("reserve_occupy", 1, 6, 4), w, cost)[0].to_json()

    assert run(5) == run(5)
    assert run(5) != run(6)


class PicksAtRandom(Unbounded):
    """Broken: trains a random selection of finished groups from an unseeded generator. It waits
    for twice a batch of finished groups, so that the random choice is a real one (with exactly a
    batch on hand it would pick them all, and two runs agreed about a quarter of the time)."""

    def take_batch(self):
        if len(self._finished) < 2 * self.batch_size:
            return None
        chosen = random.Random().sample(list(self._finished), self.batch_size)
        for g in chosen:
            self._finished.remove(g)
        return members(chosen)


def test_determinism_check_catches_hidden_randomness(workload):
    cost = preset("qwen3-8b-h20")
    with pytest.raises(CheckFailed, match="differ"):
        check_deterministic(lambda: summarize(
            run_policy(PicksAtRandom(0), workload, cost, batches=10)).to_json())


@pytest.mark.parametrize("name", list(POLICIES))
def test_same_result_with_filtering(name, workload, cost):
    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.filtering import RewardFilter
    from reserve_occupy_peers import make_policy

    def once():
        options = {"stuck_timeout_s": 20.0} if name == "reserve_occupy" else {}
        sim = Simulator(make_policy(name, 2, **options), workload, cost, batches=6,
                        batch_size=4, filtering=RewardFilter(0.3, seed=9)).run()
        return summarize(sim).to_json()

    check_deterministic(once)


def test_the_filter_seed_matters(workload, cost):
    from reserve_occupy_sim.model.filtering import RewardFilter

    def run(seed):
        spec = RunSpec("reserve_occupy", 1, 6, 4, filtering=RewardFilter(0.3, seed=seed))
        return simulate(spec, workload, cost)[0].to_json()

    assert run(1) == run(1)
    assert run(1) != run(2)
