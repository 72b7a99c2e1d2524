"""Reserve–Occupy inside OpenRLHF's async trainer (``openrlhf==0.11.2``,
``openrlhf/trainer/ppo_trainer_async.py``).

OpenRLHF as shipped (``--train.async_enable``) bounds *batches in a queue*: ``PPOTrainerAsync``
makes a Ray ``Queue(maxsize=async_queue_size)`` of whole rollout batches and a counting
semaphore ``rollout_slots`` of the same size; ``GenerateSamplesActor.fit`` takes a slot token,
generates one whole batch (``SamplesGenerator.generate_samples``) and puts it in the queue;
``TrainingActor.fit`` takes a batch, returns a token and trains. Nothing bounds a trajectory's
staleness: a batch waits in the queue while the trainer moves on, and with
``--train.partial_rollout_enable`` generation runs through weight broadcasts (vLLM
``pause_generation(mode="keep")`` / ``resume_generation``), so one sample's tokens span weight
versions.

Here the verified controller replaces the queue and the semaphore:

* ``StalenessBroker`` (a Ray actor between the two; the controller lives in it) answers
  admission (``reserve``: one unit = one prompt group of ``n_samples_per_prompt`` samples),
  completion (``occupy``; ``abort`` when the engine call failed; ``filter`` when OpenRLHF's
  dynamic filtering rejects the group), batches (``consume``: ``rollout.batch_size`` groups,
  the head buffer) and ``publish``; the STUCK fail-safe is the core's rule
  (``reserve_occupy.stuck``), polled while the trainer waits.
* The generator (``GenerateSamplesActor`` subclass, ``fit`` only) admits per prompt group:
  every legal slot gets one prompt from OpenRLHF's dataloader, dispatched with OpenRLHF's own
  ``SamplesGenerator._dispatch_prompts_to_vllm``; each finished group becomes Experiences with
  ``_process_response_into_experience`` and is occupied at once (no batch barrier). Without
  partial rollout it holds OpenRLHF's ``VLLMLock`` from admission until the admitted wave has
  finished, as OpenRLHF holds it for a batch (no broadcast mid-generation: one weight version
  per sample); with partial rollout it holds the lock only while it reserves and dispatches,
  and generation runs through broadcasts. Either way a unit's ``v_traj`` is the version when
  it was reserved, never newer than any of its tokens: the bound holds on the oldest token.
* The trainer (``TrainingActor`` subclass, ``fit`` and ``broadcast_to_vllm``) trains each
  consumed batch with OpenRLHF's own ``train_step`` and publishes inside ``broadcast_to_vllm``,
  under the lock, after the weights reached vLLM (before the engines resume).
* ``ReserveOccupyPPOTrainerAsync`` takes ``PPOTrainerAsync``'s place with its constructor
  arguments. OpenRLHF has no registry for trainers: ``train_ppo_ray.train`` imports
  ``PPOTrainerAsync`` from ``openrlhf.trainer.ppo_trainer_async`` when it runs, so ``install``
  sets that module attribute; ``python -m reserve_occupy.integrations.openrlhf
  --reserve_occupy.max_staleness N <train_ppo_ray's arguments>`` does it and runs OpenRLHF's
  own command line. The two actor subclasses are the smallest that can be: OpenRLHF's actors
  have no hook for where batches come from.

OpenRLHF imports ``flash_attn`` and ``deepspeed`` at module level (GPU machines); this module
imports OpenRLHF only inside ``actor_classes`` / ``install`` / ``main``, so the broker runs
without it. The core package never imports this module.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any, Callable, Optional

from ..config import Config
from ..errors import ConfigError, ProtocolError
from ..machine import StalenessController
from ..stuck import StuckTimeouts
from ..trace import trace_records
from ..types import Phase, UnitState
from ._shared import (free_reservations, integer_setting, missing_module, own_error,
                      release_stuck, seconds_setting)

__all__ = ["OpenRLHFIntegrationError", "OpenRLHFSettingError", "StalenessBroker",
           "actor_classes", "install", "main"]

PRODUCER = "openrlhf 0.11.2 + reserve_occupy.integrations.openrlhf"
MODULE = "reserve_occupy.integrations.openrlhf"
ADMIT_LIMIT = 1 << 20  # reservations asked for at once: every legal slot


class OpenRLHFIntegrationError(ProtocolError):
    """OpenRLHF is configured or driven in a way the protocol cannot follow (names what)."""


class OpenRLHFSettingError(OpenRLHFIntegrationError, ValueError):
    """A setting has the wrong type or value; ``key`` is its command-line name."""

    def __init__(self, key: str, value: object, requirement: str) -> None:
        self.key, self.value, self.requirement = key, value, requirement
        # an option not given, or given without its value, has no value to show
        super().__init__(f"{key} {requirement}" if value is MISSING else
                         f"{key}={value!r}: {requirement}")


MISSING = object()  # an option's value when the command line does not give one


def _integer(key: str, value: object, minimum: int) -> int:
    return integer_setting(OpenRLHFSettingError, key, value, minimum)


def _seconds(key: str, value: object) -> float:
    return seconds_setting(OpenRLHFSettingError, key, value)


# ---------------------------------------------------------------- the broker ------------------

class StalenessBroker:
    """The controller between OpenRLHF's generator and trainer (run as a threaded Ray actor:
    ``reserve`` and ``consume`` block, each in its own call).

    ``max_staleness`` is eta, ``batch_size`` OpenRLHF's ``rollout.batch_size`` (prompt groups
    per step); ``stuck_timeout_s`` releases a head buffer stuck that long (default off);
    ``poll_s`` is how often a waiting ``consume`` looks at the STUCK clock."""

    def __init__(self, max_staleness: int, batch_size: int, *,
                 stuck_timeout_s: Optional[float] = None, poll_s: float = 0.05,
                 clock: Callable[[], float] = time.monotonic) -> None:
        eta = _integer("--reserve_occupy.max_staleness", max_staleness, 0)
        b = _integer("--rollout.batch_size", batch_size, 1)
        stuck = None if stuck_timeout_s is None else _seconds(
            "--reserve_occupy.stuck_timeout_s", stuck_timeout_s)
        self.poll_s = _seconds("poll_s", poll_s)
        try:
            self.config = Config(max_staleness=eta, batch_size=b)
        except ConfigError as exc:
            raise OpenRLHFSettingError("--reserve_occupy.max_staleness", max_staleness,
                                       str(exc)) from None
        self.controller = StalenessController(self.config)
        self._cv = threading.Condition()
        self._clock = clock
        self._stuck = StuckTimeouts(math.inf if stuck is None else stuck)
        self._next = 0
        self._samples: dict[str, Any] = {}  # placed unit -> its Experiences
        self._admitted_at: dict[str, float] = {}  # in-flight unit -> admission time
        self._discarded: set[str] = set()  # released / escalated: results come, are dropped
        self._closed = False
        self._client_states: dict = {}
        self.released: list[str] = []
        self.escalated: list[str] = []
        self.wait_s = 0.0

    # -------------------------------------------------------------- the generator's calls ---

    def reserve(self, limit: int, timeout: Optional[float] = None) -> list[tuple[str, int]]:
        """Reserve up to ``limit`` units, waiting up to ``timeout`` s (None: until one is
        legal or the broker is closed) for a legal slot; returns ``(unit, v_traj)`` pairs."""
        _integer("limit", limit, 0)
        deadline = None if timeout is None else self._clock() + timeout
        with self._cv:
            while not self._closed:
                free = min(limit, free_reservations(self.controller))
                if free:
                    out = []
                    for _ in range(free):
                        unit = f"u{self._next}"
                        self._next += 1
                        r = self.controller.reserve(unit)
                        if r is None:  # free_reservations() counted a legal slot
                            raise OpenRLHFIntegrationError(f"no legal slot for {unit}")
                        self._admitted_at[unit] = self._clock()
                        out.append((unit, r.v_traj))
                    return out
                left = None if deadline is None else deadline - self._clock()
                if left is not None and left <= 0:
                    return []
                self._cv.wait(self.poll_s if left is None else min(left, self.poll_s))
            return []

    def occupy(self, unit: str, samples: Any, client_states: Optional[dict] = None) -> bool:
        """The group finished: place it as early as legal. False when the fail-safe released
        it meanwhile (its samples are dropped, never trained). ``samples`` is kept as given
        (the generator passes ``[ray.put(experiences)]``: the broker never deserialises
        OpenRLHF's Experiences, the trainer fetches them from the object store)."""
        with self._cv:
            if self._gone(unit):
                return False
            self.controller.occupy(unit)
            self._admitted_at.pop(unit, None)
            self._samples[unit] = samples
            if client_states is not None:
                self._client_states = client_states
            self._cv.notify_all()
            return True

    def abort(self, unit: str) -> bool:
        """The engine call failed, or no prompt was left for the reservation: drop it."""
        with self._cv:
            if self._gone(unit):
                return False
            removal = self.controller.abort(unit)
            for u in (unit, *removal.aborted):
                self._admitted_at.pop(u, None)
                self._discarded.add(u)
            self._discarded.discard(unit)
            self._cv.notify_all()
            return True

    def filter(self, unit: str) -> bool:
        """OpenRLHF's dynamic filtering rejected the finished group: occupy, then filter
        (spec §6.3), and the slot is admitted again."""
        with self._cv:
            if self._gone(unit):
                return False
            self.controller.occupy(unit)
            self._admitted_at.pop(unit, None)
            self.controller.filter(unit)
            self._cv.notify_all()
            return True

    def gone(self, units: list[str]) -> list[str]:
        """Which of these in-flight units the fail-safe released or aborted: the generator
        stops waiting for them (their results would be dropped)."""
        with self._cv:
            return [u for u in units if u in self._discarded]

    def close(self, abandon: bool = False) -> None:
        """The dataloader is exhausted: no more admissions; ``consume`` returns None once no
        batch can become ready. ``abandon``: the generator stopped before the end (an error,
        a cancellation): its units in flight will never finish, so they are aborted (their
        results, should any come, are dropped) and ``consume`` does not wait for them."""
        with self._cv:
            self._closed = True
            if abandon:
                for unit in list(self._admitted_at):
                    if unit in self._admitted_at:  # not aborted by an earlier one's rule
                        removal = self.controller.abort(unit)
                        for u in (unit, *removal.aborted):
                            self._admitted_at.pop(u, None)
                            self._discarded.add(u)
            self._cv.notify_all()

    def _gone(self, unit: str) -> bool:
        if unit in self._discarded:
            self._discarded.discard(unit)
            return True
        if self.controller.unit_state(unit) is not UnitState.IN_FLIGHT:
            raise OpenRLHFIntegrationError(
                f"{unit} is {self.controller.unit_state(unit).value}, not in flight")
        return False

    # -------------------------------------------------------------- the trainer's calls -----

    def consume(self, timeout: Optional[float] = None) -> Optional[dict]:
        """The head batch once it is READY (waiting, with the STUCK fail-safe polled):
        ``{"version", "units": [(unit, v_traj, staleness)], "samples": [what occupy was given,
        per unit], "waited_s", "client_states"}``; None when closed and nothing is in flight
        (or after ``timeout`` s)."""
        t0 = self._clock()
        with self._cv:
            if self.controller.phase is not Phase.IDLE:
                raise OpenRLHFIntegrationError("consume while a batch trains: publish first")
            while True:
                batch = self.controller.consume()
                if batch is not None:
                    waited = self._clock() - t0
                    self.wait_s += waited
                    self._stuck.reset()
                    samples = [self._samples.pop(u) for u in batch.unit_ids]
                    return {"version": batch.version,
                            "units": [tuple(u) for u in batch.units],
                            "samples": samples, "waited_s": waited,
                            "client_states": dict(self._client_states)}
                if self._closed and not self._admitted_at:
                    return None
                if timeout is not None and self._clock() - t0 >= timeout:
                    return None
                self._maybe_release_stuck()
                self._cv.wait(self.poll_s)

    def publish(self) -> int:
        """The trained weights are live in vLLM: the window moves."""
        with self._cv:
            if self.controller.phase is not Phase.TRAINING:
                raise OpenRLHFIntegrationError(
                    "publish without a consumed batch (OpenRLHF broadcast outside train_step?)")
            v = self.controller.publish()
            self._cv.notify_all()
            return v

    def _maybe_release_stuck(self) -> None:
        done = release_stuck(self.controller, self._stuck, self._admitted_at, self._clock())
        if done is None:
            return
        self.released.extend(done.released)
        self.escalated.extend(done.escalated)
        self._discarded |= done.gone
        self._cv.notify_all()

    # -------------------------------------------------------------- reading -----------------

    def trace(self) -> list[dict]:
        """The controller's log as a trace (docs/porting/trace-format.md)."""
        with self._cv:
            return list(trace_records(self.config, self.controller.events, PRODUCER))

    def stats(self) -> dict:
        with self._cv:
            s = self.controller.snapshot()
            return {"version": self.controller.version, "in_flight": s.in_flight,
                    "closed": self._closed,
                    "untrained": len(self._samples), "released": list(self.released),
                    "escalated": list(self.escalated), "wait_s": self.wait_s}


# ---------------------------------------------------------------- OpenRLHF's actors -----------

_CLASSES: dict[str, type] = {}


def _check_args(args: Any) -> None:
    """What OpenRLHF's async mode allows but the protocol cannot follow."""
    train = args.train
    if not getattr(train, "async_enable", False):
        raise OpenRLHFIntegrationError("--train.async_enable is not set: the plugin replaces "
                                       "OpenRLHF's async trainer")
    eval_steps = getattr(args.eval, "steps", -1)
    if eval_steps not in (-1, math.inf) and getattr(args.eval, "dataset", None):
        raise OpenRLHFSettingError("--eval.steps", eval_steps,
                                   "evaluation during async training is not supported by the "
                                   "plugin yet: set -1 and evaluate a saved checkpoint")
    gen = getattr(args.rollout, "vllm_generate_batch_size", None)
    if gen not in (None, args.rollout.batch_size):
        raise OpenRLHFSettingError("--rollout.vllm_generate_batch_size", gen,
                                   "over-sampling whole batches is OpenRLHF's queue's; admission "
                                   "is per prompt group here: leave it unset")


def actor_classes() -> dict[str, type]:
    """The plain (not yet ``ray.remote``) subclasses of OpenRLHF's two async actors, defined
    once per process: ``{"generator": ..., "trainer": ...}``."""
    if _CLASSES:
        return _CLASSES
    import ray
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer
    from openrlhf.trainer.ppo_trainer_async import GenerateSamplesActor, TrainingActor
    from openrlhf.trainer.ppo_utils.samples_generator import _collect_prompt_batch
    from openrlhf.trainer.ray.vllm_engine import batch_vllm_engine_call

    class ReserveOccupyGenerator(GenerateSamplesActor.__ray_actor_class__):  # type: ignore
        """``GenerateSamplesActor`` admitting one prompt group per legal slot. Built by
        OpenRLHF's constructor with ``rollout_queue`` = the broker (``rollout_slots`` None)."""

        def fit(self, episode: int, total_consumed_prompts: int) -> None:
            """Admit, dispatch and occupy until the dataloader is exhausted. However it ends
            (an error, a cancellation), the vLLM lock is not left held and the broker is
            closed; when it did not finish, the generations it was waiting for are cancelled
            and the broker's units in flight aborted, so the trainer's ``consume`` returns
            None instead of waiting for them."""
            broker = self.rollout_queue
            self.admitted: list[tuple[str, int, str]] = []  # (unit, v_traj, prompt)
            self._ro_lock: Any = None  # our acquire call while it is sent or held: release it
            self._ro_pending: dict[Any, str] = {}  # ray ref -> unit
            finished = False
            try:
                self._ro_fit(episode, total_consumed_prompts)
                finished = True
            finally:
                try:
                    if self._ro_lock is not None:
                        # sent, perhaps not yet granted: wait for it (the holder's critical
                        # section is bounded), else the release would free the holder's lock
                        ray.get(self._ro_lock)
                        self._ro_release()
                finally:
                    if not finished:
                        for ref in self._ro_pending:
                            ray.cancel(ref)
                        self._ro_pending.clear()
                    ray.get(broker.close.remote(abandon=not finished))

        def _ro_fit(self, episode: int, total_consumed_prompts: int) -> None:
            broker, gen = self.rollout_queue, self.samples_generator
            kw = self.generate_kwargs
            lock = self.vllm_lock
            partial = self._partial_rollout
            pending = self._ro_pending
            for episode in range(episode, self.args.train.num_episodes):
                it = iter(self.prompts_dataloader)
                exhausted = False
                while True:
                    if not exhausted and (partial or not pending):
                        # admission: without partial rollout, the wave keeps the lock until
                        # its last group finished (no broadcast mid-generation)
                        self._ro_lock = lock.acquire.remote()
                        ray.get(self._ro_lock)
                        units = ray.get(broker.reserve.remote(
                            ADMIT_LIMIT,
                            0.0 if pending else 0.05))
                        for unit, v in units:
                            prompts, labels, images, done = _collect_prompt_batch(it, 1)
                            if not prompts:
                                exhausted = True
                                ray.get(broker.abort.remote(unit))
                                continue
                            total_consumed_prompts += 1
                            ref, = gen._dispatch_prompts_to_vllm(prompts, labels, images=images,
                                                                  **kw)
                            pending[ref] = unit
                            self.admitted.append((unit, v, prompts[0]))
                            exhausted = exhausted or done
                        if partial or not pending:
                            self._ro_release()
                    if not pending:
                        if exhausted:
                            break
                        continue
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.05)
                    if not ready:  # released by the fail-safe: stop waiting for them
                        gone = set(ray.get(broker.gone.remote(list(pending.values()))))
                        for ref in [r for r, u in pending.items() if u in gone]:
                            del pending[ref]
                            ray.cancel(ref)
                    for ref in ready:
                        unit = pending.pop(ref)
                        self._complete(broker, unit, ref, episode, total_consumed_prompts)
                    if self._ro_lock is not None and not pending:
                        self._ro_release()

        def _ro_release(self) -> None:
            """Release the vLLM lock this generator holds, once: the call is sent before
            ``_ro_lock`` is cleared (a second release would fail in the lock)."""
            ref = self.vllm_lock.release.remote()
            self._ro_lock = None
            ray.get(ref)

        def _complete(self, broker, unit, ref, episode, total_consumed_prompts) -> None:
            gen = self.samples_generator
            try:
                experiences = [gen._process_response_into_experience(r, **self.generate_kwargs)
                               for r in ray.get(ref)]
            except Exception:  # the engine call failed: the slot is admitted again
                ray.get(broker.abort.remote(unit))
                return
            algo = self.args.algo
            if algo.dynamic_filtering_enable and all(e.scores is not None for e in experiences):
                scores = [e.scores[0].item() for e in experiences]
                lo, hi = algo.dynamic_filtering_range
                if not lo < sum(scores) / len(scores) < hi:  # OpenRLHF's own test
                    ray.get(broker.filter.remote(unit))
                    return
            states = {"episode": episode, "total_consumed_prompts": total_consumed_prompts,
                      "data_loader_state_dict": self.prompts_dataloader.state_dict()}
            ray.get(broker.occupy.remote(unit, [ray.put(experiences)], states))

    class ReserveOccupyTrainer(TrainingActor.__ray_actor_class__):  # type: ignore
        """``TrainingActor`` training the broker's batches and publishing after each weight
        broadcast. Built by OpenRLHF's constructor with ``rollout_queue`` = the broker."""

        def fit(self, global_step: int = 0) -> None:
            broker = self.rollout_queue
            self.trained: list[dict] = []
            self._ro_publish = False
            while True:
                t0 = time.time()
                batch = ray.get(broker.consume.remote())
                if batch is None:
                    break
                self._ro_publish = True
                groups = ray.get([ref for ref, in batch["samples"]])
                samples = [e for group in groups for e in group]
                status, global_step = self.train_step(samples, global_step)
                if self._ro_publish:  # no vLLM engines: nothing to broadcast
                    ray.get(broker.publish.remote())
                    self._ro_publish = False
                stale = [s for _, _, s in batch["units"]]
                status["reserve_occupy/staleness_max"] = max(stale)
                status["reserve_occupy/staleness_mean"] = sum(stale) / len(stale)
                status["reserve_occupy/wait_s"] = batch["waited_s"]
                status["timing/step_total"] = time.time() - t0
                self.trained.append({k: batch[k] for k in ("version", "units", "waited_s")})
                states = dict(batch["client_states"], global_step=global_step)
                self.save_logs_and_checkpoints(global_step, status, states)
            if self.wandb_logger:
                self.wandb_logger.close()
            if self.tensorboard_logger:
                self.tensorboard_logger.close()

        def broadcast_to_vllm(self) -> None:
            """OpenRLHF's (lock; pause with partial rollout; broadcast; resume; unlock), with
            ``publish`` after the broadcast and before the resume."""
            ray.get(self.vllm_lock.acquire.remote())
            try:
                if self._partial_rollout:
                    batch_vllm_engine_call(self.vllm_engines, "pause_generation")
                try:
                    BasePPOTrainer.broadcast_to_vllm(self)
                    if getattr(self, "_ro_publish", False):
                        ray.get(self.rollout_queue.publish.remote())
                        self._ro_publish = False
                finally:
                    if self._partial_rollout:
                        batch_vllm_engine_call(self.vllm_engines, "resume_generation")
            finally:
                ray.get(self.vllm_lock.release.remote())

    _CLASSES.update(generator=ReserveOccupyGenerator, trainer=ReserveOccupyTrainer)
    return _CLASSES


