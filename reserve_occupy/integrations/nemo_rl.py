"""Reserve–Occupy as a NeMo-RL prompt-group sampler (``async_rl.sampler: {name: custom}``).

NeMo-RL's single-controller async GRPO loop (NVIDIA-NeMo/RL @ 7ea279ab,
``nemo_rl/algorithms/async_utils/staleness_sampler.py``, ``PromptGroupSampler``) asks one object
for every staleness decision: the rollout pump awaits ``admit`` once per dataloader batch, the
train pump calls ``evict`` then ``select`` until a step has ``num_prompts_per_step`` groups, and
the weight sync asks ``should_abort_inflight``. ``ReserveOccupySampler`` answers them with the
verified controller:

* ``admit`` waits until the controller has a legal slot for each group of the batch and
  reserves them (``reserve``, stamped with the published version). Returns ``None``: no
  target-step stamp, the protocol decides where a group trains.
* Groups the replay buffer marks ready are bound to a reservation and placed (``occupy``) on
  the next ``evict`` / ``select``. A ready group takes the newest reservation not newer than the
  weights it started with (``start_weight``), so its recorded ``v_traj`` is never newer than
  its real one; that greedy choice always succeeds when each group's own reservation would.
* ``select`` consumes the head batch once it is READY and hands its groups out in as many
  chunks as the pump asks for; it returns ``(None, 0)`` while the head waits for a straggler.
* Streaming (``streaming=True``, the protocol's ``Config.streaming``): NeMo-RL's train pump
  asks ``select`` for chunks of at least ``min(async_rl.min_groups_for_streaming_train,
  groups still missing)`` groups, runs forward/backward on each and steps the optimiser once
  the step has ``num_prompts_per_step`` groups (``single_controller.py`` ``_train_pump``;
  ``min_groups_for_streaming_train`` defaults to 32 and must be <= ``num_prompts_per_step``,
  ``validate_single_controller_config``). With streaming on, ``select`` also hands out the head
  buffer's groups that are final before the buffer is READY (``stream``): they can no longer
  leave it, so they train in this step whatever happens to the rest; at ``consume`` only the
  groups not handed yet follow. Off (the default), a chunk is handed only once the whole batch
  is final, so a lower ``min_groups_for_streaming_train`` splits the step without
  overlapping it with generation.
* ``publish`` happens when the pump's ``current_train_weight`` (or the admission gate's
  ``trainer_version_fn``) moves past the controller. NeMo-RL bumps its trainer version and
  clears ``_rollout_permitted`` in the same event-loop turn (``single_controller.py``
  ``_train_pump`` / ``_sync_weights``), so groups reserved after the bump start generating
  with the new weights.
* ``evict`` removes nothing (nothing is ever too stale) and ``should_abort_inflight`` is
  always false. Only a group that finds no reservation is evicted: possible after the optional
  ``stuck_timeout_s`` fail-safe (spec §6.2) released a stuck head buffer's reservations, or
  escalated and aborted reservations in flight since before the previous release (the rule of
  ``reserve_occupy.stuck``: after a release with no placement since the one before, the next
  waits twice as long; from the third such release in a row, a release also aborts those).

NeMo-RL is not a dependency: the replay buffer is used through the attributes and coroutines the
sampler protocol documents (``meta_list``, ``start_weight_list``, ``ready_list``, ``remove``),
and ``KVBatchMeta.concat`` joins the chosen groups.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Callable, Optional

from ..config import Config
from ..errors import ProtocolError
from ..machine import StalenessController
from ..stuck import StuckTimeouts
from ..types import Phase
from ._shared import free_reservations, release_stuck, seconds_setting

__all__ = ["NemoSamplerError", "ReserveOccupySampler"]


class NemoSamplerError(ProtocolError):
    """NeMo-RL drove the sampler in a way the protocol cannot follow (names what)."""


def _setting_error(key: str, value: object, requirement: str) -> NemoSamplerError:
    return NemoSamplerError(f"{key} {requirement} (or None), got {value!r}"
                            if key == "stuck_timeout_s" else f"{key} {requirement}, got {value!r}")


def _group_key(meta: Any) -> str:
    """A ready group's identity: its first sample id (NeMo-RL prefixes them with the group id)."""
    return str(meta.sample_ids[0])


