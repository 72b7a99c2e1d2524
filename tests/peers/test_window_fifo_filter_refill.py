"""window_fifo with reward filtering: a filtered group's slot is refilled at once (torchtitan's
``release_active_groups(1, reason="untrainable_group")`` wakes the data-input loop's
``wait_for_slot``), also when ``take_batch`` then returns None.

Before the fix the rule freed the slot and waited for its host to call ``admit`` again; the
simulator calls ``admit`` after a ``take_batch`` only when it returned a batch, so at eta 1
(P = 16: S = 0, the B = P slots are all the batch's) a filtered group left the batch one group
short with nothing running: the 42 stalled runs of the regime map (14 cells, every seed).
"""

from __future__ import annotations

from reserve_occupy_peers import make_policy

from tests.peers.test_peers_2026 import ScriptHost


class SimulatorLikeHost(ScriptHost):
    """``take`` as the simulator's ``_settle`` does it: ``admit`` only after a batch is returned
    (``ScriptHost.take`` admits after every take, which hid the stall)."""

    def take(self):
        got = self.policy.take_batch()
        if got is not None:
            self.policy.admit()
        return None if got is None else [r.group.gid for r in got]


def test_a_filtered_groups_slot_is_refilled_before_take_batch_returns():
    # target_offpolicy_steps 0, P = 2, window_fraction 0.5: B = (0 + 1) x 2 = 2 slots, all the
    # batch's; W = floor(0.5 x 2) = 1 (strict FIFO), bound (B + W - 2) // P = 0
    h = SimulatorLikeHost(make_policy("window_fifo", 0, window_fraction=0.5,
                                      target_offpolicy_steps=0))
    p = h.policy
    assert (p.active_max, p.window, p.bound) == (2, 1, 0)
    assert h.admitted() == [0, 1]  # both slots charged
    h.finish(0, no_grad=True)  # g0 has no gradient
    h.finish(1)
    # take: g0 (head) is filtered, its slot returns and g2 is admitted at once; g1 joins the
    # batch, which lacks one group: None. Before the fix: no g2, nothing running: a stall
    assert h.take() is None
    assert h.filtered == [0] and h.admitted() == [0, 1, 2] and p.active == 2
    h.finish(2)
    assert h.take() == [1, 2] and h.dropped == []


def test_window_fifo_does_not_stall_with_filtering_at_eta_1_in_the_simulator():
    # the regime map's smallest stalled case: eta 1, P = 16 (S = 0, B = 16, W = 4), 40 % of the
    # groups without gradient; before the fix: SimulationStalled after 7 of 60 batches (seed 0)
    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.cost import preset
    from reserve_occupy_sim.model.filtering import RewardFilter
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate

    workload = generate(0, MathReasoningShape(groups=256))
    sim = Simulator(make_policy("window_fifo", 1), workload, preset("qwen3-8b-h20"),
                    batches=10, batch_size=16, filtering=RewardFilter(0.4, seed=0)).run()
    assert len(sim.ledger.batches) == 10
    assert sum(1 for g in sim.groups if g.no_grad) > 0  # it filtered
    assert max(s for b in sim.ledger.batches for s in b.staleness) <= 1
