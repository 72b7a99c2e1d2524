"""Synchronous RL (eta = 0): generate one batch with the current weights, train, repeat.

Source: the on-policy loop every framework runs with asynchrony off (verl's sync trainer, ROLL
with ``async_generation_ratio=0``, AReaL with ``max_head_offpolicyness=0``; see the policy
table of docs/simulator.md). Written independently of the controller: while the trainer is idle
and fewer than ``batch_size`` groups were admitted at the current version, admit on a free slot;
when all of them finished, train them. Rollout idles during training. With the same inputs it
must give exactly the same schedule as Reserve–Occupy at eta = 0 (a test checks this). With
reward filtering, a no-gradient group is discarded and another is admitted for the same step
(DAPO's dynamic sampling in a synchronous loop).
"""

from __future__ import annotations

from .api import Group, Policy
from .base import members


class Synchronous(Policy):
    name = "synchronous"
    label = "synchronous"
    source = "on-policy reference loop (generation and training alternate)"
    bounded = True
    uses_eta = False

    def __init__(self, eta: int = 0) -> None:
        super().__init__(eta)
        self.eta = 0  # whatever the comparison's eta, this policy is on-policy

    def attach(self, sim) -> None:
        super().attach(sim)
        self._current: list[Group] = []
        self._done = 0

    def admit(self) -> None:
        sim = self.sim
        while (sim.trainer_idle and len(self._current) < self.batch_size
               and sim.rollout_has_room()):
            self._current.append(sim.admit())

    def on_group_done(self, group: Group) -> None:
        if group.no_grad:  # dynamic sampling: discard it and generate another for this step
            self.sim.filter(group)
            self._current.remove(group)
            return
        self._done += 1

    def take_batch(self):
        if self._done < self.batch_size:
            return None
        batch, self._current, self._done = self._current, [], 0
        return members(batch)

    def settings(self) -> dict:
        return {"eta": 0}

    def describe_state(self) -> str:
        return f"{len(self._current)} admitted, {self._done} finished this step"