class ReserveOccupySampler:
    """A ``PromptGroupSampler`` for NeMo-RL's single-controller async GRPO loop.

    ``buffer`` is NeMo-RL's ``TQReplayBuffer`` (NeMo-RL passes it first). The keyword arguments
    come from the sampler's config block: ``max_staleness`` (eta), ``groups_per_step`` (must
    equal ``grpo.num_prompts_per_step`` and the dataloader's batch size), ``stuck_timeout_s``
    (optional fail-safe: release a head buffer that waited this long on groups that never
    arrive), ``poll_s`` (admission poll interval) and ``streaming`` (hand out the head
    buffer's final groups before it is READY; see the module docstring). ``clock`` (seconds,
    default ``time.monotonic``) times the fail-safe.
    """

    def __init__(self, buffer: Any, *, max_staleness: int, groups_per_step: int,
                 stuck_timeout_s: Optional[float] = None, poll_s: float = 0.005,
                 streaming: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = Config(max_staleness=max_staleness, batch_size=groups_per_step,
                             streaming=streaming)
        # finite numbers of seconds > 0 (not a bool, a string, inf or NaN: inf would never
        # fire, or poll never again), checked before the sampler takes any state
        if stuck_timeout_s is not None:
            stuck_timeout_s = seconds_setting(_setting_error, "stuck_timeout_s", stuck_timeout_s)
        poll_s = seconds_setting(_setting_error, "poll_s", poll_s)
        self._buffer = buffer
        self.controller = StalenessController(self.config)
        self.stuck_timeout_s = stuck_timeout_s
        self.poll_s = poll_s
        self._offset = 0  # trainer version of the controller's version 0 (resume step)
        self._dispatch_index = -1  # batches admitted - 1, as NeMo-RL's samplers count
        self._next_unit = 0
        self._unbound: dict[str, int] = {}  # reservation -> v_traj, not yet bound to a group
        self._unit_of: dict[str, str] = {}  # group key -> unit (bound and occupied)
        self._handout: list[str] = []  # group keys of the consumed batch not yet selected
        self._clock = clock
        self._stuck = StuckTimeouts(math.inf if stuck_timeout_s is None else stuck_timeout_s)
        self._admitted_at: dict[str, float] = {}  # reservation -> admission time, in flight
        self.orphans = 0  # ready groups that found no reservation (after a release)
        self.released: list[str] = []  # reservations released by the fail-safe
        self.escalated: list[str] = []  # reservations its escalation aborted

    # ------------------------------------------------------------ rollout-pump side ----------

    async def admit(self, *, trainer_version_fn: Callable[[], int]) -> Optional[int]:
        """Wait until every group of the next dataloader batch has a legal slot; reserve them."""
        b = self.config.batch_size
        while True:
            self._publish_up_to(trainer_version_fn())
            if free_reservations(self.controller) >= b:
                break
            await asyncio.sleep(self.poll_s)
        ctl = self.controller
        for _ in range(b):
            unit = f"r{self._next_unit}"
            self._next_unit += 1
            if ctl.reserve(unit) is None:  # free_reservations() said there is room
                raise NemoSamplerError(f"no legal slot for {unit} although one was counted")
            self._unbound[unit] = ctl.version
            self._admitted_at[unit] = self._clock()
        self._dispatch_index += 1
        return None

    # ------------------------------------------------------------ train-pump side ------------

    async def evict(self, *, current_train_weight: int) -> int:
        """Nothing is ever stale; only groups without a reservation (after a release) go."""
        return await self._sync(current_train_weight)

    async def select(self, *, current_train_weight: int, min_prompt_groups: int,
                     max_prompt_groups: int) -> tuple[Optional[Any], int]:
        if min_prompt_groups < 1:
            raise ValueError(f"min_prompt_groups must be >= 1, got {min_prompt_groups}")
        if max_prompt_groups < min_prompt_groups:
            raise ValueError(f"max_prompt_groups ({max_prompt_groups}) must be >= "
                             f"min_prompt_groups ({min_prompt_groups})")
        await self._sync(current_train_weight)
        ctl = self.controller
        if ctl.phase is Phase.IDLE:  # the step's batch is not consumed yet
            # consume before stream: a READY head is consumed, never streamed whole, so the
            # step cannot be complete (and published) without its consume
            batch = ctl.consume()
            key_of = {unit: key for key, unit in self._unit_of.items()}
            if batch is not None:
                self._stuck.reset()
                handed = set(batch.streamed)  # already handed out, or waiting in _handout
                self._handout += [key_of[u] for u in batch.unit_ids if u not in handed]
            else:
                if self.config.streaming:
                    self._handout += [key_of[u.unit_id] for u in ctl.stream()]
                self._maybe_release_stuck()
                if not self._handout:
                    return None, 0
        if len(self._handout) < min_prompt_groups:
            return None, 0
        chosen, self._handout = (self._handout[:max_prompt_groups],
                                 self._handout[max_prompt_groups:])
        index = {_group_key(m): i for i, m in enumerate(self._buffer.meta_list) if m is not None}
        idxs = [index[k] for k in chosen]
        metas = [self._buffer.meta_list[i] for i in idxs]
        for k in chosen:
            del self._unit_of[k]
        await self._buffer.remove(idxs, remove_in_dp=False)
        return metas[0].concat(*metas[1:]), len(idxs)

    def should_abort_inflight(self, *, start_weight_version: int,
                              current_train_weight: int) -> bool:
        return False  # every admitted group has a legal slot whenever it finishes

    # ------------------------------------------------------------ derived facts --------------

    @property
    def is_on_policy(self) -> bool:
        return self.config.max_staleness == 0

    def required_buffer_capacity(self, groups_per_step: int) -> Optional[int]:
        """The most groups the protocol holds: (eta + 1) buffers of one step each."""
        if groups_per_step != self.config.batch_size:
            raise NemoSamplerError(
                f"groups_per_step={self.config.batch_size} in the sampler config but "
                f"num_prompts_per_step={groups_per_step}: set them equal")
        return (self.config.max_staleness + 1) * groups_per_step

    def set_dispatch_index(self, resume_from_step: int) -> None:
        if resume_from_step < 0:
            raise ValueError(f"resume_from_step must be non-negative, got {resume_from_step}")
        if self.controller.event_count:
            raise NemoSamplerError("set_dispatch_index after the first admission")
        self._offset = resume_from_step
        self._dispatch_index = resume_from_step - 1

    # ------------------------------------------------------------ internals ------------------

    def _publish_up_to(self, trainer_version: int) -> None:
        target = trainer_version - self._offset
        ctl = self.controller
        while ctl.version < target:
            if ctl.phase is not Phase.TRAINING or self._handout:
                raise NemoSamplerError(
                    f"trainer version {trainer_version} but the controller trained only "
                    f"{ctl.version} whole batches: a step must train exactly the groups "
                    f"select() handed out")
            ctl.publish()

    async def _sync(self, trainer_version: int) -> int:
        """Publish, then place every newly ready group; returns how many orphans were evicted."""
        self._publish_up_to(trainer_version)
        buf = self._buffer
        orphans: list[int] = []
        for i, ready in enumerate(buf.ready_list):
            if not ready:
                continue
            key = _group_key(buf.meta_list[i])
            if key in self._unit_of:
                continue
            unit = self._bind(buf.start_weight_list[i] - self._offset)
            if unit is None:
                orphans.append(i)
                continue
            self._unit_of[key] = unit
            del self._admitted_at[unit]
            self.controller.occupy(unit)
        if orphans:
            self.orphans += len(orphans)
            return await buf.remove(orphans, remove_in_dp=True)
        return 0

    def _bind(self, start_version: int) -> Optional[str]:
        """The newest unbound reservation not newer than the group's weights."""
        best = None
        for unit, v_traj in self._unbound.items():
            if v_traj <= start_version and (best is None or v_traj > self._unbound[best]):
                best = unit
        if best is not None:
            del self._unbound[best]
        return best

    def _maybe_release_stuck(self) -> None:
        """The fail-safe, polled while the step waits: release a head buffer STUCK for the
        timeout in force, and escalate as ``reserve_occupy.stuck`` says. Released and aborted
        reservations are gone; groups still generating for them find none when they are
        ready and are evicted."""
        done = release_stuck(self.controller, self._stuck, self._admitted_at, self._clock())
        if done is None:
            return
        self.released += done.released
        self.escalated += done.escalated
        self._drop(done.gone)

    def _drop(self, units) -> None:
        for unit in units:
            self._unbound.pop(unit, None)
            self._admitted_at.pop(unit, None)
