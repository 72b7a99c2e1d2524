"""NeMo-RL ``windowed`` sampler (SingleController path): ungated dispatch, a staleness window.

Source: NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22),
``nemo_rl/algorithms/async_utils/staleness_sampler.py`` (``WindowedSampler`` 241–309,
``BaseSampler.evict`` 168–184, ``_finalize_selection`` 217–238),
``nemo_rl/algorithms/single_controller.py`` (``_rollout_pump`` 445–631, ``_train_pump``
843–1221, ``_abort_stale_inflight`` 1478–1511, 1636–1640),
``nemo_rl/algorithms/single_controller_utils/config.py`` (defaults: ``max_staleness_versions``
1, 487–492; ``max_inflight_prompts`` 32, 415; ``max_buffered_rollouts`` 64, 417;
``min_groups_for_streaming_train`` 32, 413) and ``NVIDIA-NeMo/RL/docs/guides/single-controller.md`` (table,
line 73: "aged groups outside the window are evicted (wasted compute)").

* L1: ``admit`` returns at once (no version gate, ``required_buffer_capacity`` None). A prompt is
  dispatched whenever both semaphores have a permit: ``max_inflight_prompts`` (dispatched, not
  finished) and ``max_buffered_rollouts`` (dispatched, not consumed or evicted), and not during
  a weight sync (``rollout_permitted``). Its ``start_weight`` is the weights' version then
  (``v_tag``).
* L3: per ``select`` at trainer version T (after ``evict``): the ready groups with
  ``max(0, T - W) <= start_weight <= T``, in slot (dispatch) order (``sample_freshest_first``:
  freshest first), mixed versions, at least ``min(min_groups_for_streaming_train, lacking)``;
  ``evict`` first drops every *ready* group with ``start_weight < T - W`` (dropped, its permit
  returns; nothing replaces it but the next ordinary dispatch).
* L2: at each weight sync every in-flight group with ``start_weight < T_new - W`` is cancelled
  (``should_abort_inflight``): its tokens are wasted and its prompt is lost.

eta is ``W = max_staleness_versions`` (shipped default 1). **Drops** (evict and in-flight
cancellation). **Strict per group**: nothing outside ``[T - W, T]`` is ever selected.

What differs from the shipped code, and why: the cancellation happens in ``on_publish``, after
the sync, because the rule API has no pre-sync hook (NeMo cancels after
``_trainer_version += 1`` and before the refit); the engines are paused during the sync, so the
same tokens are wasted. ``min_groups_for_streaming_train`` defaults to 1 here (NeMo's 32 is
refused by its own validation at 16 prompts per step; with a whole-batch trainer the step is
assembled select by select until it is whole, as ``_train_pump`` does, so the value only
changes chunking on a streaming trainer). No-gradient groups are trained (NeMo's
SingleController has no dynamic sampling; see ``nemo.py``). In the runtime a unit's ``v_traj`` is
the version at ``reserve`` (>= ``start_weight``), so the logged staleness is within the window
too.
"""

from __future__ import annotations

from .api import Group
from .base import members
from .nemo import GatedNemoSampler


class NemoWindowed(GatedNemoSampler):
    name = "nemo_windowed"
    label = "NeMo windowed"
    source = ("NVIDIA-NeMo/RL@7ea279ab nemo_rl/algorithms/async_utils/staleness_sampler.py "
              "(WindowedSampler)")
    bounded = True
    streams = True

    def __init__(self, eta: int, max_inflight_prompts: int = 32,
                 max_buffered_rollouts: int = 64, min_groups_for_streaming_train: int = 1,
                 sample_freshest_first: bool = False) -> None:
        super().__init__(eta, max_inflight_prompts=max_inflight_prompts,
                         max_buffered_rollouts=max_buffered_rollouts)
        for key, value in (("max_inflight_prompts", max_inflight_prompts),
                           ("max_buffered_rollouts", max_buffered_rollouts),
                           ("min_groups_for_streaming_train", min_groups_for_streaming_train)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {key} must be an int >= 1, got {value!r}")
        self.min_groups = min_groups_for_streaming_train
        self.freshest_first = bool(sample_freshest_first)

    def attach(self, sim) -> None:
        super().attach(sim)
        # required_buffer_capacity() is None for windowed: no validation raises the semaphore
        self.max_buffered = self.max_buffered_default
        self.step_groups: list[Group] = []  # selected for the step being assembled
        self.evicted = 0
        self.cancelled = 0

    def admit(self) -> None:
        sim = self.sim
        while (not sim.paused and self.inflight < self.max_inflight
               and self.buffered < self.max_buffered):
            group = sim.admit()  # start_weight = the weights' version now
            self.inflight += 1
            self.buffered += 1
            self.slots.append(group)

    def _low(self) -> int:
        return max(0, self.sim.version - self.window)

    def _evict(self) -> None:
        """``BaseSampler.evict``: drop the ready groups older than the window."""
        low = self._low()
        stale = [g for g in self.slots if g.done and g.v_tag < low]
        if stale:
            self._release(stale)
            self.evicted += len(stale)
            self.sim.drop(members(stale))

    def _eligible(self) -> list[Group]:
        low, version = self._low(), self.sim.version
        ready = [g for g in self.slots if g.done and low <= g.v_tag <= version]
        if self.freshest_first:
            ready.sort(key=lambda g: version - g.v_tag)  # stable: then slot order
        return ready

    def take_batch(self):
        """Whole-batch trainer: ``_train_pump``'s evict + select until the step is whole."""
        self._evict()
        return self._fill_step(self._eligible())

    def take_chunk(self, least: int, most: int):
        """Streaming: one ``evict`` + ``select`` of ``_train_pump``."""
        self._evict()
        return self._take_chunk(self._eligible(), least, most)

    def on_publish(self, version: int) -> None:
        """``_abort_stale_inflight``: cancel in-flight groups older than the new window (after
        the sync here: see the module docstring)."""
        low = version - self.window
        for g in [g for g in self.slots if g.state == Group.RUNNING and g.v_tag < low]:
            self.sim.abort_group(g)
            self.inflight -= 1
            self._release([g])
            self.cancelled += 1

    def settings(self) -> dict:
        return {"eta": self.eta, "max_staleness_versions": self.window,
                "max_inflight_prompts": self.max_inflight,
                "max_buffered_rollouts": self.max_buffered,
                "min_groups_for_streaming_train": self.min_groups,
                "sample_freshest_first": self.freshest_first,
                "evicted": self.evicted, "cancelled_in_flight": self.cancelled}
