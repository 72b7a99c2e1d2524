"""TRL's experimental async GRPO trainer.

Source: huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8,
``trl/experimental/async_grpo/async_rollout_worker.py`` (``_generate_loop``: keep
``max_inflight_tasks`` completions in flight; a group is stamped with the worker's model version
when its first completion is created; its rows are queued once the whole group is scored),
``async_grpo_trainer.py`` (``RolloutQueueDataset.__iter__``: FIFO dequeue, drop each *sample*
with ``model_version - sample.model_version > max_staleness``; auto ``max_inflight_tasks`` =
``max_staleness * samples_per_step``) and ``async_grpo_config.py`` (``max_staleness`` default 4,
``queue_maxsize`` 1024, ``weight_sync_steps`` 1). Cross-checked against trl 1.16.0 from PyPI
(below).

* L1: admit while fewer than ``max_inflight_tasks`` completions are in flight (and the finished
  queue is below ``queue_maxsize``). TRL creates completions one at a time from an iterator that
  yields each prompt ``group_size`` times; here a group is admitted whole as soon as one task
  slot is free, so in-flight completions can exceed the cap by at most ``group_size - 1``.
* L2: none (vLLM pauses with its KV cache kept; here, as for every policy, in-flight requests
  pause for the sync and resume with their tokens, re-prefilling them).
* L3: the trainer dequeues samples FIFO and drops each one whose version lags by more than
  ``max_staleness``, until it has ``batch_size * group_size`` samples (a fixed-count batch, as
  with ``FixedCountBatcher``; the default token-budget batcher would vary the batch size).
  The check runs at *dequeue* time, and the data loader dequeues one batch ahead: accelerate's
  ``DataLoaderDispatcher.__iter__`` fetches batch k+1 before it hands out batch k, so step k
  starts only once batch k+1 is full, and batch k+1 is checked against the version live while
  step k trains (the first two batches both against version 0). A sample that passed at
  ``max_staleness`` therefore trains at ``max_staleness + 1``: the bound this policy enforces on
  trained data (``self.eta``). Checked against trl 1.16.0's real ``RolloutQueueDataset`` behind
  accelerate's loader in tests/integrations/test_trl_upstream.py, and measured in
  ``compute_loss`` in tests/integrations/test_trl.py. ``prefetch=False`` gives the check at
  train time (this module's behaviour before that cross-check). With gradient accumulation only
  the first micro-batch of the next step is fetched ahead; this model fetches one whole step,
  as with ``gradient_accumulation_steps=1``.

Reward filtering: TRL's async GRPO has no filter. ``_score_group`` (async_rollout_worker.py)
normalises rewards within the group, ``(r - mean) / (std + 1e-8)``, so a group with equal rewards
gets zero advantage and its rows are queued and trained like any other (trained without gradient).

Alignment: ``max_staleness = eta`` (TRL's default is 4), as a TRL user sets it and as the source
compared it, so TRL trains up to ``eta + 1`` (pass ``max_staleness = eta - 1`` for a trained
bound of eta). The in-flight cap scales with ``max_staleness`` as TRL's auto setting does (the
source: "TRL's L1 admission grows with the staleness setting").
"""

from __future__ import annotations

from collections import deque

from .api import Group, Policy, Trajectory


class Trl(Policy):
    name = "trl"
    label = "TRL"
    source = "huggingface/trl@f2cd5771 trl/experimental/async_grpo/async_grpo_trainer.py"
    # Not bounded at eta: what passed the dequeue check at max_staleness trains one version later
    # (see L3). ``self.eta`` holds the bound trained data does obey, max_staleness + 1.
    bounded = False
    filters = False

    def __init__(self, eta: int, max_inflight_tasks: int | None = None,
                 queue_maxsize: int = 1024, max_staleness: int | None = None,
                 prefetch: bool = True) -> None:
        super().__init__(eta)
        self.max_staleness = eta if max_staleness is None else max_staleness
        if (isinstance(self.max_staleness, bool) or not isinstance(self.max_staleness, int)
                or self.max_staleness < 0):
            raise ValueError(f"trl: max_staleness must be an int >= 0, got {max_staleness!r}")
        self.prefetch = prefetch
        # What trained data obeys: the check runs one step before the sample trains.
        self.eta = self.max_staleness + (1 if prefetch else 0)
        self.max_inflight_tasks = max_inflight_tasks
        self.queue_maxsize = queue_maxsize

    def attach(self, sim) -> None:
        super().attach(sim)
        if self.max_inflight_tasks is None:
            # max_staleness * per_device_train_batch_size * grad_accum * num_processes; TRL
            # needs max_staleness >= 1 for it to be positive, so eta = 0 keeps one step's worth.
            self.max_inflight_tasks = max(self.max_staleness, 1) * self.batch_size * self.group_size
        self._inflight = 0  # completions created and not finished
        self._queue: deque[Trajectory] = deque()  # rollout_buffer: scored samples, FIFO
        self._batch: list[Trajectory] = []  # samples the trainer already dequeued for this step
        self._next: list[Trajectory] = []  # ... and for the next step (the loader's look-ahead)

    def admit(self) -> None:
        sim = self.sim
        while self._inflight < self.max_inflight_tasks and len(self._queue) < self.queue_maxsize:
            sim.admit()  # model_version stamped when the group's first completion is created
            self._inflight += self.group_size

    def on_group_done(self, group: Group) -> None:
        self._inflight -= self.group_size
        self._queue.extend(group.requests)

    def _dequeue(self, batch: list[Trajectory], version: int, stale: list[Trajectory]) -> None:
        """RolloutQueueDataset.__iter__: FIFO, drop a sample older than max_staleness *now*."""
        need, queue = self.batch_size * self.group_size, self._queue
        while len(batch) < need and queue:
            sample = queue.popleft()
            if version - sample.group.v_tag > self.max_staleness:  # type: ignore[union-attr]
                stale.append(sample)
            else:
                batch.append(sample)

    def take_batch(self):
        sim, need = self.sim, self.batch_size * self.group_size
        stale: list[Trajectory] = []
        self._dequeue(self._batch, sim.version, stale)  # only the first step: later it is full
        if self.prefetch and len(self._batch) == need:
            self._dequeue(self._next, sim.version, stale)  # fetched before this step trains
        if stale:
            sim.drop(stale)
        if len(self._batch) < need or (self.prefetch and len(self._next) < need):
            return None
        batch, self._batch, self._next = self._batch, self._next, []
        return batch

    def settings(self) -> dict:
        return {"eta": self.eta, "max_staleness": self.max_staleness, "prefetch": self.prefetch,
                "max_inflight_tasks": self.max_inflight_tasks, "queue_maxsize": self.queue_maxsize,
                "unit of L3": "sample (trajectory)"}

    def describe_state(self) -> str:
        return (f"inflight={self._inflight} queue={len(self._queue)} batch={len(self._batch)} "
                f"next={len(self._next)}")
