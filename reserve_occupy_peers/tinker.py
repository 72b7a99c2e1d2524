"""tinker-cookbook's asynchronous RL (``AsyncConfig``): ``groups_per_batch`` workers, FIFO
completion order, a group older than ``max_steps_off_policy`` discarded and its prompt requeued.

Source: thinking-machines-lab/tinker-cookbook @ 9dfcc3a2cf44432d621a01005073dc6d76a1e87a
(2026-08-19), ``tinker_cookbook/rl/train.py`` (``AsyncConfig`` 395–414; ``do_async_training``
~945–1305: ``env_group_builders_queue`` maxsize ``groups_per_batch`` 973–976, the trajectory
group workers 1293–1298 that copy ``sampling_client_step`` at rollout start 1038,
``filter_stale_trajectory_group`` 1088–1120, training when ``groups_per_batch`` groups are in
1190, ``sampling_client_step = i_batch + 1`` 1232) and the recipes
(``tinker_cookbook/recipes/math_rl/train.py`` 63, 156–161: ``async_config`` is set only when
``--max_steps_off_policy`` is given, so asynchronous training is off by default).

**Issue 38's text differs from the shipped code**: it describes "a group takes one of
``groups_per_step x (sampling_steps_ahead + 1)`` slots at start, trains the oldest completed
groups first, discards nothing". ``sampling_steps_ahead`` occurs nowhere in tinker-cookbook at
this commit; what ships is below (the slot design the issue describes is torchtitan's, the
``window_fifo`` peer). PR #822 (open) proposes pacing by a new ``pipeline_depth`` instead of
discarding, because "slow (usually harder) problems are regenerated over and over and rarely
make it into a batch"; that proposal is not modelled.

* L1: ``groups_per_batch`` workers (= the batch size; ``AsyncConfig`` has no default), each
  takes the next prompt (``EnvGroupBuilder``) from the builder queue, stamps the sampler's
  step (``v_tag``) and rolls the group out: at most ``groups_per_batch`` groups in flight, no
  staleness gate. The builder queue holds up to ``groups_per_batch`` prompts, fed in dataloader
  order.
* L3: the training loop takes completed groups in completion (FIFO) order; a group with no
  reward variance is skipped (``remove_constant_reward_groups``: filtered); a group with
  ``i_batch - sampling_client_step > max_steps_off_policy`` is **discarded and its builder
  requeued** at the back of the builder queue (a new rollout of the same prompt); otherwise it
  joins the batch, which trains once ``groups_per_batch`` groups are in, at ``i_batch`` (the
  version).

eta is ``max_steps_off_policy`` (no shipped default). **Drops generated work** (the prompt itself
comes back). **Strict per group** (checked when the group joins the batch of the step that
trains it).

What differs: the simulator picks the requeued prompt with ``Host.admit(spec=...)`` and keeps
the builder queue itself (``requeue=True``, the default); the runtime's driver chooses its
prompts, so the runtime runs it with ``requeue=False``: the discarded group's prompt is not
generated again and the next prompt takes its place. The end of the dataloader (discard without
requeue) does not occur (the workload cycles).
"""

from __future__ import annotations

from collections import deque

from .api import Group, Policy
from .base import members


class Tinker(Policy):
    name = "tinker"
    label = "tinker"
    source = ("thinking-machines-lab/tinker-cookbook@9dfcc3a2 tinker_cookbook/rl/train.py "
              "(AsyncConfig, filter_stale_trajectory_group)")
    bounded = True
    filters = True
    filters_at_sample = True  # skipped as the batch is assembled (take_batch)

    def __init__(self, eta: int, requeue: bool = True) -> None:
        super().__init__(eta)
        if not isinstance(requeue, bool):
            raise ValueError(f"tinker: requeue must be true or false, got {requeue!r}")
        self.requeue = requeue

    def attach(self, sim) -> None:
        super().attach(sim)
        self.workers = self.batch_size  # groups_per_batch
        self.inflight = 0
        self.cursor = 0  # the dataloader's next prompt
        self.builders: deque[int] = deque()  # env_group_builders_queue (prompt indices)
        self.done: deque[Group] = deque()  # trajectory_groups_queue, completion order
        self.batch: list[Group] = []  # the batch i_batch being assembled
        self.discarded = 0

    def _next_prompt(self) -> int:
        while len(self.builders) < self.workers:  # the dataloader keeps the queue full
            self.builders.append(self.cursor)
            self.cursor += 1
        return self.builders.popleft()

    def admit(self) -> None:
        sim = self.sim
        while self.inflight < self.workers:
            if self.requeue:
                prompt = self._next_prompt()
                group = sim.admit(spec=prompt)  # v_tag = sampling_client_step
                group.tag = prompt
            else:
                sim.admit()
            self.inflight += 1

    def on_group_done(self, group: Group) -> None:
        self.inflight -= 1
        self.done.append(group)

    def take_batch(self):
        sim = self.sim
        while self.done and len(self.batch) < self.batch_size:
            g = self.done.popleft()
            if g.no_grad:  # remove_constant_reward_groups
                sim.filter(g)
                continue
            if sim.version - g.v_tag > self.eta:  # filter_stale_trajectory_group
                sim.drop(members([g]))
                self.discarded += 1
                if self.requeue:
                    self.builders.append(g.tag)  # the same prompt, at the back
                continue
            self.batch.append(g)
        if len(self.batch) < self.batch_size:
            return None
        batch, self.batch = self.batch, []
        return members(batch)

    def settings(self) -> dict:
        return {"eta": self.eta, "max_steps_off_policy": self.eta,
                "groups_per_batch": self.workers, "requeue": self.requeue,
                "discarded": self.discarded}

    def describe_state(self) -> str:
        return (f"inflight={self.inflight} done={len(self.done)} batch={len(self.batch)} "
                f"builders={len(self.builders)}")
