"""Shared admission of NeMo-RL's gated samplers (in_order, weight_fifo).

Source: NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909,
``nemo_rl/algorithms/async_utils/staleness_sampler.py`` (``_GatedSampler.admit``) and
``nemo_rl/algorithms/single_controller.py`` (``_rollout_pump``, ``_launch``, ``_sync_weights``).

L1, as the code does it: the rollout pump admits one *dataloader batch* of ``batch_size`` prompts
at a time; ``admit`` blocks while ``dispatch_index >= trainer_version + W`` and then increments
the index (it starts at -1), so batch ``d`` is released once the trainer reaches ``d - W``. Each
prompt of a released batch is then dispatched on its own, waiting for two semaphores
(``max_inflight_prompts``: dispatched and not finished; ``max_buffered_rollouts``: dispatched and
not yet consumed or evicted) and for ``rollout_permitted``, which is cleared during a weight sync.
A dispatched prompt is stamped with the engine's weight version (``start_weight``) and, for
in_order, with ``target_step = d``. Its requests go to the engines, which queue what they cannot
run (vLLM's waiting queue). L2: none (NeMo refits in flight; here, as for every policy, in-flight
requests pause for the sync and continue with their tokens).

Reward filtering. NeMo-RL's asynchronous paths (``single_controller.py`` and
``grpo.py::async_grpo_train``) have no dynamic sampling: ``use_dynamic_sampling`` is read only by
the synchronous loop, and the single controller's ``_advantage_stage`` trains every selected group,
a group with equal rewards getting zero advantage. So by default (``on_no_gradient="train"``)
no-gradient groups are trained like any other; they take batch places and trainer time and their
tokens count as trained without gradient. ``promote_ready_group`` (``replay_buffer.py``) and
``_promote_into_step`` (``single_controller.py``) belong to the *dropped-prompt* path: a prompt
whose rollout ``generate_and_push`` gave up on (``RolloutOutcome.SKIPPED``, a data or infra
failure) under ``rollout_failure.on_dropped_prompt="replace"``. ``on_no_gradient="drop"`` models
what a user gets by routing the reward filter through that path (a what-if, not NeMo-RL's
behaviour; see the subclasses).
"""

from __future__ import annotations

from .api import Group, Policy
from .base import chunk_of, members


class GatedNemoSampler(Policy):
    """Admission common to NeMo-RL's in_order and weight_fifo; subclasses select batches."""

    source = "NVIDIA-NeMo/RL@7ea279ab nemo_rl/algorithms/async_utils/staleness_sampler.py"
    bounded = True

    def __init__(self, eta: int, max_inflight_prompts: int = 32,
                 max_buffered_rollouts: int = 64, on_no_gradient: str = "train") -> None:
        super().__init__(eta)
        if on_no_gradient not in ("train", "drop"):
            raise ValueError(f"{self.name}: on_no_gradient must be 'train' or 'drop', "
                             f"got {on_no_gradient!r}")
        self.window = eta  # W: max_lookahead_versions / max_staleness_versions, aligned to eta
        self.max_inflight = max_inflight_prompts
        self.max_buffered_default = max_buffered_rollouts
        self.on_no_gradient = on_no_gradient
        self.filters = on_no_gradient == "drop"

    def attach(self, sim) -> None:
        super().attach(sim)
        # validate_sampler_buffer_capacity rejects max_buffered_rollouts < B*(W+1); a user
        # running W >= 4 with B = 16 must raise it, so we do the same.
        self.max_buffered = max(self.max_buffered_default, self.batch_size * (self.window + 1))
        self.dispatch_index = -1  # resume_step - 1 on a fresh run
        self.to_dispatch = 0  # prompts of the released dataloader batch not yet dispatched
        self.inflight = 0  # dispatched, not finished
        self.buffered = 0  # dispatched, not consumed or evicted (holds a buffer_capacity permit)
        self.slots: list[Group] = []  # the replay buffer's slots in reserve order

    def admit(self) -> None:
        sim = self.sim
        while not sim.paused:  # rollout_permitted is cleared during a weight sync
            if self.to_dispatch == 0:
                if self.dispatch_index >= sim.version + self.window:
                    return  # the admit() gate
                self.dispatch_index += 1
                self.to_dispatch = self.batch_size
            if self.inflight >= self.max_inflight or self.buffered >= self.max_buffered:
                return
            group = sim.admit()  # start_weight = the engine's version now
            group.tag = self.dispatch_index  # target_step (used by in_order only)
            self.to_dispatch -= 1
            self.inflight += 1
            self.buffered += 1
            self.slots.append(group)

    def on_group_done(self, group: Group) -> None:
        self.inflight -= 1

    def _release(self, groups: list[Group]) -> None:
        """Groups left the replay buffer (consumed or evicted): their permits return."""
        gone = {g.gid for g in groups}
        self.slots = [g for g in self.slots if g.gid not in gone]
        self.buffered -= len(groups)

    def _take_chunk(self, candidates: list[Group], least: int, most: int):
        """``select`` of a chunk: at least ``least`` and at most ``most`` of ``candidates`` (in
        their order), which leave the buffer at once; None when fewer than ``least``."""
        chosen = chunk_of(candidates, least, most)
        if chosen is None:
            return None
        self._release(chosen)
        return members(chosen)

    def _fill_step(self, candidates: list[Group]):
        """Whole-batch ``select`` of a sampler that mixes versions (one with ``step_groups`` and
        ``min_groups``: ready_first, windowed): add a chunk of
        ``candidates`` (at least ``min(min_groups, lacking)``, at most the groups the step
        lacks) to ``step_groups``, and hand the step out once it holds ``batch_size``."""
        lacking = self.batch_size - len(self.step_groups)
        chosen = chunk_of(candidates, min(self.min_groups, lacking), lacking)
        if chosen:
            self._release(chosen)
            self.step_groups += chosen
        if len(self.step_groups) < self.batch_size:
            return None
        batch, self.step_groups = self.step_groups, []
        return members(batch)

    def settings(self) -> dict:
        return {"eta": self.eta, "W": self.window, "max_inflight_prompts": self.max_inflight,
                "max_buffered_rollouts": self.max_buffered, "on_no_gradient": self.on_no_gradient}

    def describe_state(self) -> str:
        ready = sum(1 for g in self.slots if g.done)
        return (f"dispatch_index={self.dispatch_index} to_dispatch={self.to_dispatch} "
                f"inflight={self.inflight} buffered={self.buffered} slots={len(self.slots)} "
                f"ready={ready}")
