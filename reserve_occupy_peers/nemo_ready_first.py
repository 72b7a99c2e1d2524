"""NeMo-RL ``ready_first`` sampler (SingleController path): AReaL's admission, ready-first
selection, nothing evicted.

Source: NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22; PR #3582, merged
2026-08-11), ``nemo_rl/algorithms/async_utils/staleness_sampler.py`` (``_GatedSampler.admit``
344–348, ``ReadyFirstSampler`` 354–393, capacity 312–318 and 337–342),
``nemo_rl/algorithms/single_controller_utils/config.py`` (``max_staleness_versions`` default 1,
495–498; capacity validation 549–566; refused unless
``loss_fn.use_importance_sampling_correction=true`` and ``force_on_policy_ratio=false``,
712–723) and ``single_controller.py`` (``_train_pump``).

* L1: the gated admission of ``nemo.GatedNemoSampler`` (the same ``_GatedSampler.admit`` as
  in_order and weight_fifo): dataloader batch ``d`` is released once the trainer reaches
  ``d - W``; then each prompt waits for the two semaphores. ``max_buffered_rollouts`` must be at
  least ``num_prompts_per_step * (W + 1)`` (NeMo's validation raises; here it is raised to that).
* L3: ``select`` takes **every ready group with ``start_weight <= T``** (always true) in slot
  order, at least ``min(min_groups_for_streaming_train, lacking)``, mixed versions. ``evict``
  returns 0 and ``should_abort_inflight`` is False: nothing is dropped or cancelled.

eta is ``W = max_staleness_versions`` (shipped default 1). **Never drops. Not strict**: the gate
bounds how many *dataloader batches* run ahead of the trainer, not each group's age; a
straggler trains at the first select after it finishes, at any age (NeMo-RL issue #3758: no
metric of the SingleController path shows the age actually trained; PR #3759, open, adds one).
So ``bounded = False``: ``check-trace --peer nemo_ready_first`` reports the trained staleness
and the units over eta instead of failing.

What differs: ``min_groups_for_streaming_train`` defaults to 1, as for ``nemo_weight_fifo``
(see there); the importance-sampling requirement is NeMo's loss configuration, which the
simulator has none of (documented, not modelled). No-gradient groups are trained (``nemo.py``).
"""

from __future__ import annotations

from .api import Group
from .nemo import GatedNemoSampler


class NemoReadyFirst(GatedNemoSampler):
    name = "nemo_ready_first"
    label = "NeMo ready_first"
    source = ("NVIDIA-NeMo/RL@7ea279ab nemo_rl/algorithms/async_utils/staleness_sampler.py "
              "(ReadyFirstSampler)")
    bounded = False  # counts are bounded, each group's age is not (see the docstring)
    streams = True

    def __init__(self, eta: int, max_inflight_prompts: int = 32,
                 max_buffered_rollouts: int = 64, min_groups_for_streaming_train: int = 1) -> None:
        super().__init__(eta, max_inflight_prompts=max_inflight_prompts,
                         max_buffered_rollouts=max_buffered_rollouts)
        if (isinstance(min_groups_for_streaming_train, bool)
                or not isinstance(min_groups_for_streaming_train, int)
                or min_groups_for_streaming_train < 1):
            raise ValueError(f"{self.name}: min_groups_for_streaming_train must be an int >= 1, "
                             f"got {min_groups_for_streaming_train!r}")
        self.min_groups = min_groups_for_streaming_train

    def attach(self, sim) -> None:
        super().attach(sim)
        self.step_groups: list[Group] = []

    def _ready(self) -> list[Group]:
        version = self.sim.version
        return [g for g in self.slots if g.done and g.v_tag <= version]

    def take_batch(self):
        return self._fill_step(self._ready())

    def take_chunk(self, least: int, most: int):
        return self._take_chunk(self._ready(), least, most)

    def settings(self) -> dict:
        out = super().settings()
        del out["on_no_gradient"]
        out.update(max_staleness_versions=self.window,
                   min_groups_for_streaming_train=self.min_groups,
                   requires="use_importance_sampling_correction=true (NeMo's loss config)")
        return out
