"""Reward filtering decides a group's outcome by the prompt it rolls out (its workload index),
not by its admission count.

``FilterOutcomes.no_gradient(k)`` draws ``u_k < p_{k mod N}``, ``p`` the group's difficulty read
from *its* lengths. The simulator passed the admission count (``gid``), which is the workload
index only for a rule that admits in workload order. A rule that picks its prompts
(``Host.admit(spec=...)``: tinker's requeue, the clairvoyant schedule, Reserve–Occupy's
``retry``) got the outcome of another prompt: after tinker's first requeue its filter no longer
followed the lengths, so it filtered short groups and trained the long, hard ones every other
rule filters (trained tokens 1.4x Reserve–Occupy's for the same 7,680 trajectories on the
regime map's worst cell), which made it look up to 1.29x faster there.
"""

from __future__ import annotations

from reserve_occupy_peers import Policy
from reserve_occupy_peers.base import members
from reserve_occupy_sim.model.core import Simulator
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.filtering import RewardFilter
from reserve_occupy_sim.model.workload import MathReasoningShape, generate


class Reversed(Policy):
    """Admits the workload's prompts in reverse order within each batch's worth (N - 1, N - 2,
    ...), filters what has no gradient, trains the first finished groups: a rule that chooses
    its prompts."""

    name = "reversed_for_test"
    bounded = False
    filters = True

    def attach(self, sim) -> None:
        super().attach(sim)
        self.done: list = []
        self.next = 0

    def admit(self) -> None:
        n = len(self.sim.workload)
        while self.sim.rollout_has_room() and self.next < n:
            self.sim.admit(spec=n - 1 - self.next)
            self.next += 1

    def on_group_done(self, group) -> None:
        if group.no_grad:
            self.sim.filter(group)
        else:
            self.done.append(group)

    def take_batch(self):
        if len(self.done) < self.batch_size:
            return None
        batch, self.done = self.done[:self.batch_size], self.done[self.batch_size:]
        return members(batch)


def test_a_chosen_prompt_gets_its_own_outcome():
    workload = generate(0, MathReasoningShape(groups=64))
    spec = RewardFilter(0.4, seed=3)
    expected = spec.bind(workload)  # the outcome of workload group i is no_gradient(i)
    sim = Simulator(Reversed(0), workload, preset("qwen3-8b-h20"), batches=2, batch_size=4,
                    filtering=spec).run()
    finished = [g for g in sim.groups if g.state in (g.DONE, g.FILTERED)]
    assert finished
    n = len(workload)
    # the simulator's gid k rolled out workload group n - 1 - k
    assert [g.no_grad for g in finished] == [expected.no_gradient(n - 1 - g.gid)
                                             for g in finished]
    # and for this seed the admission count's outcome differs (the test is not vacuous)
    assert [g.no_grad for g in finished] != [expected.no_gradient(g.gid) for g in finished]
