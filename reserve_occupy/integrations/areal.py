"""Reserve–Occupy inside AReaL: a per-trajectory staleness bound for AReaL's rollout dispatcher.

AReaL (``areal==1.0.4``, ``areal/infra/staleness_manager.py``) bounds *counts*: it submits while
``accepted + running < (max_head_offpolicyness + version + 1) * consumer_batch_size`` and the
trainer takes the ``consumer_batch_size`` finished results created earliest
(``BatchTaskDispatcher.wait_results``). A rollout that straggles is not waited for: it trains
whenever it finishes, at any age (measured in tests/integrations/test_areal.py: staleness 2 and
more at ``max_head_offpolicyness=1``).

This module puts the verified controller in charge of the three decisions that fix that:

* **admission** (``reserve``): ``get_capacity`` answers how many reservations the controller
  has a legal slot for, and the dispatcher's task factory reserves the rollout under its AReaL
  ``task_id`` just before the task starts (the dispatcher's single producer thread calls the two
  back to back, so the answer holds);
* **completion** (``occupy`` / ``abort``): the task's coroutine occupies its slot when the
  workflow returns an accepted trajectory, and aborts its reservation when the workflow returned
  ``None``, was rejected by ``should_accept_fn`` or raised;
* **batching** (``consume`` / ``publish``): the dispatcher's ``wait_results`` returns exactly the
  controller's head batch, waiting for a straggler instead of passing it over. ``publish`` is
  read off the version provider (``set_version`` after the weight update), so the training loop
  does not change.

``ReserveOccupyStalenessManager`` keeps AReaL's ``StalenessManager`` interface
(``get_capacity``, ``get_pending_limit``, ``on_rollout_enqueued/submitted/accepted/rejected``,
``on_version_recovered``, ``get_stats``) so that every AReaL call site keeps working. AReaL's
``WorkflowExecutor``, ``RemoteInfEngine.initialize`` and ``RolloutController.initialize`` build
their own manager and dispatcher; ``install(owner)`` swaps ours in after ``initialize()`` and
before the first ``submit`` (docs/porting/areal.md shows where). AReaL is imported lazily; the
core package never imports it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ..config import Config
from ..errors import IllegalOperation, ProtocolError
from ..machine import StalenessController
from ..types import Batch, BufferStatus, Phase, SlotState

__all__ = ["AReaLIntegrationError", "ReserveOccupyStalenessManager", "install"]


class AReaLIntegrationError(ProtocolError):
    """The AReaL objects are not in a state the controller can take over (names what)."""


class ReserveOccupyStalenessManager:
    """AReaL's ``StalenessManager`` interface with Reserve–Occupy making the decisions.

    ``version_provider`` is AReaL's (``get_version()``: the weight version the rollout engines
    serve). ``max_concurrent_rollouts``, ``consumer_batch_size`` and ``max_staleness`` mean
    what they mean to AReaL; ``max_staleness`` becomes the controller's eta and the batch size
    its B. Versions are counted from the provider's version when this manager is created (a
    recovered run starts at its checkpoint's version).
    """

    def __init__(self, version_provider: Any, max_concurrent_rollouts: int | None,
                 consumer_batch_size: int, max_staleness: int) -> None:
        if not callable(getattr(version_provider, "get_version", None)):
            raise AReaLIntegrationError(
                f"version_provider must have get_version(), got {type(version_provider).__name__}")
        concurrency = None if max_concurrent_rollouts is None else max(1, max_concurrent_rollouts)
        self.config = Config(max_staleness=max_staleness, batch_size=consumer_batch_size,
                             max_concurrency=concurrency)
        self.controller = StalenessController(self.config)
        self.version_provider = version_provider
        # AReaL's attribute names, read by its logging and by code that sizes queues from them
        self.max_concurrent_rollouts = concurrency
        self.consumer_batch_size = consumer_batch_size
        self.max_staleness = max_staleness
        self.lock = threading.RLock()  # producer thread, event-loop thread and trainer share it
        self._offset = int(version_provider.get_version())
        self._stat = {"enqueued": 0, "running": 0, "accepted": 0, "rejected": 0}
        self._batch: Batch | None = None  # consumed, its results not yet handed to the trainer
        self.trained: list[Batch] = []  # every batch handed out, for metrics and tests

    # ------------------------------------------------------------ AReaL's interface ----------

    def get_pending_limit(self) -> int:
        """How many inputs ``prepare_batch`` keeps queued: AReaL's own value."""
        return (self.max_staleness + 1) * self.consumer_batch_size

    def get_capacity(self) -> int:
        """Reservations the controller has a legal slot for now (0: the dispatcher waits)."""
        with self.lock:
            self._sync_version()
            return self._free_reservations()

    def on_version_recovered(self, version: int) -> None:
        """A checkpoint was loaded: count versions from ``version`` (before any rollout)."""
        with self.lock:
            if self.controller.event_count:
                raise AReaLIntegrationError(
                    f"on_version_recovered({version}) after {self.controller.event_count} "
                    f"controller events: recover before the first rollout")
            self._offset = int(version)

    def on_rollout_enqueued(self) -> None:
        with self.lock:
            self._stat["enqueued"] += 1

    def on_rollout_submitted(self) -> None:
        with self.lock:
            self._stat["enqueued"] -= 1
            self._stat["running"] += 1

    def on_rollout_accepted(self) -> None:
        with self.lock:
            self._stat["running"] -= 1
            self._stat["accepted"] += 1

    def on_rollout_rejected(self) -> None:
        with self.lock:
            self._stat["running"] -= 1
            self._stat["rejected"] += 1

    def get_stats(self):
        from areal.api import RolloutStat

        with self.lock:
            return RolloutStat(**self._stat)

    # ------------------------------------------------------------ protocol calls -------------

    def reserve(self, task_id: int) -> bool:
        """Admission of AReaL task ``task_id``; False: no legal slot (the task must wait)."""
        with self.lock:
            self._sync_version()
            return self.controller.reserve(task_id) is not None

    def finished(self, task_id: int, accepted: bool) -> None:
        """The task's workflow returned: occupy its slot, or abort it if it produced nothing."""
        with self.lock:
            if accepted:
                self.controller.occupy(task_id)
            else:
                self.controller.abort(task_id)

    def next_batch(self) -> Batch | None:
        """The controller's head batch if it is READY (consumed once, kept until handed out)."""
        with self.lock:
            if self._batch is not None:
                return self._batch
            self._sync_version()
            if self.controller.phase is Phase.TRAINING:
                raise IllegalOperation(
                    "consume (the previous batch's weights are not published: call "
                    "set_version() on the rollout engine after the weight update)",
                    Phase.TRAINING.value)
            self._batch = self.controller.consume()
            return self._batch

    def handed_out(self) -> None:
        with self.lock:
            self.trained.append(self._batch)  # type: ignore[arg-type]
            self._batch = None

    # ------------------------------------------------------------ internals ------------------

    def _sync_version(self) -> None:
        """Publish once per version the provider moved past the controller (weights are live)."""
        target = int(self.version_provider.get_version()) - self._offset
        ctl = self.controller
        while ctl.version < target:
            if ctl.phase is not Phase.TRAINING:
                raise AReaLIntegrationError(
                    f"the rollout version moved to {target + self._offset} but only "
                    f"{ctl.version} batches were consumed: versions must advance once per "
                    f"trained batch")
            ctl.publish()

    def _free_reservations(self) -> int:
        """How many reserve() calls in a row would succeed: EMPTY slots of legal, not-READY
        buffers (a reservation never makes a buffer READY), capped by the concurrency limit."""
        ctl = self.controller
        snap = ctl.snapshot()
        top = ctl.version + self.max_staleness
        free = sum(sum(1 for state, _ in b.slots if state is SlotState.EMPTY)
                   for b in snap.buffers
                   if b.v_buffer <= top and b.status is not BufferStatus.READY)
        if self.max_concurrent_rollouts is not None:
            free = min(free, self.max_concurrent_rollouts - ctl.in_flight)
        return max(0, free)

    # ------------------------------------------------------------ the dispatcher seam --------

    def attach(self, dispatcher: Any) -> None:
        """Take over an AReaL ``BatchTaskDispatcher``: its manager, task factory and
        ``wait_results``. Call before anything was submitted to it."""
        if getattr(dispatcher, "_pending_inputs", None) or getattr(dispatcher, "_active_task_ids",
                                                                    None):
            raise AReaLIntegrationError(
                "the dispatcher already has submitted tasks: install Reserve–Occupy right "
                "after initialize(), before the first submit")
        dispatcher.staleness_manager = self
        dispatcher.task_factory = self._wrap_task_factory(dispatcher.task_factory)
        dispatcher.wait_results = _BatchWaiter(self, dispatcher)

    def _wrap_task_factory(self, make_task: Callable[[Any], Callable]) -> Callable:
        manager = self

        def reserve_then_make(task_input: Any):
            task_id = task_input.task_id
            if getattr(task_input, "is_eval", False):
                return make_task(task_input)  # evaluation rollouts are never trained
            run = make_task(task_input)
            if not manager.reserve(task_id):
                # get_capacity() said yes a moment ago in this same producer thread; only a
                # caller that submits past the dispatcher can get here
                raise AReaLIntegrationError(
                    f"task {task_id} was submitted without a legal slot (get_capacity() == 0)")

            async def run_and_report():
                try:
                    result = await run()
                except BaseException:
                    manager.finished(task_id, accepted=False)
                    raise
                manager.finished(task_id, accepted=result is not None)
                return result

            return run_and_report

        return reserve_then_make


