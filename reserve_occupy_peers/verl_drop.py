"""verl's V1 async trainer with ``max_off_policy_strategy: drop`` (its default).

Source: verl-project/verl @ 1dda039b9c6311889a9c9a26040677e1254814f9,
``verl/trainer/ppo/v1/trainer_base.py`` (``_submit_batch_to_rollout``, ``prepare_step``,
``step``), ``trainer_colocate_async.py`` / ``trainer_separate_async.py`` (``on_train_begin``
submits ``num_warmup_batches``), ``verl/trainer/ppo/v1/replay_buffer.py``
(``ReplayBufferAsync.wait_for_sampleable``, ``_stale_terminal_keys``, ``_select_prompt_uids``).
tests/integrations/test_upstream_verl.py drives verl 0.9.1's real ``ReplayBufferAsync`` and this
policy with the same states and compares their decisions.

* L1: no gate. At the start ``num_warmup_batches`` batches are submitted, then one batch of
  ``batch_size`` prompts at the start of every step; each prompt is tagged with the step it was
  *submitted* in (``global_steps``, counted from 1), not when it starts generating (verl#6975).
  Submitted prompts wait in the engines' queue.
* L2: on each weight update in-flight requests are aborted and resumed on the new weights with
  their tokens (partial rollout), tag unchanged; the simulator does this for every policy.
* L3: a global step ``s`` samples ``parameter_sync_step`` mini-batches of
  ``batch_size / parameter_sync_step`` groups (``trainer_base.py::step``), each with
  ``ReplayBufferAsync.sample``: finished groups with ``s - tag + 1 > threshold`` are evicted
  (dropped) and exactly as many fresh prompts are submitted, tagged ``s``; once a mini-batch's
  worth of finished groups remain, the ones with the smallest tags are taken. The weights are
  published once per global step, after all its mini-batches; that step is one batch here.
  ``parameter_sync_step`` defaults to 4, ``separate_async``'s default (separate rollout engines
  and trainer, as simulated); 1 is ``colocate_async``. Deliberate differences: the simulator's
  trainer trains a step once all its mini-batches are in (verl trains each as it arrives, so a
  step can overlap its own sampling), and equal tags are taken in completion order. verl's
  ``_select_prompt_uids`` sorts a Python ``set`` of uid strings, so its order among equal tags
  is the set's iteration order, which changes with the string hash seed of the process: any
  fixed order is one of the orders verl can produce.
* Reward filtering (``filter_groups_metric`` set): ``_dapo_filtered_keys`` marks finished groups
  with zero reward variance, and ``_evict_terminal_groups`` evicts them together with the stale
  ones, in the same poll of ``wait_for_sampleable``, with the same exact 1:1 refill ("async: evict
  k, refill k", the eviction/refill matrix of ``ReplayBuffer``). They count as filtered, not as
  L3 waste. ``filter_at="finish"`` (not verl's; default ``"sample"``, verl's) filters a group
  without gradient the moment it finishes and refills its prompt at once: what this rule got
  on the runtime before the runtime gave it verl's own timing, when the driver's
  ``filter_zero_variance`` removed such a group before the rule saw it and ``runtime.peers``
  re-armed the rule's group (its 1:1 refill at reward time, not at the trainer's next poll).
  It exists to simulate the real-engine bench's ``verl_drop`` row as it ran then (docs/peers.md,
  "The filtering workload"). Now the runtime hands the rule the group finished and marked
  (``filters_at_sample``, True with ``"sample"``), and the rule evicts and refills it at its
  next sample, as here.

Alignment: the drop rule admits a trajectory submitted at version ``v`` up to version
``v + threshold - 1`` (the step counter is one ahead of the version), so ``threshold = eta + 1``
gives the same allowed staleness eta as the other policies. verl's own default is 8 (staleness
7). ``num_warmup_batches`` stays at its default 1, as in the source's experiment. The 2 s polling
interval is not modelled (the trainer reacts at once).
"""

from __future__ import annotations

from .api import Group, Policy
from .base import members


