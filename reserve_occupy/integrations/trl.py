"""Reserve–Occupy inside TRL's asynchronous GRPO trainer (``trl.experimental.async_grpo``).

Read against trl 1.16.0 (``trl/experimental/async_grpo/async_grpo_trainer.py`` and
``async_rollout_worker.py``). TRL lets two parts be replaced: the ``rollout_worker`` (what
generates and queues scored samples) and the ``weight_transfer`` (how weights reach the
generators). Its own staleness control is a drop rule: ``RolloutQueueDataset.__iter__`` discards a
sample when ``model_version - sample.model_version > max_staleness`` at the moment the sample
leaves the queue. Because accelerate's data loaders fetch the next batch before handing out the
current one, that moment is one optimizer step before the sample trains, and trained staleness
reaches ``max_staleness + 1`` (measured in ``tests/integrations/test_trl.py``).

This module hands the three decisions to the verified controller instead:

* **admission** -- ``ReserveOccupyRolloutWorker`` starts a prompt group only when
  ``reserve(group_id)`` gives it a slot, and stamps it with the live weight version;
* **placement** -- a scored group ``occupy``-s the earliest legal slot;
* **batching** -- the worker's ``rollout_buffer`` is a queue whose ``get`` serves exactly the
  controller's consumed batch, one batch per optimizer step; ``update_model_version`` (TRL calls it
  once the new weights are live on the generators) is the protocol's ``publish``.

``ReserveOccupyAsyncGRPOTrainer`` keeps TRL's trainer, loss, dataset and drop rule (which then
never fires) and changes one thing in ``get_train_dataloader``: the loader is not wrapped by
accelerate, so nothing is fetched ahead and the batch for step k is taken after step k-1's
weights were published. That is what makes the bound hold where the loss is computed. Because of
this, the trainer runs in one process (``num_processes == 1``); see docs/porting/trl.md.

Generation itself is yours: ``generate_group(group_id, row, model_version)`` returns the group's
scored ``RolloutSample``-s (one per generation), typically by calling the vLLM server TRL's default
worker would call. Versions here are TRL's: the weights live before the first sync are 0, the
first sync publishes 1, and the protocol's version is ``model_version - 1``.

Importing this module imports TRL; ``import reserve_occupy`` never does.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torch.utils.data import DataLoader
from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.async_grpo import async_grpo_trainer as _trl_trainer

from reserve_occupy import Config, Phase, StalenessController

GenerateGroup = Callable[[int, Any, int], Sequence[Any]]


class TrlSetupError(ValueError):
    """TRL and the Reserve–Occupy worker are configured inconsistently. ``field`` names the
    setting; nothing was started."""

    def __init__(self, field: str, value: object, requirement: str) -> None:
        self.field = field
        self.value = value
        self.requirement = requirement
        super().__init__(f"invalid {field}={value!r}: {requirement}")


class RolloutFailed(RuntimeError):
    """``generate_group`` raised or returned something unusable; the group was aborted."""


class ControllerQueue:
    """The worker's ``rollout_buffer``: what ``RolloutQueueDataset`` drains.

    ``get`` serves the samples of the batch the controller consumed, in batch order; when they are
    used up it asks the controller for the next READY batch, and waits if there is none (raising
    ``queue.Empty`` after ``timeout`` so TRL runs its health check, as with its own queue).
    Only the worker fills it, so it has no ``put``.
    """

    def __init__(self, worker: ReserveOccupyRolloutWorker) -> None:
        self._worker = worker

    def get(self, block: bool = True, timeout: float | None = None):
        return self._worker._next_sample(block, timeout)

    def get_nowait(self):
        return self.get(block=False)

    def qsize(self) -> int:
        """Finished samples not yet handed to the trainer."""
        return self._worker._queued_samples()


class ReserveOccupyRolloutWorker:
    """A TRL ``RolloutWorkerProtocol`` whose admission and batching the controller decides.

    ``prompts``: the dataset rows, in admission order (pass ``itertools.cycle(dataset)`` to loop
    like TRL's worker does); admission stops when they run out. ``batch_size``: prompt groups per
    optimizer step. ``max_concurrency``: groups generating at once (default: as many as the
    staleness window allows, ``(max_staleness + 1) * batch_size``); it is also the thread count
    that calls ``generate_group``.
    """

    def __init__(self, generate_group: GenerateGroup, prompts: Iterable[Any], *,
                 max_staleness: int, batch_size: int, num_generations: int,
                 max_concurrency: int | None = None) -> None:
        if not callable(generate_group):
            raise TrlSetupError("generate_group", generate_group, "must be callable")
        if (isinstance(num_generations, bool) or not isinstance(num_generations, int)
                or num_generations < 1):
            raise TrlSetupError("num_generations", num_generations, "must be an int >= 1")
        self.config = Config(max_staleness=max_staleness, batch_size=batch_size,
                             max_concurrency=max_concurrency)  # validates the protocol fields
        self.controller = StalenessController(self.config)
        self.num_generations = num_generations
        self.generate_group = generate_group
        self.rollout_buffer = ControllerQueue(self)
        self.metrics_queue: queue.Queue = queue.Queue()
        self._prompts = iter(prompts)
        # Guards everything below: the controller has one writer at a time.
        self._cond = threading.Condition()
        self._next_group = 0
        self._running: set[int] = set()  # admitted groups still generating
        self._finished: dict[int, list[Any]] = {}  # occupied groups' samples, by group id
        self._serving: deque = deque()  # the consumed batch's samples not yet handed out
        self._base_version: int | None = None  # TRL model_version of protocol version 0
        self._started = self._stopping = False
        self._failure: BaseException | None = None
        workers = max_concurrency or (max_staleness + 1) * batch_size
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ro-rollout")

    # ------------------------------------------------------------ RolloutWorkerProtocol -----

    def start(self) -> None:
        with self._cond:
            if self._base_version is None:  # TRL syncs the initial weights before start()
                self._base_version = 0
            self._started = True
            self._admit()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._cond:  # generations cut short by the end of training: abort them, logged
            for gid in sorted(self._running):
                self.controller.abort(gid)
            self._running.clear()

    def update_model_version(self, model_version: int) -> None:
        """TRL calls this after the new weights are live on the generators: ``publish``."""
        with self._cond:
            ctl = self.controller
            if self._base_version is None:  # the cold sync at train begin: nothing trained yet
                self._base_version = model_version
                return
            expected = self._base_version + ctl.version + 1
            if model_version != expected or ctl.phase is not Phase.TRAINING:
                raise TrlSetupError(
                    "model_version", model_version,
                    f"expected {expected} after one trained batch (trainer {ctl.phase.value}); "
                    "set weight_sync_steps=1 and let only the trainer publish")
            if self._serving:
                raise TrlSetupError(
                    "per_device_train_batch_size", len(self._serving),
                    "the step left samples of its batch untaken; one optimizer step must take "
                    "batch_size * num_generations samples")
            ctl.publish()
            self.metrics_queue.put_nowait({"reserve_occupy/version": float(ctl.version)})
            self._admit()
            self._cond.notify_all()

    def check_health(self, stale_after_s: float) -> None:
        with self._cond:
            if self._failure is not None:
                raise RolloutFailed("a rollout group failed") from self._failure

    # ------------------------------------------------------------ admission and placement ---

    def _live_version(self) -> int:
        return self._base_version + self.controller.version

    def _admit(self) -> None:
        """Start every group the controller has a slot for (lock held)."""
        if not self._started or self._stopping or self._failure is not None:
            return
        while True:
            gid = self._next_group
            if self.controller.reserve(gid) is None:
                return  # no legal slot: try again after the next occupy, abort or publish
            self._next_group += 1
            try:
                row = next(self._prompts)
            except StopIteration:
                self.controller.abort(gid)  # nothing left to generate
                self._started = False
                return
            self._running.add(gid)
            self._pool.submit(self._run_group, gid, row, self._live_version())

    def _run_group(self, gid: int, row: Any, model_version: int) -> None:
        try:
            samples = list(self.generate_group(gid, row, model_version))
            bad = [s for s in samples if s.model_version != model_version or s.group_id != gid]
            if len(samples) != self.num_generations or bad:
                raise RolloutFailed(
                    f"group {gid}: generate_group returned {len(samples)} samples, expected "
                    f"{self.num_generations}, each with group_id={gid} and "
                    f"model_version={model_version}")
        except BaseException as exc:  # noqa: BLE001 -- reported to the trainer, group aborted
            with self._cond:
                self._running.discard(gid)
                self.controller.abort(gid)
                if not self._stopping:
                    self._failure = exc
                self._cond.notify_all()
            return
        with self._cond:
            if self._stopping:
                return  # stop() aborts it
            self._running.discard(gid)
            placement = self.controller.occupy(gid)
            self._finished[gid] = samples
            for dropped in placement.aborted:  # only with oversampling, which is not enabled
                self._finished.pop(dropped, None)
            self._admit()
            self._cond.notify_all()

    # ------------------------------------------------------------ batching ------------------

    def _queued_samples(self) -> int:
        with self._cond:
            return len(self._serving) + sum(map(len, self._finished.values()))

    def _next_sample(self, block: bool, timeout: float | None):
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if self._failure is not None:
                    raise RolloutFailed("a rollout group failed") from self._failure
                if self._serving:
                    return self._serving.popleft()
                if self.controller.phase is Phase.IDLE:
                    batch = self.controller.consume()
                    if batch is not None:
                        for uid in batch.unit_ids:
                            self._serving.extend(self._finished.pop(uid))
                        self.metrics_queue.put_nowait({
                            "reserve_occupy/batch_staleness_max":
                                float(max(u.staleness for u in batch.units)),
                            "reserve_occupy/in_flight": float(self.controller.in_flight)})
                        continue
                left = None if deadline is None else deadline - time.monotonic()
                if not block or (left is not None and left <= 0) or self._stopping:
                    raise queue.Empty
                self._cond.wait(left)


class ReserveOccupyAsyncGRPOTrainer(AsyncGRPOTrainer):
    """TRL's ``AsyncGRPOTrainer`` with a ``ReserveOccupyRolloutWorker``: same loss, same
    weight sync, one change to the data loader (no look-ahead fetch)."""

    def __init__(self, *args, rollout_worker: ReserveOccupyRolloutWorker, **kwargs) -> None:
        if not isinstance(rollout_worker, ReserveOccupyRolloutWorker):
            raise TrlSetupError("rollout_worker", type(rollout_worker).__name__,
                                "must be a ReserveOccupyRolloutWorker")
        super().__init__(*args, rollout_worker=rollout_worker, **kwargs)
        self._check_alignment(rollout_worker)

    def _check_alignment(self, worker: ReserveOccupyRolloutWorker) -> None:
        args, cfg = self.args, worker.config
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        checks = [
            ("num_processes", self.accelerator.num_processes, 1,
             "the look-ahead-free loader runs in one process"),
            ("max_staleness", args.max_staleness, cfg.max_staleness,
             "TRL's drop rule and the controller must use the same eta"),
            ("num_generations", args.num_generations, worker.num_generations,
             "the worker's group size"),
            ("weight_sync_steps", args.weight_sync_steps, 1, "one publish per trained batch"),
            ("per_device_train_batch_size * gradient_accumulation_steps", per_step,
             cfg.batch_size * worker.num_generations,
             "one optimizer step trains exactly one controller batch"),
        ]
        for field, value, wanted, why in checks:
            if value != wanted:
                raise TrlSetupError(field, value, f"must be {wanted} ({why})")
        if args.token_budget not in (None, 0):
            raise TrlSetupError("token_budget", args.token_budget,
                                "must be 0: batches hold a fixed sample count")
        args.token_budget = 0

    def get_train_dataloader(self) -> DataLoader:
        # TRL's own dataset, drop rule included: it never fires here (every sample of a batch is
        # within eta), and keeping it means its metrics and health checks work unchanged.
        dataset = _trl_trainer.RolloutQueueDataset(
            rollout_queue=self.rollout_queue,
            model_version_fn=lambda: self.model_version,
            check_health_fn=self.rollout_worker.check_health,
            stale_after_s=self.args.heartbeat_stale_after_s,
            metrics=self._metrics["train"],
            max_staleness=self.args.max_staleness,
            report_to=self.args.report_to,
        )
        self._rollout_dataset = dataset
        planner = _trl_trainer.FixedCountBatcher(dataset, 1, self.args.per_device_train_batch_size)
        # Not accelerator.prepare(): accelerate's loaders fetch batch k+1 before yielding batch k,
        # i.e. before step k's weights are published, which is exactly what breaks the bound.
        # The Trainer moves each batch to the device in _prepare_inputs.
        return DataLoader(
            planner, batch_size=1, num_workers=0,
            collate_fn=_trl_trainer.DataCollatorForRollout(
                self.processing_class.pad_token_id, 1, groups_trained=self._trained_groups,
                metrics=self._metrics["train"], token_budget=0),
        )


__all__ = ["ControllerQueue", "ReserveOccupyAsyncGRPOTrainer", "ReserveOccupyRolloutWorker",
           "RolloutFailed", "TrlSetupError"]
