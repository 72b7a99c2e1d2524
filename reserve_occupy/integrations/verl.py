"""Reserve–Occupy inside verl's V1 trainer (``verl==0.9.1``, ``verl/trainer/ppo/v1/``).

verl bounds staleness at *sampling* time: ``ReplayBufferAsync`` (``replay_buffer.py``) drops a
finished group whose span ``global_steps - tag + 1`` passed ``max_off_policy_threshold``
(strategy ``drop``: the group is lost and one fresh prompt refills it), or blocks every sample
while any in-flight prompt reached the threshold (strategy ``wait``: nothing lost, the trainer
stalls on one straggler). Admission is unconditional: ``prepare_step`` submits a batch every
step and ``on_train_begin`` adds the warm-up batches.

Here the verified controller makes the decisions instead, through verl's two seams:

* ``ReserveOccupyReplayBuffer`` is the custom sampler (``trainer.v1.sampler.custom_sampler``).
  It owns the ``StalenessController``. Admission (``reserve``) submits prompts through the
  ``refill_fn`` verl hands it, one prompt per legal slot; after each TransferQueue metadata sync
  a prompt that turned ``finished`` is placed (``occupy``), one that turned ``failure`` is
  aborted, one the DAPO filter rejects is filtered (both are cleared from TransferQueue and their
  slot is admitted again). ``sample`` serves the controller's head batch (``consume``), in as
  many ``parameter_sync_step`` chunks as verl asks for; ``publish`` is called by the trainer.
* ``ReserveOccupyColocateAsync`` / ``ReserveOccupySeparateAsync`` (registered with verl's
  ``register_trainer`` as ``reserve_occupy_colocate_async`` / ``reserve_occupy_separate_async``)
  make admission the only way in (``prepare_step`` and the warm-up admit into legal slots
  instead of submitting a batch) and call ``publish`` after ``update_weights`` in
  ``on_step_end``.
* ``main`` is the entry point (``python -m reserve_occupy.integrations.verl ...`` with verl's own
  Hydra config): it runs ``main_ppo.run_ppo`` with a ``TaskRunnerV1`` that imports this module
  inside its Ray actor, where verl looks the trainer up.

Versions: verl tags prompts with the trainer's ``global_steps`` at submission and step ``s``
publishes weights ``s``; the protocol's version while step ``s`` runs is ``s - 1`` (minus the
step a resumed run started from). verl's own staleness check must be off
(``max_off_policy_threshold: null``): the protocol never lets a group exceed eta.

This module imports verl (it subclasses verl's classes); the core package never imports it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

from ._shared import missing_module

MODULE = "reserve_occupy.integrations.verl"  # also when run as __main__
USAGE = f"""\
usage: python -m {MODULE} [verl's Hydra overrides ...]

verl's main_ppo with the Reserve-Occupy trainer modes and sampler (docs/porting/verl.md):
  trainer.v1.trainer_mode=reserve_occupy_colocate_async (or reserve_occupy_separate_async)
  trainer.v1.sampler.max_off_policy_threshold=null
  trainer.v1.sampler.custom_sampler.path=pkg://{MODULE}
  trainer.v1.sampler.custom_sampler.name=ReserveOccupyReplayBuffer
  +trainer.v1.sampler.sampler_kwargs.max_staleness=ETA   (an integer 0..1024)
  +trainer.v1.sampler.sampler_kwargs.batch_size=B        (= data.train_batch_size)
These are checked before verl starts anything (a bad one is one line, exit 2). verl's own
options: python -m {MODULE} --hydra-help, or --cfg job to print the composed config.
"""

# what to install when verl, or what it imports on CPU, is missing (pyproject.toml, Makefile)
PACKAGES = {
    "verl": "install verl with pip install --no-deps verl==0.9.1 transferqueue==0.1.11 "
            "tensordict==0.10.0 pyvers==0.1.0 and its CPU imports with pip install "
            "'reserve-occupy[verl]'",
}

try:
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
except ModuleNotFoundError as _exc:
    if __name__ != "__main__":  # imported: the caller's to handle
        raise
    # the entry point without verl: its help, or one line naming what to install
    if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        print(USAGE, end="")
        raise SystemExit(0) from None
    print(missing_module("the verl plugin", _exc, "verl", PACKAGES), file=sys.stderr)
    raise SystemExit(2) from None

from ..config import Config
from ..errors import ConfigError, ProtocolError
from ..machine import StalenessController
from ..stuck import StuckTimeouts
from ..types import Batch, Phase, SlotState
from ._shared import (free_reservations, integer_setting, own_error, release_stuck,
                      seconds_setting)

__all__ = ["VerlIntegrationError", "VerlSettingError", "ReserveOccupyReplayBuffer"]

TRAIN = "train"


class VerlIntegrationError(ProtocolError):
    """verl is configured or driven in a way the protocol cannot follow (names what)."""


class VerlSettingError(VerlIntegrationError, ValueError):
    """A setting of the sampler has the wrong type or value; ``key`` is its path in verl's
    Hydra config (``trainer.v1.sampler.sampler_kwargs.max_staleness``, ...)."""

    def __init__(self, key: str, value: object, requirement: str) -> None:
        self.key, self.value, self.requirement = key, value, requirement
        super().__init__(f"{key}={value!r}: {requirement}")


SAMPLER_KWARGS = "trainer.v1.sampler.sampler_kwargs"


def _integer(key: str, value: object, minimum: int) -> int:
    return integer_setting(VerlSettingError, key, value, minimum)


def _seconds(key: str, value: object) -> float:
    return seconds_setting(VerlSettingError, key, value)


def _settings(trainer_mode: str, trainer_config: Any, max_off_policy_threshold: Any,
              sampler_kwargs: Any, poll_interval: Optional[float] = None) -> tuple[Any, ...]:
    """The sampler's settings, checked: (sampler_kwargs as a dict, poll interval, stuck
    timeout, filter metric, parameter_sync_step, Config). ``VerlIntegrationError`` (or
    ``VerlSettingError`` naming the key) for the first that is wrong. The sampler's constructor
    and ``check_config`` (the entry point, before verl starts anything) both call it."""
    if sampler_kwargs is not None and not isinstance(sampler_kwargs, Mapping):
        raise VerlSettingError(SAMPLER_KWARGS, sampler_kwargs, "must be a mapping")
    kw = dict(sampler_kwargs or {})
    unknown = set(kw) - {"max_staleness", "batch_size", "poll_interval", "stuck_timeout_s",
                         "filter_groups_metric"}
    if unknown:
        raise VerlIntegrationError(f"unknown sampler_kwargs {sorted(map(str, unknown))}")
    if trainer_mode == "sync":
        raise VerlIntegrationError("trainer_mode 'sync' trains on-policy already: use "
                                   "reserve_occupy_colocate_async or _separate_async")
    if max_off_policy_threshold is not None:
        raise VerlIntegrationError(
            f"max_off_policy_threshold={max_off_policy_threshold}: set "
            f"trainer.v1.sampler.max_off_policy_threshold=null, the protocol bounds "
            f"staleness itself (verl's own check would drop or stall on top of it)")
    for key in ("max_staleness", "batch_size"):
        if key not in kw:
            raise VerlIntegrationError(f"{SAMPLER_KWARGS}.{key} is not set")
    eta = _integer(f"{SAMPLER_KWARGS}.max_staleness", kw["max_staleness"], 0)
    batch = _integer(f"{SAMPLER_KWARGS}.batch_size", kw["batch_size"], 1)
    if "poll_interval" in kw:
        poll = _seconds(f"{SAMPLER_KWARGS}.poll_interval", kw["poll_interval"])
    else:
        poll = 0.5 if poll_interval is None else _seconds("poll_interval", poll_interval)
    stuck = kw.get("stuck_timeout_s")
    if stuck is not None:
        stuck = _seconds(f"{SAMPLER_KWARGS}.stuck_timeout_s", stuck)
    metric = kw.get("filter_groups_metric")
    if metric is not None and (not isinstance(metric, str) or not metric.strip()):
        raise VerlSettingError(f"{SAMPLER_KWARGS}.filter_groups_metric", metric,
                               "must be a metric name (\"reward\" or a reward_extra_info "
                               "key) or null")
    sync_step = _integer(f"trainer.v1.{trainer_mode}.parameter_sync_step",
                         (trainer_config or {}).get("parameter_sync_step", 1), 1)
    if batch % sync_step:
        raise VerlIntegrationError(
            f"batch_size {batch} is not divisible by parameter_sync_step {sync_step}")
    try:
        config = Config(max_staleness=eta, batch_size=batch)
    except ConfigError as exc:  # the controller's own limits (MAX_STALENESS, MAX_SLOTS)
        raise VerlSettingError(f"{SAMPLER_KWARGS}.{exc.field}", exc.value,
                               exc.requirement) from None
    return kw, poll, stuck, metric, sync_step, config


class ReserveOccupyReplayBuffer(ReplayBufferAsync):
    """verl's async replay buffer with Reserve–Occupy deciding admission, placement and batches.

    verl constructs it with the keywords of ``_build_replay_buffer``; the protocol's settings
    come from ``trainer.v1.sampler.sampler_kwargs``: ``max_staleness`` (eta), ``batch_size``
    (must equal ``data.train_batch_size``), and optionally ``poll_interval`` (seconds between
    TransferQueue polls, default 0.5), ``stuck_timeout_s`` (release a head buffer stuck that long
    on prompts that never finish; default off) and ``filter_groups_metric`` (DAPO: ``"reward"``
    or a ``reward_extra_info`` key; groups without signal are filtered and re-admitted).
    """

    def __init__(self, trainer_mode: str, trainer_config: Any,
                 max_off_policy_threshold: Optional[int], max_off_policy_strategy: str,
                 sampler_kwargs: Any, poll_interval: Optional[float] = None, refill_fn=None,
                 clock: Callable[[], float] = time.monotonic, **_ignored: Any) -> None:
        kw, poll, stuck, metric, sync_step, config = _settings(
            trainer_mode, trainer_config, max_off_policy_threshold, sampler_kwargs, poll_interval)
        if refill_fn is None:
            raise VerlIntegrationError("refill_fn is None: admission submits prompts through it")
        self.config = config
        super().__init__(trainer_mode=trainer_mode, trainer_config=trainer_config,
                         max_off_policy_threshold=None, max_off_policy_strategy="drop",
                         sampler_kwargs=kw, poll_interval=poll, refill_fn=refill_fn,
                         filter_groups_metric=metric)
        self.parameter_sync_step = sync_step
        self.stuck_timeout_s = stuck
        self.controller = StalenessController(self.config)
        self._offset: Optional[int] = None  # global_steps - 1 when the first prompt was admitted
        self._next_unit = 0
        self._unbound: list[str] = []  # reserved, not yet bound to the uid refill_fn made
        self._discarded: set[str] = set()  # uids released by the fail-safe (still generating)
        self._unit_of: dict[str, str] = {}  # uid -> unit, from admission until trained/removed
        self._placed: set[str] = set()  # uids occupied, filtered or aborted
        self._handout: list[str] = []  # uids of the consumed batch not yet sampled
        self._clock = clock  # times the fail-safe (verl passes none: time.monotonic)
        self._stuck = StuckTimeouts(math.inf if stuck is None else stuck)
        self._admitted_at: dict[str, float] = {}  # unit -> admission time, while in flight
        self.trained: list[Batch] = []  # every consumed batch (for metrics and tests)
        self.released: list[str] = []  # units released by the stuck fail-safe
        self.escalated: list[str] = []  # units its escalation aborted
        self.wait_s = 0.0  # time sample() spent polling for the head batch

    # ------------------------------------------------------------ the trainer's calls --------

    def admit(self, global_steps: int) -> int:
        """Reserve every legal slot and submit one prompt for each (``refill_fn``)."""
        if self._offset is None:
            self._offset = global_steps - 1
        self._check_version(global_steps)
        ctl = self.controller
        free = free_reservations(self.controller)
        for _ in range(free):
            unit = f"u{self._next_unit}"
            self._next_unit += 1
            if ctl.reserve(unit) is None:  # free_reservations() counted a legal slot
                raise VerlIntegrationError(f"no legal slot for {unit} although one was counted")
            self._unbound.append(unit)
            self._admitted_at[unit] = self._clock()
        if free:
            known = set(self.prompt_global_steps[TRAIN])
            self.refill_fn(free)
            self._sync_metadata_from_transfer_queue()
            new = sorted(set(self.prompt_global_steps[TRAIN]) - known - set(self._unit_of)
                         - self._discarded)
            if len(new) != free:
                raise VerlIntegrationError(
                    f"refill_fn({free}) put {len(new)} new prompts into TransferQueue")
            for uid in new:
                self._unit_of[uid] = self._unbound.pop(0)
        return free

    def publish(self, global_steps: int) -> None:
        """The weights of step ``global_steps`` are live (after ``update_weights``)."""
        ctl = self.controller
        if self._offset is None or ctl.phase is not Phase.TRAINING or self._handout:
            raise VerlIntegrationError(
                f"publish at step {global_steps}, but the step did not sample the whole head "
                f"batch ({len(self._handout)} groups left, phase {ctl.phase.value})")
        ctl.publish()
        # No admission here: verl stamps a prompt with global_steps, still this step's until
        # fit() moves on; the next prepare_step admits, its prompts stamped with the new step.

    # ------------------------------------------------------------ verl's sampler interface ---

    def sample(self, global_steps: int, partition_id: str, batch_size: int
               ) -> tuple[KVBatchMeta, dict]:
        if partition_id != TRAIN:  # validation: every terminal group, no staleness policy
            return super().sample(global_steps, partition_id, batch_size)
        if batch_size * self.parameter_sync_step != self.config.batch_size:
            raise VerlIntegrationError(
                f"sample of {batch_size} groups: expected batch_size / parameter_sync_step = "
                f"{self.config.batch_size} / {self.parameter_sync_step}")
        metrics: dict = {}
        if not self._handout:
            batch, waited = self._next_batch(global_steps)
            self._handout = [uid for uid in self._uids_of(batch)]
            self.trained.append(batch)
            stale = [u.staleness for u in batch.units]
            metrics = {"training/reserve_occupy/staleness/max": max(stale),
                       "training/reserve_occupy/staleness/mean": sum(stale) / len(stale),
                       "training/reserve_occupy/wait_s": waited}
        chunk, self._handout = self._handout[:batch_size], self._handout[batch_size:]
        self._sync_metadata_from_transfer_queue()
        snapshot = dict(self.partitions[TRAIN])
        for uid in chunk:
            del self._unit_of[uid]
            self._placed.discard(uid)
        return self._materialize_batch(TRAIN, chunk, snapshot), metrics

    def get_sampleable_count(self, global_steps: int, partition_id: str) -> int:
        if partition_id != TRAIN:
            return super().get_sampleable_count(global_steps, partition_id)
        if self._handout:
            return len(self._handout)
        head = self.controller.snapshot().buffers
        return sum(1 for s, _ in head[0].slots if s is SlotState.OCCUPIED) if head else 0

    def wait_for_sampleable(self, global_steps: int, partition_id: str, target_count: int
                            ) -> tuple[set[str], dict]:
        """verl's hybrid-rollout switch waits here until ``target_count`` groups can be
        sampled (at most one batch: the head buffer is all a step trains)."""
        if partition_id != TRAIN:
            return super().wait_for_sampleable(global_steps, partition_id, target_count)
        self._check_version(global_steps)
        target = min(target_count, self.config.batch_size)
        last_debug = time.time()
        while True:
            self._sync()
            self.admit(global_steps)
            if self.get_sampleable_count(global_steps, TRAIN) >= target:
                return set(), {}
            last_debug = self._wait_for_next_poll(TRAIN, last_debug)

    # ------------------------------------------------------------ internals ------------------

    def _next_batch(self, global_steps: int) -> tuple[Batch, float]:
        """Poll TransferQueue, turning status changes into protocol events, until the head
        batch is READY; admit whenever a slot frees. Returns the batch and the time waited."""
        self._check_version(global_steps)
        t0 = time.monotonic()
        last_debug = time.time()
        while True:
            self._sync()
            self.admit(global_steps)
            batch = self.controller.consume()
            if batch is not None:
                waited = time.monotonic() - t0
                self.wait_s += waited
                self._stuck.reset()
                return batch, waited
            self._maybe_release_stuck()
            last_debug = self._wait_for_next_poll(TRAIN, last_debug)

    def _sync(self) -> None:
        """One TransferQueue snapshot: occupy / abort / filter every group that reached a
        terminal status since the last sync (``admit`` bound each uid to its reservation)."""
        self._sync_metadata_from_transfer_queue()
        ctl = self.controller
        steps = self.prompt_global_steps[TRAIN]
        late = {uid for uid in steps if uid in self._discarded}
        if late:  # released by the fail-safe, finished since: drop what they produced
            self._clear_groups(TRAIN, late)
        for uid in steps:
            if uid not in self._unit_of:
                raise VerlIntegrationError(
                    f"prompt {uid} (step tag {steps[uid]}) entered TransferQueue without a "
                    f"reservation: run a reserve_occupy_* trainer, which submits only through "
                    f"admission")
        dapo, _ = self._dapo_filtered_keys(TRAIN)
        removed: set[str] = set()
        for uid in self.failure_keys[TRAIN] - self._placed:
            ctl.abort(self._unit_of[uid])
            self._admitted_at.pop(self._unit_of[uid], None)
            removed.add(uid)
        for uid in self.finished_keys[TRAIN] - self._placed:
            self._admitted_at.pop(self._unit_of[uid], None)
            if uid in dapo:  # finished, then dropped for want of signal (spec §6.3)
                ctl.occupy(self._unit_of[uid])
                ctl.filter(self._unit_of[uid])
                removed.add(uid)
            else:
                ctl.occupy(self._unit_of[uid])
                self._placed.add(uid)
        if removed:
            self._clear_groups(TRAIN, removed)
            for uid in removed:
                del self._unit_of[uid]

    def _uids_of(self, batch: Batch) -> list[str]:
        uid_of = {unit: uid for uid, unit in self._unit_of.items()}
        return [uid_of[u] for u in batch.unit_ids]

    def _check_version(self, global_steps: int) -> None:
        expected = global_steps - 1 - (self._offset or 0)
        if self.controller.version != expected:
            raise VerlIntegrationError(
                f"step {global_steps} but the controller published {self.controller.version} "
                f"versions since step {(self._offset or 0) + 1}: the trainer must call "
                f"publish(global_steps) after every update_weights (use a reserve_occupy_* "
                f"trainer)")

    def _maybe_release_stuck(self) -> None:
        """The fail-safe, polled while ``sample`` waits: release a head buffer STUCK for the
        timeout in force, and escalate as ``reserve_occupy.stuck`` says (after a release with
        no placement since the one before, the next waits twice as long; from the third such
        release in a row, a release also aborts every unit in flight since before the previous
        one). The generation of a released or aborted prompt goes on; its results are
        cleared, never trained."""
        done = release_stuck(self.controller, self._stuck, self._admitted_at, self._clock())
        if done is None:
            return
        self.released.extend(sorted(done.released))
        self.escalated.extend(done.escalated)
        gone = done.gone
        uids = {uid for uid, unit in self._unit_of.items() if unit in gone}
        self._clear_groups(TRAIN, uids)
        for uid in uids:
            del self._unit_of[uid]
        self._discarded |= uids


# ---------------------------------------------------------------- the trainers ----------------

_REGISTERED: dict[str, type] = {}


def register() -> dict[str, type]:
    """Define the two async trainers with admission as the only way in and register them with
    verl's ``register_trainer`` (once per process; the task runner calls it in its actor)."""
    if _REGISTERED:
        return _REGISTERED
    import logging

    import transfer_queue as tq
    from omegaconf import open_dict
    from verl.trainer.ppo.v1.trainer_base import register_trainer
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync

    log = logging.getLogger(__name__)

    class _ReserveOccupyTrainer:
        """Mixed in before verl's trainer: the four hooks where prompts enter or weights go
        live. ``base_mode`` names verl's trainer section this one reads its settings from."""

        base_mode = ""
        replay_buffer: ReserveOccupyReplayBuffer
        global_steps: int

        def __init__(self, config: Any) -> None:
            mode = config.trainer.v1.trainer_mode
            with open_dict(config):  # verl reads trainer.v1.<trainer_mode>: point it at base's
                if config.trainer.v1.get(mode) is None:
                    config.trainer.v1[mode] = config.trainer.v1[self.base_mode]
            super().__init__(config)  # type: ignore[call-arg]
            self._check_sampler(config)

        def _check_sampler(self, config: Any) -> None:
            if not isinstance(self.replay_buffer, ReserveOccupyReplayBuffer):
                raise VerlIntegrationError(
                    f"the replay buffer is {type(self.replay_buffer).__name__}: set "
                    f"trainer.v1.sampler.custom_sampler.path=pkg://{MODULE} and "
                    f"custom_sampler.name=ReserveOccupyReplayBuffer")
            train_batch = int(config.data.train_batch_size)
            if self.replay_buffer.config.batch_size != train_batch:
                raise VerlIntegrationError(
                    f"sampler_kwargs.batch_size={self.replay_buffer.config.batch_size} but "
                    f"data.train_batch_size={train_batch}: set them equal")

        def _add_batch_to_generate(self) -> None:
            """verl submits a batch every step here (``prepare_step``); under the protocol
            admission does: every slot the last publish made legal."""
            self.replay_buffer.admit(self.global_steps)

        def _add_async_warmup_batches(self, num_warmup_batches: Any) -> None:
            """verl's warm-up batches: the protocol admits its (eta + 1) * B slots instead."""
            self.replay_buffer.admit(self.global_steps)

        def _reissue_inflight_prompts(self, partition_id: str = TRAIN) -> int:
            """A resumed run: prompts restored from the checkpoint have no reservation in this
            controller; they are cleared (never trained) and admission refills."""
            data = (tq.kv_list(partition_id) or {}).get(partition_id, {})
            if not data:
                return 0
            uids = [k for k, tag in data.items() if tag.get("is_prompt", False)]
            tq.kv_clear(keys=list(data), partition_id=partition_id)
            if uids:
                log.warning("Reserve-Occupy: %d prompt groups restored from the checkpoint "
                            "were cleared (not trained); admission submits new ones", len(uids))
            return 0

        def on_step_end(self) -> None:
            super().on_step_end()  # type: ignore[misc]  # update_weights(global_steps) in there
            self.replay_buffer.publish(self.global_steps)

    @register_trainer("reserve_occupy_colocate_async")
    class ReserveOccupyColocateAsync(_ReserveOccupyTrainer, PPOTrainerColocateAsync):
        base_mode = "colocate_async"

    @register_trainer("reserve_occupy_separate_async")
    class ReserveOccupySeparateAsync(_ReserveOccupyTrainer, PPOTrainerSeparateAsync):
        base_mode = "separate_async"

    _REGISTERED.update({"reserve_occupy_colocate_async": ReserveOccupyColocateAsync,
                        "reserve_occupy_separate_async": ReserveOccupySeparateAsync})
    return _REGISTERED


