"""NeMo-RL ``in_order`` sampler (the default sampler of NeMo-RL's async GRPO).

Source: NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909,
``nemo_rl/algorithms/async_utils/staleness_sampler.py`` (``InOrderSampler``: ``select`` takes
ready slots whose ``target_step`` equals the trainer version, in slot order; ``evict`` drops ready
slots whose target step has passed) and ``single_controller.py`` (``_train_pump``: a step keeps
selecting until ``num_prompts_per_step`` groups are in). Cited in /work/shared/BASELINES.md.

L1 is the gated admission of ``nemo.GatedNemoSampler`` with ``W = max_lookahead_versions = eta``.
A group dispatched in batch ``d`` was admitted at a version >= d - W and trains exactly at step
``d``, so its staleness is <= eta. The step waits until all ``batch_size`` groups targeting it
are ready, however long the slowest one takes (NeMo-RL#3238). Nothing is dropped; the evict rule
can never fire here because every step takes all of its groups.
"""

from __future__ import annotations

from .base import members
from .nemo import GatedNemoSampler


class NemoInOrder(GatedNemoSampler):
    name = "nemo_in_order"
    label = "NeMo in_order"

    def take_batch(self):
        step = self.sim.version
        ready = [g for g in self.slots if g.tag == step and g.done]
        if len(ready) < self.batch_size:
            return None
        batch = ready[: self.batch_size]
        self._release(batch)
        return members(batch)