class _BatchWaiter:
    """``BatchTaskDispatcher.wait_results`` replaced: return the controller's head batch.

    Works on the dispatcher's result table the way AReaL's own ``wait_results`` does (areal
    1.0.4: ``_pending_results``, ``_active_task_ids`` under ``_result_cv``). Results of aborted
    tasks (``None``: rejected or failed) are dropped from the table; they hold no slot.
    """

    def __init__(self, manager: ReserveOccupyStalenessManager, dispatcher: Any) -> None:
        self.manager = manager
        self.dispatcher = dispatcher

    def __call__(self, count: int, timeout: float | None = None,
                 raise_timeout: bool = True) -> list:
        manager, d = self.manager, self.dispatcher
        if count != manager.consumer_batch_size:
            raise ValueError(
                f"wait_results(count={count}): under Reserve–Occupy a batch is exactly "
                f"consumer_batch_size={manager.consumer_batch_size} results (set the "
                f"dataloader's batch size to it)")
        deadline = time.perf_counter() + (7 * 24 * 3600.0 if timeout is None else timeout)
        with d._result_cv:
            while True:
                d._check_thread_exception()
                self._drop_rejected()
                batch = manager.next_batch()
                if batch is not None and all(u in d._pending_results for u in batch.unit_ids):
                    results = [d._pending_results.pop(u) for u in batch.unit_ids]
                    for u in batch.unit_ids:
                        d._active_task_ids.discard(u)
                    manager.handed_out()
                    d._result_cv.notify_all()
                    return [r.data for r in results]
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    if raise_timeout:
                        raise TimeoutError(
                            f"Timed out waiting for the head batch ({count} results)")
                    return []
                # results arrive through the fetch thread, which notifies this condition; the
                # short cap also re-reads the version provider (set_version notifies nobody)
                d._result_cv.wait(timeout=min(remaining, 0.05))

    def _drop_rejected(self) -> None:
        d = self.dispatcher
        for task_id in [t for t, r in d._pending_results.items() if r.data is None]:
            del d._pending_results[task_id]
            d._active_task_ids.discard(task_id)