__all__ += ["register", "task_runner_class", "main", "integration_error", "check_config"]


# ---------------------------------------------------------------- the entry point -------------

def task_runner_class() -> Any:
    """verl's ``TaskRunnerV1`` actor, importing this module first so that the trainers above
    are registered in the actor's process (where ``get_trainer_cls`` looks them up)."""
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1

    class ReserveOccupyTaskRunner(TaskRunnerV1.__ray_actor_class__):  # type: ignore[name-defined]
        def run(self, config: Any) -> Any:
            import importlib

            importlib.import_module(MODULE).register()
            return super().run(config)

    return ray.remote(ReserveOccupyTaskRunner)


def integration_error(exc: BaseException) -> Optional[VerlIntegrationError]:
    """This module's own error behind ``exc``, if there is one: ``exc`` itself, or what it
    was raised from, or the ``cause`` of a Ray task error (an error raised in the task runner's
    actor reaches the driver wrapped in one)."""
    return own_error(exc, VerlIntegrationError)


def check_config(config: Any) -> None:
    """The plugin's settings in verl's (Hydra) config, checked in the driver before verl or Ray
    starts anything: the trainer mode, the custom sampler, ``sampler_kwargs`` (as the sampler
    checks them) and ``sampler_kwargs.batch_size`` = ``data.train_batch_size``."""
    v1 = config.trainer.v1
    mode = str(v1.trainer_mode)
    if not mode.startswith("reserve_occupy_"):
        raise VerlIntegrationError(
            f"trainer.v1.trainer_mode={mode}: use reserve_occupy_colocate_async or "
            f"reserve_occupy_separate_async")
    sampler = v1.sampler
    custom = sampler.get("custom_sampler", None)
    if custom is None or custom.get("name") != "ReserveOccupyReplayBuffer":
        raise VerlIntegrationError(
            f"trainer.v1.sampler.custom_sampler is not this plugin's: set "
            f"trainer.v1.sampler.custom_sampler.path=pkg://{MODULE} and "
            f"custom_sampler.name=ReserveOccupyReplayBuffer")
    trainer_config = v1.get(mode, None) or v1.get(mode[len("reserve_occupy_"):], None) or {}
    _, _, _, _, _, protocol = _settings(mode, trainer_config,
                                        sampler.get("max_off_policy_threshold", None),
                                        sampler.get("sampler_kwargs", None))
    train_batch = config.data.get("train_batch_size", None)
    if train_batch != protocol.batch_size:
        raise VerlIntegrationError(
            f"sampler_kwargs.batch_size={protocol.batch_size} but data.train_batch_size="
            f"{train_batch}: set them equal")


