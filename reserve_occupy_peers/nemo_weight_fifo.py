"""NeMo-RL ``weight_fifo`` sampler: strict weight-version FIFO.

Source: NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909,
``nemo_rl/algorithms/async_utils/staleness_sampler.py`` (``WeightFifoSampler.select``,
``BaseSampler.evict``, ``_finalize_selection``) and ``single_controller.py`` (``_train_pump``).

L1 is the gated admission of ``nemo.GatedNemoSampler`` with ``W = max_staleness_versions = eta``.
L3, per optimizer step at trainer version T, repeated until ``batch_size`` groups are selected:
evict ready groups with ``start_weight < max(0, T - W)`` (an L3 drop); let ``v*`` be the smallest
``start_weight`` in ``[T - W, T]`` over *all* buffered groups, ready or still generating; select
the ready groups stamped ``v*`` in slot order, but only if there are at least
``min(min_groups_for_streaming_train, remaining)`` of them, otherwise wait. So the step drains
the oldest version first and waits for that version's stragglers. Selected groups leave the
buffer at once (their ``max_buffered_rollouts`` permits return); the step trains when complete.

``min_groups_for_streaming_train``: NeMo's default, 32, is rejected by its config validation for
16 prompts per step, so a user must lower it. Any value above 1 can wedge ``select`` for good:
when version ``v*`` holds fewer than ``min(value, remaining)`` groups in all, they are never
selected, ``v*`` never changes, and they are not evicted until the trainer moves, which it
cannot (with 16 it happens here at eta = 3,
when ``max_inflight_prompts = 32`` splits a dispatch batch across a weight update). The
simulator reports that as ``SimulationStalled``. The default here is therefore 1, the streaming
setting that cannot wedge, for the whole-batch trainer (which trains a step once it is whole).
With a streaming trainer (``cost.train.chunk_groups``, ``take_chunk``) each ``select`` is one
chunk and its ``min_prompt_groups`` is the trainer's ``min(chunk_groups, still lacking)``, as in
``_train_pump``: the chunk trains while the step waits for the rest.

``on_no_gradient="drop"`` (a what-if; see ``nemo.py``): weight_fifo's ``admit`` returns no target
step, so a dropped prompt "costs throughput but strands nothing and there is nothing to substitute
for" (``RolloutFailureConfig.on_dropped_prompt``): its buffer permit returns, nothing is
re-dispatched, and the gated admission goes on as usual.
"""

from __future__ import annotations

from .api import Group
from .base import members
from .nemo import GatedNemoSampler


class NemoWeightFifo(GatedNemoSampler):
    name = "nemo_weight_fifo"
    label = "NeMo weight_fifo"
    streams = True

    def __init__(self, eta: int, min_groups_for_streaming_train: int = 1,
                 **kwargs) -> None:
        super().__init__(eta, **kwargs)
        self.min_groups = min_groups_for_streaming_train

    def attach(self, sim) -> None:
        super().attach(sim)
        self.step_groups: list[Group] = []  # selected for the step being assembled

    def on_group_done(self, group: Group) -> None:
        super().on_group_done(group)
        if group.no_grad and self.filters:  # SKIPPED, unstamped: release the permit
            self.sim.filter(group)
            self._release([group])

    def take_batch(self):
        version = self.sim.version
        low = self._evict(version)
        while True:
            remaining = self.batch_size - len(self.step_groups)
            in_window = [g.v_tag for g in self.slots if low <= g.v_tag <= version]
            if not in_window:
                return None
            oldest = min(in_window)
            ready = [g for g in self.slots if g.v_tag == oldest and g.done]
            if len(ready) < min(self.min_groups, remaining):
                return None
            chosen = ready[:remaining]
            self._release(chosen)
            self.step_groups.extend(chosen)
            if len(self.step_groups) == self.batch_size:
                batch, self.step_groups = self.step_groups, []
                return members(batch)

    def take_chunk(self, least: int, most: int):
        """Streaming: one ``evict`` + ``select`` of ``_train_pump`` (see the module docstring)."""
        version = self.sim.version
        low = self._evict(version)
        in_window = [g.v_tag for g in self.slots if low <= g.v_tag <= version]
        if not in_window:
            return None
        oldest = min(in_window)
        return self._take_chunk([g for g in self.slots if g.v_tag == oldest and g.done], least,
                                most)

    def _evict(self, version: int) -> int:
        """``evict``: drop the finished groups older than the window; returns its lowest version."""
        low = max(0, version - self.window)
        stale = [g for g in self.slots if g.done and g.v_tag < low]
        if stale:
            self._release(stale)
            self.sim.drop(members(stale))
        return low

    def settings(self) -> dict:
        return {**super().settings(), "min_groups_for_streaming_train": self.min_groups}

    def describe_state(self) -> str:
        versions = sorted({g.v_tag for g in self.slots})
        return (f"{super().describe_state()} step_groups={len(self.step_groups)} "
                f"buffered versions={versions}")