def install(owner: Any, manager: ReserveOccupyStalenessManager | None = None
            ) -> ReserveOccupyStalenessManager:
    """Put Reserve–Occupy in charge of an initialized AReaL rollout owner.

    ``owner`` is a ``WorkflowExecutor``, a ``RemoteInfEngine`` (its workflow executor is used),
    a ``RolloutController`` or a ``RolloutControllerV2``, after ``initialize()`` and before the
    first ``submit`` /
    ``prepare_batch``. Without ``manager``, one is built from the manager AReaL made (so its
    data-parallel scaling of ``max_concurrent_rollouts`` and ``consumer_batch_size`` is kept).
    Returns the manager in charge.
    """
    # RemoteInfEngine and RolloutControllerV2 hold a WorkflowExecutor; RolloutController and a
    # bare WorkflowExecutor hold the dispatcher themselves
    executor = getattr(owner, "_workflow_executor", None) or owner
    dispatcher = getattr(executor, "_dispatcher", None)
    old = getattr(executor, "_staleness_manager", None)
    if dispatcher is None or old is None:
        raise AReaLIntegrationError(
            f"{type(owner).__name__} has no dispatcher yet: call initialize() first")
    if manager is None:
        manager = ReserveOccupyStalenessManager(
            old.version_provider, old.max_concurrent_rollouts, old.consumer_batch_size,
            old.max_staleness)
    manager.attach(dispatcher)
    # the task coroutines report through these attributes, the trainer's recovery reads them
    for holder in (executor, owner):
        if hasattr(holder, "_staleness_manager"):
            holder._staleness_manager = manager
    return manager
