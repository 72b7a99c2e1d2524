"""AReaL's staleness manager: a count-based bound on how far rollout may run ahead.

Source: inclusionAI/AReaL @ 4aef98d8d818af55b43621aaadba047ae10f4e77,
``areal/infra/staleness_manager.py`` (``StalenessManager.get_capacity``) and
``areal/infra/workflow_executor.py`` (``wait_results``: keep the ``batch_size`` results with the
oldest ``create_time``, return the rest). See docs/simulator.md's policy table.

* L1: submit while ``min(C - running, (eta + v + 1) * B - (accepted + running)) > 0``, where
  ``v`` is the rollout's weight version, ``accepted`` counts every accepted (finished) rollout
  ever and ``running`` the ones in flight; ``C = max_concurrent_rollouts`` (default: the batch
  size, as AReaL falls back to ``consumer_batch_size``). Nothing is submitted while paused for a
  weight update.
* L2: on a weight update in-flight generations are interrupted and resubmitted with their tokens
  on the new weights (as the simulator does for every policy); nothing is aborted.
* L3: the trainer takes the ``batch_size`` finished groups admitted earliest; nothing is dropped.
* Reward filtering: the workflow's ``should_accept_fn`` (``workflow_executor.py``) rejects a
  trajectory (DAPO-style dynamic filtering is written as one); ``on_rollout_rejected`` decrements
  ``running`` and counts it rejected, not accepted, so the capacity it held returns.

The bound is on counts (unconsumed + running <= (eta + 1) * B ahead of the version), not on each
trajectory's age: a group admitted at ``v`` that straggles can train after ``v + eta``. It is
therefore *not* a bounded policy here; its staleness is reported, not asserted.
"""

from __future__ import annotations

from ..core import Group
from .base import Policy, members


class Areal(Policy):
    name = "areal"
    label = "AReaL"
    source = "inclusionAI/AReaL@4aef98d8 areal/infra/staleness_manager.py"
    bounded = False

    def __init__(self, eta: int, max_concurrent_rollouts: int | None = None) -> None:
        super().__init__(eta)
        self.max_concurrent = max_concurrent_rollouts

    def attach(self, sim) -> None:
        super().attach(sim)
        if self.max_concurrent is None:
            self.max_concurrent = self.batch_size
        self.running = 0
        self.accepted = 0
        self.rejected = 0
        self._finished: list[Group] = []

    def capacity(self) -> int:
        ahead = (self.eta + self.sim.version + 1) * self.batch_size
        return min(self.max_concurrent - self.running, ahead - (self.accepted + self.running))

    def admit(self) -> None:
        sim = self.sim
        while not sim.paused and self.capacity() > 0:
            sim.admit()
            self.running += 1

    def on_group_done(self, group: Group) -> None:
        self.running -= 1
        if group.no_grad:  # should_accept_fn rejected it: on_rollout_rejected frees its quota
            self.rejected += 1
            self.sim.filter(group)
            return
        self.accepted += 1
        self._finished.append(group)

    def take_batch(self):
        if len(self._finished) < self.batch_size:
            return None
        self._finished.sort(key=lambda g: g.t_admit)  # oldest create_time first (stable)
        batch, self._finished = self._finished[: self.batch_size], \
            self._finished[self.batch_size:]
        return members(batch)

    def settings(self) -> dict:
        return {"eta": self.eta, "max_head_offpolicyness": self.eta,
                "max_concurrent_rollouts": self.max_concurrent}

    def describe_state(self) -> str:
        return (f"running={self.running} accepted={self.accepted} "
                f"finished={len(self._finished)} capacity={self.capacity()}")