# Settings for the trainer that ``install`` puts in OpenRLHF's place (the command line's).
_SETTINGS: dict[str, Any] = {}


class ReserveOccupyPPOTrainerAsync:
    """``PPOTrainerAsync``'s place: ``.remote(...)`` with its arguments builds the broker and
    the two actors and returns a handle with ``fit`` and ``get_max_steps`` (what
    ``train_ppo_ray.train`` calls)."""

    @classmethod
    def remote(cls, pretrain, strategy, actor_model_group, critic_model_group,
               reward_model_group, reference_model_group, vllm_engines, **generate_kwargs):
        import ray
        from openrlhf.trainer.ppo_trainer_async import VLLMLock

        args = strategy.args
        _check_args(args)
        if args.eval.steps == -1:
            args.eval.steps = float("inf")
        if args.ckpt.save_steps == -1:
            args.ckpt.save_steps = float("inf")
        broker = ray.remote(StalenessBroker).options(max_concurrency=16).remote(
            _SETTINGS["max_staleness"], args.rollout.batch_size,
            stuck_timeout_s=_SETTINGS.get("stuck_timeout_s"))
        lock = VLLMLock.remote()
        classes = actor_classes()
        gen = ray.remote(classes["generator"]).remote(
            pretrain=pretrain, strategy=strategy, vllm_engines=vllm_engines, vllm_lock=lock,
            rollout_queue=broker, rollout_slots=None, **generate_kwargs)
        trainer = ray.remote(classes["trainer"]).remote(
            pretrain=pretrain, strategy=strategy, actor_model_group=actor_model_group,
            critic_model_group=critic_model_group, reward_model_group=reward_model_group,
            reference_model_group=reference_model_group, vllm_engines=vllm_engines,
            vllm_lock=lock, rollout_queue=broker, rollout_slots=None)
        return _Handle(broker, gen, trainer)


