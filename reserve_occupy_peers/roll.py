"""ROLL's asynchronous RLVR pipeline (``async_generation_ratio > 0``), with its L2 abort.

Source: alibaba/ROLL @ 8eb27cc2dc34c4d1310b169d9b86d339004d811a,
``roll/distributed/scheduler/generate_scheduler.py`` (``ReplayBuffer.advance_step``,
``_check_send_new_request``, ``begin``, ``commit``, ``abort``, ``get_batch``, ``gc``;
``DynamicSamplingScheduler.pause_sampling``) and ``roll/pipeline/rlvr/rlvr_pipeline.py`` (each
step: ``pause_sampling`` -> ``model_update`` -> ``get_batch`` -> train, with generation resumed
during training). Summarised in docs/simulator.md's policy table.

With ``r = async_generation_ratio`` and ``R = ceil(r)``:

* L1: a prompt is sent while ``running + completed < Q`` (``completed`` counts every committed
  prompt ever); ``Q`` starts at ``ceil(B*r) + B`` and grows by ``B`` at every step. A prompt is
  tagged with the step current when it begins (its cohort). Aborted prompts return their quota.
* L2: at every weight update (``pause_sampling``), cohorts tagged ``<= step - R`` are garbage
  collected: their running prompts are aborted (wasted in flight) and their finished, unconsumed
  prompts are discarded; then every request is aborted and resumed on the new weights with its
  output kept (partial rollout, as the simulator does for every policy).
* L3: step ``s`` collects ``B`` prompts from cohorts ``s - R .. s`` oldest first, taking a
  cohort's finished prompts FIFO and waiting for its running ones before moving to a newer cohort
  unless it already has enough.

Alignment: ``r = eta`` (trained staleness <= ceil(r)). ROLL's default r is 0 (synchronous).
In this model the garbage collection never finds anything to collect: the cumulative quota
admits exactly ``B`` prompts per step (cohort 0: ``ceil(B*r) + B``), ``completed`` never returns
quota, and each step drains the oldest cohort, waiting for its stragglers, before that cohort can
age out; so supply per cohort equals what the steps take from it. Reward filtering does not
change that: ``query_filter`` (``user_defined_rollout_loop.py``, ``std_filter`` with
``std_threshold``) runs on the whole group after its rewards; a rejected group is aborted
(``ReplayBuffer.abort``), which returns its quota, so a fresh prompt is admitted into the
*current* cohort, and the successes admitted still equal what the steps consume, oldest cohort
first (no run of experiment 4 collected anything). A test inflates the quota to exercise the
path. For a fractional ``r`` the oldest cohort gives only ``int(B*n*frac(r))`` samples, as the
code does.
"""

from __future__ import annotations

import math
from collections import deque

from .api import Group, Policy
from .base import members


class _Cohort:
    __slots__ = ("step", "running", "finished")

    def __init__(self, step: int) -> None:
        self.step = step
        self.running: dict[int, Group] = {}
        self.finished: deque[Group] = deque()


class Roll(Policy):
    name = "roll"
    label = "ROLL"
    source = "alibaba/ROLL@8eb27cc2 roll/distributed/scheduler/generate_scheduler.py"
    bounded = True

    def __init__(self, eta: int, async_generation_ratio: float | None = None) -> None:
        super().__init__(eta)
        self.ratio = float(eta if async_generation_ratio is None else async_generation_ratio)
        if self.ratio < 0:
            raise ValueError(f"roll: async_generation_ratio must be >= 0, got {self.ratio}")
        self.lag = math.ceil(self.ratio)
        self.fraction = self.ratio % 1
        self.eta = self.lag

    def attach(self, sim) -> None:
        super().attach(sim)
        self.quota = 0
        self.running = 0
        self.completed = 0
        self.cohorts: dict[int, _Cohort] = {}
        self.current_step = -1
        self._batch: list[Group] = []
        self._taken: dict[int, int] = {}  # prompts taken per cohort for the step being built
        self._advance_step(0)

    def _advance_step(self, step: int) -> None:
        self.current_step = step
        self.cohorts[step] = _Cohort(step)
        if self.quota == 0 and self.ratio > 0:
            self.quota = math.ceil(self.batch_size * self.ratio)
        self.quota += self.batch_size

    def admit(self) -> None:
        sim = self.sim
        while self.running + self.completed < self.quota:
            group = sim.admit()
            group.tag = self.current_step  # begin(): bound to the current step
            self.cohorts[self.current_step].running[group.gid] = group
            self.running += 1

    def on_group_done(self, group: Group) -> None:
        cohort = self.cohorts[group.tag]  # type: ignore[index]
        del cohort.running[group.gid]
        self.running -= 1
        if group.no_grad:
            # query_filter (std_filter) rejected it: process_new_prompt returns None, the
            # prompt is aborted in the ReplayBuffer and its quota returns (completed unchanged)
            self.sim.filter(group)
            return
        cohort.finished.append(group)
        self.completed += 1

    def take_batch(self):
        step, batch = self.sim.version, self._batch
        min_step = step - self.lag
        for s in sorted(self.cohorts):
            if s < min_step:
                continue
            cohort = self.cohorts[s]
            if s == min_step and s < step and self.fraction:
                # get_batch: from the oldest cohort only int(B*n*frac(r)) samples, in whole
                # prompts (ItemsGroup.get_batch stops once it has at least that many)
                quota = math.ceil(int(self.batch_size * self.group_size * self.fraction)
                                  / self.group_size)
                want = min(quota - self._taken.get(s, 0), self.batch_size - len(batch))
            else:
                want = self.batch_size - len(batch)
            take = min(max(want, 0), len(cohort.finished))
            for _ in range(take):
                batch.append(cohort.finished.popleft())
            self._taken[s] = self._taken.get(s, 0) + take
            if len(batch) == self.batch_size:
                self._batch, self._taken = [], {}
                return members(batch)
            if s < step and cohort.running and want > take:
                return None  # wait for this cohort's stragglers before a newer cohort
        return None

    def on_publish(self, version: int) -> None:
        # pause_sampling of step `version`: gc cohorts <= (version - 1) - R, then advance_step.
        sim = self.sim
        for s in sorted(self.cohorts):
            if s > version - 1 - self.lag:
                break
            cohort = self.cohorts.pop(s)
            for group in cohort.running.values():
                sim.abort_group(group)
                self.running -= 1
            if cohort.finished:
                sim.drop(members(list(cohort.finished)))
        self._advance_step(version)

    def settings(self) -> dict:
        return {"eta": self.eta, "async_generation_ratio": self.ratio}

    def describe_state(self) -> str:
        cohorts = {s: (len(c.running), len(c.finished)) for s, c in self.cohorts.items()}
        return (f"quota={self.quota} running={self.running} completed={self.completed} "
                f"cohorts(running, finished)={cohorts} batch={len(self._batch)}")
