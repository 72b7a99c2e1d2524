"""Reserve–Occupy's timeout (§6.2): released groups are aborted in the engines and counted as L2
waste, the clock only runs while the idle trainer waits on a STUCK head, and the staleness bound
still holds. Each check is shown to fail on a broken variant."""

from __future__ import annotations

import pytest
from sim_helpers import run_policy

from reserve_occupy_sim.model.checks import (
    CheckFailed,
    check_conservation,
    check_released,
    check_run,
    check_staleness,
)
from reserve_occupy_sim.model.core import PolicyError
from reserve_occupy_sim.model.filtering import RewardFilter
from reserve_occupy_sim.model.metrics import summarize
from reserve_occupy_peers.reserve_occupy import ReserveOccupy
from reserve_occupy_peers.unbounded import Unbounded

TIMEOUT = 20.0


@pytest.mark.parametrize("eta", [1, 2, 3])
def test_released_groups_are_aborted_and_counted_as_l2_waste(eta, workload, cost):
    policy = ReserveOccupy(eta, stuck_timeout_s=TIMEOUT, check_every=1)  # controller checks too
    sim = run_policy(policy, workload, cost, batches=12)
    check_run(sim)  # conservation, released, batches, and staleness <= eta
    assert policy.released, "the timeout never fired; the test setting is too gentle"
    assert check_released(sim) == len(policy.released)
    aborted = {tid for tid, _ in sim.ledger.aborted}
    for gid in policy.released:
        assert all(r.tid in aborted for r in sim.groups[gid].requests)
    result = summarize(sim)
    assert result.waste_l2_tokens > 0 and result.fates["aborted"] > 0
    assert result.settings["released_groups"] == len(policy.released)
    assert check_staleness(sim, eta) <= eta


class Recorded(ReserveOccupy):
    """Reserve–Occupy that records, at every moment the idle trainer asks, whether the head was
    STUCK (what the timeout clock must follow)."""

    def attach(self, sim):
        super().attach(sim)
        self.trace: list[tuple[float, bool]] = []

    def take_batch(self):
        out = super().take_batch()
        self.trace.append((self.sim.now, out is None and self._head_stuck()))
        return out


class StartsWhenIdle(Recorded):
    """Broken: the clock starts as soon as the trainer waits, STUCK head or not, and never
    resets until a batch is consumed."""

    def _watch_stuck(self):
        if self._stuck_since is None:
            self._stuck_since = self.sim.now
            self.sim.set_timer(self.sim.now + self.stuck_timeout)


def clock_violations(policy: Recorded) -> list[tuple[float, float]]:
    """Releases whose waiting interval contains a moment when the head was not STUCK."""
    bad = []
    for when, since, _ in policy.release_log:
        early = when - since < policy.stuck_timeout - 1e-6
        if early or any(since <= t < when and not stuck for t, stuck in policy.trace):
            bad.append((since, when))
    return bad


def run_filtered(policy, workload, cost, batches=12):
    # filtering empties head slots (STUCK -> PENDING), so the clock has to reset sometimes
    from reserve_occupy_sim.model.core import Simulator

    return Simulator(policy, workload, cost, batches=batches, batch_size=4,
                     filtering=RewardFilter(0.3, seed=2)).run()


@pytest.mark.parametrize("filtered", [False, True])
def test_the_clock_runs_only_while_the_head_is_stuck(filtered, workload, cost):
    policy = Recorded(1, stuck_timeout_s=TIMEOUT)
    sim = (run_filtered if filtered else run_policy)(policy, workload, cost, batches=12)
    assert policy.release_log and not clock_violations(policy)
    trained_at = {b.t_consume for b in sim.ledger.batches}
    assert not trained_at & {when for when, _, _ in policy.release_log}


def test_clock_check_catches_a_clock_that_ignores_the_head(workload, cost):
    # at eta 3 the head is often PENDING (admission lags the engines) while the trainer waits
    policy = StartsWhenIdle(3, stuck_timeout_s=TIMEOUT)
    run_policy(policy, workload, cost, batches=12)
    assert clock_violations(policy)
    honest = Recorded(3, stuck_timeout_s=TIMEOUT)
    run_policy(honest, workload, cost, batches=12)
    assert honest.release_log and not clock_violations(honest)


def test_a_timeout_longer_than_any_wait_changes_nothing(workload, cost):
    base = summarize(run_policy(("reserve_occupy", 2), workload, cost, batches=10)).to_json()
    long = summarize(run_policy(ReserveOccupy(2, stuck_timeout_s=1e9), workload, cost,
                                batches=10)).to_json()
    for key in ("throughput", "wall_s", "staleness_counts", "fates", "batch_seconds"):
        assert base[key] == long[key], key


def test_timeout_with_filtering_conserves(workload, cost):
    policy = ReserveOccupy(2, stuck_timeout_s=TIMEOUT, check_every=1)
    sim = run_filtered(policy, workload, cost, batches=10)
    check_run(sim)
    assert policy.released and sim.ledger.filtered


@pytest.mark.parametrize("bad", [0, -5, True, "60"])
def test_bad_timeout_is_refused(bad):
    with pytest.raises(ValueError, match="stuck_timeout_s"):
        ReserveOccupy(1, stuck_timeout_s=bad)


# ------------------------------------------------------------------ the checks can fail ------

class ReleasesButKeepsGenerating(ReserveOccupy):
    """Broken: calls release_stuck but never stops the released groups in the engines; their
    completions are ignored (the controller no longer knows them)."""

    def on_timer(self):
        self._stuck_since = None
        for unit in self.controller.release_stuck():
            self._groups.pop(unit)
            self.released.append(unit)

    def on_group_done(self, group):
        if group.gid in self.released:
            return
        super().on_group_done(group)


def test_released_check_catches_groups_left_running(workload, cost):
    sim = run_policy(ReleasesButKeepsGenerating(1, stuck_timeout_s=TIMEOUT), workload, cost,
                     batches=12)
    assert sim.policy.released
    with pytest.raises(CheckFailed, match="released by the timeout but is"):
        check_released(sim)


def test_released_check_catches_a_lost_abort_record(workload, cost):
    policy = ReserveOccupy(1, stuck_timeout_s=TIMEOUT)
    sim = run_policy(policy, workload, cost, batches=12)
    victim = {r.tid for r in sim.groups[policy.released[0]].requests}
    sim.ledger.aborted = [(t, n) for t, n in sim.ledger.aborted if t not in victim]
    with pytest.raises(CheckFailed, match="no abort record"):
        check_released(sim)
    with pytest.raises(CheckFailed, match="no abort was recorded"):
        check_conservation(sim)


def test_timer_in_the_past_is_refused(workload, cost):
    class Rewinds(Unbounded):
        def on_group_done(self, group):
            super().on_group_done(group)
            self.sim.set_timer(self.sim.now - 1.0)

    with pytest.raises(PolicyError, match="in the past"):
        run_policy(Rewinds(1), workload, cost, batches=1)