class VerlDrop(Policy):
    name = "verl_drop"
    label = "verl drop"
    source = ("verl-project/verl@1dda039b verl/trainer/ppo/v1/replay_buffer.py "
              "(ReplayBufferAsync), trainer_base.py")
    bounded = True

    FILTER_AT = ("sample", "finish")

    def __init__(self, eta: int, num_warmup_batches: int = 1, threshold: int | None = None,
                 parameter_sync_step: int = 4, filter_at: str = "sample") -> None:
        super().__init__(eta)
        if filter_at not in self.FILTER_AT:
            raise ValueError(f"verl_drop: filter_at must be one of {', '.join(self.FILTER_AT)},"
                             f" got {filter_at!r}")
        self.filter_at = filter_at
        if (isinstance(parameter_sync_step, bool) or not isinstance(parameter_sync_step, int)
                or parameter_sync_step < 1):
            raise ValueError(f"verl_drop: parameter_sync_step must be an int >= 1, got "
                             f"{parameter_sync_step!r}")
        self.sync_step = parameter_sync_step
        self.warmup = num_warmup_batches
        self.threshold = eta + 1 if threshold is None else threshold
        if threshold is not None:
            self.eta = threshold - 1  # what the policy actually enforces

    @property
    def filters_at_sample(self) -> bool:  # (Policy: when it discards a group without gradient)
        return self.filter_at == "sample"

    def attach(self, sim) -> None:
        super().attach(sim)
        if self.batch_size % self.sync_step:
            raise ValueError(f"verl_drop: batch size {self.batch_size} is not divisible by "
                             f"parameter_sync_step={self.sync_step} (verl asserts the same)")
        self.mini_batch = self.batch_size // self.sync_step
        self._step_groups: list[Group] = []  # mini-batches of the global step sampled so far
        self.step = 1  # global_steps: fit() increments before on_train_begin
        self._to_submit = (1 + self.warmup) * self.batch_size  # warmup + the first step's batch
        self._finished: list[Group] = []

    def admit(self) -> None:
        sim = self.sim
        while self._to_submit:
            group = sim.admit()
            group.tag = self.step
            self._to_submit -= 1

    def on_group_done(self, group: Group) -> None:
        if group.no_grad and self.filter_at == "finish":
            self.sim.filter(group)
            self._to_submit += 1  # the refill, at once
            self.admit()
            return
        self._finished.append(group)

    def take_batch(self):
        while len(self._step_groups) < self.batch_size:  # trainer_base.py::step
            chunk = self._sample(self.mini_batch)
            if chunk is None:
                return None
            self._step_groups += chunk
        batch, self._step_groups = self._step_groups, []
        return members(batch)

    def _sample(self, size: int) -> list[Group] | None:
        """``ReplayBufferAsync.sample(global_steps, "train", size)``: evict and refill, then the
        ``size`` oldest tags; None while fewer are sampleable (verl polls again)."""
        dapo = [g for g in self._finished if g.no_grad]
        stale = [g for g in self._finished
                 if not g.no_grad and self.step - g.tag + 1 > self.threshold]
        if stale or dapo:
            gone = {g.gid for g in stale} | {g.gid for g in dapo}
            self._finished = [g for g in self._finished if g.gid not in gone]
            if stale:
                self.sim.drop(members(stale))
            for g in dapo:
                self.sim.filter(g)
            self._to_submit += len(gone)  # refill_fn: one fresh prompt per evicted group
            self.admit()
        if len(self._finished) < size:
            return None
        # oldest tag first; stable, so ties keep completion order
        self._finished.sort(key=lambda g: g.tag)
        chunk, self._finished = self._finished[:size], self._finished[size:]
        return chunk

    def on_publish(self, version: int) -> None:
        self.step = version + 1
        self._to_submit += self.batch_size  # prepare_step of the new step

    def settings(self) -> dict:
        out = {"eta": self.eta, "num_warmup_batches": self.warmup,
               "max_off_policy_threshold": self.threshold, "strategy": "drop",
               "parameter_sync_step": self.sync_step}
        if self.filter_at != "sample":  # (verl's own is not written: the stored runs keep theirs)
            out["filter_at"] = self.filter_at
        return out

    def describe_state(self) -> str:
        return (f"step={self.step} finished={len(self._finished)} to_submit={self._to_submit} "
                f"step_groups={len(self._step_groups)}")
