"""NeMo-RL ``in_order`` sampler (the default sampler of NeMo-RL's async GRPO).

Source: NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909,
``nemo_rl/algorithms/async_utils/staleness_sampler.py`` (``InOrderSampler``: ``select`` takes
ready slots whose ``target_step`` equals the trainer version, in slot order; ``evict`` drops ready
slots whose target step has passed) and ``single_controller.py`` (``_train_pump``: a step keeps
selecting until ``num_prompts_per_step`` groups are in).

L1 is the gated admission of ``nemo.GatedNemoSampler`` with ``W = max_lookahead_versions = eta``.
A group dispatched in batch ``d`` was admitted at a version >= d - W and trains exactly at step
``d``, so its staleness is <= eta. The step waits until all ``batch_size`` groups targeting it
are ready, however long the slowest one takes (NeMo-RL#3238). With a streaming trainer
(``take_chunk``) the step takes its ready groups in chunks of at least
``min(min_groups_for_streaming_train, still lacking)`` as ``_train_pump`` does, and still ends
only when its last group is in. Nothing is dropped; the evict rule
can never fire here because every step takes all of its groups.

``on_no_gradient="drop"`` (a what-if; see ``nemo.py``): a no-gradient group is handled as a
dropped prompt under ``on_dropped_prompt="replace"`` (``_dispatch_one_prompt``): its slot is
removed, and the dispatch task, still holding its ``max_inflight_prompts`` and
``max_buffered_rollouts`` permits, takes a spare prompt. First ``_promote_into_step``: if the
trainer has not passed the step, ``promote_ready_group`` re-stamps the *first ready group with the
furthest future target step* onto the step that lost one, and the spare is generated for that
lender step instead; otherwise the spare is generated for the step itself. Spares come from whole
dataloader batches diverted into a pool, which costs no generation; here the spare is simply the
workload's next group. NeMo-RL's defaults (``max_replacement_attempts=1``, then shrink the step,
failing the run below ``min_step_batch_fraction=0.9``) would shrink or fail steps at the filter
rates studied, so the what-if allows unlimited attempts and every step keeps its batch size.
"""

from __future__ import annotations

from .api import Group
from .base import members
from .nemo import GatedNemoSampler


class NemoInOrder(GatedNemoSampler):
    name = "nemo_in_order"
    label = "NeMo in_order"
    streams = True

    def attach(self, sim) -> None:
        super().attach(sim)
        self._spares: list[int] = []  # target steps whose spare waits for the sync to end
        self.promotions = 0
        self.replacements = 0

    def admit(self) -> None:
        self._dispatch_spares()
        super().admit()

    def on_group_done(self, group: Group) -> None:
        if not (group.no_grad and self.filters):
            super().on_group_done(group)
            return
        # RolloutOutcome.SKIPPED: the task keeps both permits and substitutes a spare prompt
        self.sim.filter(group)
        self.slots.remove(group)  # remove_group
        target = group.tag
        lender = self._promote_ready_group(target) if target >= self.sim.version else None
        if lender is not None:
            self.promotions += 1
            target = lender  # the spare repays the lender
        self.replacements += 1
        self._spares.append(target)
        self._dispatch_spares()

    def _promote_ready_group(self, to_step: int) -> int | None:
        lender = None
        for g in self.slots:  # first ready slot with the furthest future target wins
            if g.done and g.tag > to_step and (lender is None or g.tag > lender.tag):
                lender = g
        if lender is None:
            return None
        lent_from, lender.tag = lender.tag, to_step
        return lent_from

    def _dispatch_spares(self) -> None:
        sim = self.sim
        while self._spares and not sim.paused:  # a substitution waits for rollout_permitted
            group = sim.admit()
            group.tag = self._spares.pop(0)
            self.slots.append(group)

    def take_batch(self):
        step = self.sim.version
        ready = [g for g in self.slots if g.tag == step and g.done]
        if len(ready) < self.batch_size:
            return None
        batch = ready[: self.batch_size]
        self._release(batch)
        return members(batch)

    def take_chunk(self, least: int, most: int):
        """Streaming (``_train_pump`` with ``min_groups_for_streaming_train`` = ``least``'s
        setting): the ready groups stamped for this step, at least ``least``, at most
        ``most``; they leave the buffer at once."""
        step = self.sim.version
        return self._take_chunk([g for g in self.slots if g.tag == step and g.done], least, most)

    def settings(self) -> dict:
        out = super().settings()
        if self.filters:
            out.update(promotions=self.promotions, replacements=self.replacements,
                       max_replacement_attempts="unlimited (what-if)")
        return out