class _Remote:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn

    def remote(self) -> Any:
        import ray

        return ray.put(self._fn())


class _Handle:
    """What ``train_ppo_ray.train`` does with the trainer: ``get_max_steps`` and ``fit``."""

    def __init__(self, broker: Any, gen: Any, trainer: Any) -> None:
        self.broker, self.generator_actor, self.trainer_actor = broker, gen, trainer
        self.get_max_steps = _Remote(self._max_steps)
        self.fit = _Remote(self._fit)

    def _max_steps(self) -> Any:
        import ray

        return ray.get(self.generator_actor.get_max_steps.remote())

    def _fit(self) -> None:
        import ray

        states = ray.get(self.trainer_actor.init_checkpoint_states.remote())
        if states["global_step"] > 0:
            raise OpenRLHFIntegrationError(
                "resuming an async run from a checkpoint is not supported by the plugin yet "
                "(its in-flight groups have no reservation): start a new run")
        ray.get([self.generator_actor.fit.remote(episode=states["episode"],
                                                 total_consumed_prompts=0),
                 self.trainer_actor.fit.remote(global_step=0)])


def install(max_staleness: int, stuck_timeout_s: Optional[float] = None) -> None:
    """Put ``ReserveOccupyPPOTrainerAsync`` where ``train_ppo_ray.train`` imports
    ``PPOTrainerAsync`` from (``openrlhf.trainer.ppo_trainer_async``)."""
    _max_staleness(max_staleness)
    if stuck_timeout_s is not None:
        _seconds("--reserve_occupy.stuck_timeout_s", stuck_timeout_s)
    import openrlhf.trainer.ppo_trainer_async as upstream

    _SETTINGS.update(max_staleness=max_staleness, stuck_timeout_s=stuck_timeout_s)
    upstream.PPOTrainerAsync = ReserveOccupyPPOTrainerAsync  # type: ignore[assignment]