def main() -> None:
    """``python -m reserve_occupy.integrations.verl <verl's Hydra overrides>``: verl's
    ``main_ppo`` with the Reserve–Occupy task runner (docs/porting/verl.md). ``-h``/``--help``
    prints this plugin's help, exit 0. An error of this integration (a setting the protocol
    cannot follow, checked here before verl starts, or in verl's task runner) is one line on
    stderr and exit status 2, and so is a missing verl (or a module it imports); anything else
    is verl's to report."""
    import os

    if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        print(USAGE, end="")
        raise SystemExit(0)
    try:
        import hydra
        import verl.trainer
    except ModuleNotFoundError as exc:
        print(missing_module("the verl plugin", exc, "verl", PACKAGES), file=sys.stderr)
        raise SystemExit(2) from None

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")

    @hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)
    def _run(config: Any) -> None:
        try:
            _run_ppo(config)
        except Exception as exc:
            own = integration_error(exc)
            if own is None:
                raise
            print(f"error: {' '.join(str(own).split())}", file=sys.stderr)
            raise SystemExit(2) from None

    _run()


def _run_ppo(config: Any) -> None:
    check_config(config)  # before verl or Ray starts anything
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    run_ppo(config, task_runner_class=task_runner_class())


if __name__ == "__main__":
    main()
