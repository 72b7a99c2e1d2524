"""Conservation: every admitted trajectory trained, aborted or dropped once, or still live; the
engines' token count equals the trajectories'. Shown to catch broken policies and ledgers."""

from __future__ import annotations

import pytest

from reserve_occupy_sim.model.checks import (CheckFailed, check_batches, check_conservation,
                                             check_tokens)
from reserve_occupy_sim.model.core import PolicyError
from reserve_occupy_sim.model.engine import Instance
from reserve_occupy_peers import POLICIES
from reserve_occupy_peers.roll import Roll
from reserve_occupy_peers.unbounded import Unbounded

from sim_helpers import BATCH, run_policy


@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("eta", [1, 3])
def test_every_policy_conserves(name, eta, workload, cost):
    sim = run_policy((name, eta), workload, cost)
    counts = check_conservation(sim)
    check_tokens(sim)
    check_batches(sim)
    assert counts["trained"] == 8 * BATCH * workload.group_size
    assert counts["admitted"] == (counts["trained"] + counts["aborted"] + counts["dropped"]
                                  + counts["live"])


def test_waste_is_counted_where_baselines_discard(workload, cost):
    # eta = 1 with this workload: verl and TRL drop finished data at L3
    for name in ("verl_drop", "trl"):
        sim = run_policy((name, 1), workload, cost, batches=12)
        assert sim.ledger.dropped, name
        check_conservation(sim)


def test_roll_garbage_collection_aborts_and_discards(workload, cost):
    class InflatedQuota(Roll):
        """ROLL with twice the quota growth, so cohorts outgrow what the steps take."""

        def _advance_step(self, step):
            super()._advance_step(step)
            self.quota += self.batch_size

    sim = run_policy(InflatedQuota(1), workload, cost, batches=10)
    assert sim.ledger.aborted and sim.ledger.dropped
    check_conservation(sim)
    check_tokens(sim)


# ------------------------------------------------------------------ the checks can fail ----

class TrainsTwice(Unbounded):
    """Broken: hands out the same groups again."""

    def take_batch(self):
        batch = super().take_batch()
        if batch is not None:
            self.last = batch
            return batch
        return getattr(self, "last", None)


class TrainsUnfinished(Unbounded):
    """Broken: trains whatever was admitted first, finished or not."""

    def attach(self, sim):
        super().attach(sim)
        self.used: set[int] = set()

    def take_batch(self):
        todo = [g for g in self.sim.groups if g.gid not in self.used]
        if len(todo) < self.batch_size:
            return None
        self.used.update(g.gid for g in todo[: self.batch_size])
        return [r for g in todo[: self.batch_size] for r in g.requests]


class ShortBatches(Unbounded):
    """Broken: trains one group too few."""

    def take_batch(self):
        batch = super().take_batch()
        return None if batch is None else batch[: -self.group_size]


def test_conservation_catches_double_training(workload, cost):
    sim = run_policy(TrainsTwice(1), workload, cost)
    with pytest.raises(CheckFailed, match="more than one fate"):
        check_conservation(sim)


def test_conservation_catches_training_unfinished_data(workload, cost):
    sim = run_policy(TrainsUnfinished(1), workload, cost, batches=3)
    with pytest.raises(CheckFailed, match="before it finished"):
        check_conservation(sim)


def test_conservation_catches_a_lost_abort_record(workload, cost):
    class InflatedQuota(Roll):
        def _advance_step(self, step):
            super()._advance_step(step)
            self.quota += self.batch_size

    sim = run_policy(InflatedQuota(1), workload, cost, batches=10)
    sim.ledger.aborted.pop()  # the ledger forgets one aborted trajectory
    with pytest.raises(CheckFailed, match="no abort was recorded"):
        check_conservation(sim)


def test_batch_check_catches_short_batches(workload, cost):
    sim = run_policy(ShortBatches(1), workload, cost, batches=3)
    with pytest.raises(CheckFailed, match="expected 32"):
        check_batches(sim)


def test_token_check_catches_a_wrong_closed_form(workload, cost, monkeypatch):
    real = Instance.steps_in
    monkeypatch.setattr(Instance, "steps_in", lambda self, dt: real(self, dt) * 1.001)
    sim = run_policy(("reserve_occupy", 1), workload, cost, batches=3)
    with pytest.raises(CheckFailed, match="engines decoded"):
        check_tokens(sim)


def test_simulator_refuses_to_drop_unfinished_or_abort_finished(workload, cost):
    class DropsEarly(Unbounded):
        def admit(self):
            super().admit()
            if self.sim.groups:
                self.sim.drop(self.sim.groups[0].requests)

    with pytest.raises(PolicyError, match="has not finished"):
        run_policy(DropsEarly(1), workload, cost, batches=1)

    class AbortsFinished(Unbounded):
        def on_group_done(self, group):
            super().on_group_done(group)
            self.sim.abort_group(group)

    with pytest.raises(PolicyError, match="only running groups"):
        run_policy(AbortsFinished(1), workload, cost, batches=1)