def _max_staleness(value: object) -> int:
    """eta as the controller takes it (an integer 0..``MAX_STALENESS``), checked when the
    command line is read, before OpenRLHF or Ray starts."""
    from ..config import MAX_STALENESS

    eta = _integer("--reserve_occupy.max_staleness", value, 0)
    if eta > MAX_STALENESS:
        raise OpenRLHFSettingError("--reserve_occupy.max_staleness", value,
                                   f"must be <= {MAX_STALENESS}")
    return eta


USAGE = """\
usage: python -m reserve_occupy.integrations.openrlhf --reserve_occupy.max_staleness N
         [--reserve_occupy.stuck_timeout_s S] --train.async_enable ARGS...

OpenRLHF's own command line (openrlhf.cli.train_ppo_ray) with the Reserve-Occupy trainer in
place of its async trainer (docs/porting/openrlhf.md). ARGS are train_ppo_ray's arguments
(python -m openrlhf.cli.train_ppo_ray --help lists them); --train.async_enable is required.

options of this plugin (checked before OpenRLHF starts; a bad one is one line, exit 2):
  --reserve_occupy.max_staleness N     eta, an integer 0..1024 (required): a trained group is
                                       at most eta weight versions older than its batch
  --reserve_occupy.stuck_timeout_s S   optional, seconds (finite, > 0): release a head batch
                                       stuck that long on groups that never finish
  -h, --help                           show this help and exit
"""

# what to install when OpenRLHF, or a module it imports, is missing (pyproject.toml, Makefile)
PACKAGES = {
    "openrlhf": "install OpenRLHF with pip install --no-deps openrlhf==0.11.2 and its CPU "
                "imports with pip install 'reserve-occupy[openrlhf]'",
    "flash_attn": "OpenRLHF imports it at module level: install flash-attn (a GPU package, "
                  "pip install flash-attn) next to pip install 'reserve-occupy[openrlhf]'",
    "deepspeed": "OpenRLHF imports it at module level: install deepspeed (pip install "
                 "deepspeed) next to pip install 'reserve-occupy[openrlhf]'",
}


def parse_own_args(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Split ``--reserve_occupy.*`` options off OpenRLHF's command line."""
    own: dict[str, Any] = {}
    own_seen: set[str] = set()
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if not arg.startswith("--reserve_occupy."):
            rest.append(arg)
            continue
        key, eq, value = arg.partition("=")
        if not eq:
            value = next(it, None)
            if value is None:
                raise OpenRLHFSettingError(key, MISSING, "needs a value")
        name = key[len("--reserve_occupy."):]
        kinds = {"max_staleness": int, "stuck_timeout_s": float}
        if name not in kinds:
            raise OpenRLHFSettingError(key, value, "unknown option (max_staleness, "
                                                   "stuck_timeout_s)")
        try:
            own[name] = kinds[name](value)
        except ValueError:
            raise OpenRLHFSettingError(key, value, "not a number") from None
        if name in own_seen:
            raise OpenRLHFSettingError(key, value, "given twice")
        own_seen.add(name)
    if "max_staleness" not in own:
        raise OpenRLHFSettingError("--reserve_occupy.max_staleness", MISSING,
                                   "is required (eta, an integer 0..1024)")
    _max_staleness(own["max_staleness"])
    if "stuck_timeout_s" in own:
        _seconds("--reserve_occupy.stuck_timeout_s", own["stuck_timeout_s"])
    if "--train.async_enable" not in rest:
        raise OpenRLHFIntegrationError("--train.async_enable is not set: the plugin replaces "
                                       "OpenRLHF's async trainer")
    return own, rest


def main(argv: Optional[list[str]] = None) -> None:
    """``python -m reserve_occupy.integrations.openrlhf --reserve_occupy.max_staleness N
    <openrlhf.cli.train_ppo_ray's arguments>``: OpenRLHF's own command line with the
    Reserve–Occupy trainer. An error of this plugin (its options, or a setting it refuses when
    the trainer is built, here or in an actor) is one line on stderr and exit 2; anything else
    is OpenRLHF's to report."""
    import runpy

    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(USAGE, end="")
        raise SystemExit(0)
    try:
        own, rest = parse_own_args(argv)
        install(**own)
    except OpenRLHFIntegrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except ModuleNotFoundError as exc:  # OpenRLHF, or flash_attn/deepspeed it imports
        print(missing_module("the OpenRLHF plugin", exc, "openrlhf", PACKAGES), file=sys.stderr)
        raise SystemExit(2) from None
    sys.argv = ["openrlhf.cli.train_ppo_ray", *rest]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
    except ModuleNotFoundError as exc:
        print(missing_module("the OpenRLHF plugin", exc, "openrlhf", PACKAGES), file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as exc:
        own = integration_error(exc)
        if own is None:
            raise
        print(f"error: {' '.join(str(own).split())}", file=sys.stderr)
        raise SystemExit(2) from None


def integration_error(exc: BaseException) -> Optional[OpenRLHFIntegrationError]:
    """This module's own error behind ``exc``: itself, what it was raised from, or the
    ``cause`` of a Ray task error (raised in the broker or an actor)."""
    return own_error(exc, OpenRLHFIntegrationError)


if __name__ == "__main__":
    main()
