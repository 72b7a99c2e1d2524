"""The simulator's ``trl`` policy against TRL's real data path, on the same event sequences.

The real side is trl 1.16.0's own ``AsyncGRPOTrainer.get_train_dataloader`` (unbound, on a
stand-in ``self`` with the fields it reads): ``RolloutQueueDataset`` with its drop rule,
``FixedCountBatcher`` and accelerate's ``DataLoaderDispatcher`` from ``accelerator.prepare``, fed
through a queue the test controls. Only the collator is replaced, by one that returns the sample
ids. The simulated side is ``reserve_occupy_peers.trl.Trl`` on a stand-in simulator. A seeded
script of events drives both: ``finish`` (a group, stamped with some recent version, is scored
and queued) and ``train`` (the trainer is idle and wants its next batch; when it gets one, the
version advances). Compared: when
each batch is handed out, what it holds, and which samples are dropped, in order.

``prefetch=False`` (the policy before this check: staleness checked when the batch trains) must
disagree somewhere; that is the difference the cross-check found.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict, deque
from types import SimpleNamespace

import pytest

pytest.importorskip("trl.experimental.async_grpo", reason="needs the trl extra")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import DataLoaderConfiguration  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOTrainer  # noqa: E402
from trl.experimental.async_grpo import async_grpo_trainer as trl_trainer  # noqa: E402
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample  # noqa: E402

from reserve_occupy_peers.trl import Trl  # noqa: E402

GROUPS_PER_BATCH, GROUP_SIZE = 2, 2
NEED = GROUPS_PER_BATCH * GROUP_SIZE


class _Closed(Exception):
    pass


class ScriptedQueue:
    """The rollout queue TRL's dataset drains. It tells the driver when the loader is blocked on
    it, and attributes each drop (TRL only counts them) to the sample it took before."""

    def __init__(self, metrics) -> None:
        self.items: deque = deque()
        self.cond = threading.Condition()
        self.waiting = self.closed = False
        self.metrics = metrics
        self.dropped: list[int] = []
        self._last: int | None = None
        self._drops_seen = 0

    def put(self, sample) -> None:
        with self.cond:
            self.items.append(sample)
            self.cond.notify_all()

    def settle_drops(self) -> None:
        drops = len(self.metrics["sample/dropped_stale_total"])
        if drops > self._drops_seen:  # the dataset dropped the sample it took last
            assert drops == self._drops_seen + 1
            self.dropped.append(self._last)
            self._drops_seen = drops

    def get(self, timeout=None):
        with self.cond:
            self.settle_drops()
            while not self.items:
                if self.closed:
                    raise _Closed
                self.waiting = True
                self.cond.notify_all()
                self.cond.wait()
            self.waiting = False
            sample = self.items.popleft()
            self._last = int(sample.input_ids[0])
            return sample

    def qsize(self) -> int:
        return len(self.items)


class IdCollator:
    """Replaces DataCollatorForRollout: the ids of the micro-batch's samples, as a tensor."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, examples):
        (rows,) = examples
        return {"ids": torch.tensor([[int(s["input_ids"][0]) for r in rows for s in r.samples]])}


class RealTrl:
    """TRL's real loader in a thread; ``request`` asks for the next batch like the Trainer."""

    def __init__(self, max_staleness: int, monkeypatch) -> None:
        monkeypatch.setattr(trl_trainer, "DataCollatorForRollout", IdCollator)
        metrics = defaultdict(list)
        self.queue = ScriptedQueue(metrics)
        trainer = SimpleNamespace(
            accelerator=Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
                split_batches=True, dispatch_batches=True)),  # what AsyncGRPOConfig forces
            args=SimpleNamespace(heartbeat_stale_after_s=60.0, max_staleness=max_staleness,
                                 report_to=[], token_budget=0,
                                 per_device_train_batch_size=NEED),
            rollout_queue=self.queue, rollout_worker=SimpleNamespace(check_health=lambda s: None),
            _metrics={"train": metrics}, model_version=0,
            processing_class=SimpleNamespace(pad_token_id=0), _trained_groups=set())
        self.trainer = trainer
        self.loader = AsyncGRPOTrainer.get_train_dataloader(trainer)
        self._iter = iter(self.loader)
        self._result = None
        self._want = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self._want.wait()
            self._want.clear()
            try:
                batch = next(self._iter)
            except _Closed:
                return
            with self.queue.cond:
                self._result = sorted(batch["ids"][0].tolist())
                self.queue.cond.notify_all()

    def request(self) -> None:
        self._want.set()

    def settle(self):
        """Wait until the loader handed out a batch or blocks on an empty queue."""
        q = self.queue
        with q.cond:
            ok = q.cond.wait_for(lambda: self._result is not None or (q.waiting and not q.items),
                                 timeout=30)
            assert ok, "the real loader neither answered nor blocked"
            q.settle_drops()
            batch, self._result = self._result, None
            return batch

    def finish(self, samples) -> None:
        for s in samples:
            self.queue.put(s)

    def publish(self) -> None:
        self.trainer.model_version += 1

    def close(self) -> None:
        with self.queue.cond:
            self.queue.closed = True
            self.queue.cond.notify_all()


class SimTrl:
    """The simulator's policy on a stand-in simulator."""

    def __init__(self, max_staleness: int, prefetch: bool) -> None:
        self.sim = SimpleNamespace(batch_size=GROUPS_PER_BATCH, group_size=GROUP_SIZE,
                                   version=0, dropped=[])
        self.sim.admit = lambda: None
        self.sim.drop = lambda reqs: self.sim.dropped.extend(r.tid for r in reqs)
        self.policy = Trl(max_staleness, prefetch=prefetch)
        self.policy.attach(self.sim)
        self._pending = False

    def request(self) -> None:
        self._pending = True

    def settle(self):
        if not self._pending:
            return None
        batch = self.policy.take_batch()
        if batch is None:
            return None
        self._pending = False
        return sorted(r.tid for r in batch)

    def finish(self, group) -> None:
        self.policy.on_group_done(group)

    def publish(self) -> None:
        self.sim.version += 1


def _script(seed: int, events: int = 80):
    """finish/train events; a finishing group carries a stamp up to 3 versions old."""
    rng = random.Random(seed)
    return [("train",) if rng.random() < 0.3 else ("finish", rng.randrange(4))
            for _ in range(events)]


def _drive(seed: int, max_staleness: int, prefetch: bool, monkeypatch):
    real, simulated = RealTrl(max_staleness, monkeypatch), SimTrl(max_staleness, prefetch)
    trace = {"real": [], "sim": []}
    version, pending, next_tid = 0, False, 0
    try:
        for i, event in enumerate(_script(seed)):
            if event[0] == "train":
                if pending:
                    continue  # the trainer is already waiting
                pending = True
                real.request()
                simulated.request()
            else:
                stamp = max(0, version - event[1])
                group = SimpleNamespace(v_tag=stamp, requests=[])
                samples = []
                for _ in range(GROUP_SIZE):
                    group.requests.append(SimpleNamespace(tid=next_tid, group=group))
                    samples.append(RolloutSample(
                        prompt="", completion="", input_ids=np.array([next_tid, 0]),
                        completion_mask=np.array([0, 1]), old_log_probs=np.zeros(2, np.float32),
                        advantage=0.0, model_version=stamp, group_id=next_tid // GROUP_SIZE,
                        metrics={}))
                    next_tid += 1
                real.finish(samples)
                simulated.finish(group)
            if pending:
                got = {"real": real.settle(), "sim": simulated.settle()}
                for side, batch in got.items():
                    if batch is not None:
                        trace[side].append((i, version, batch))
                if got["real"] is not None and got["sim"] is not None:
                    pending = False
                    version += 1
                    real.publish()
                    simulated.publish()
                elif (got["real"] is None) != (got["sim"] is None):
                    break  # they disagree on when the batch is ready: stop, the traces differ
    finally:
        real.close()
    return trace, real.queue.dropped, simulated.sim.dropped


SEEDS = range(12)


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_simulated_trl_decides_like_the_real_loader(max_staleness, monkeypatch):
    batches = drops = 0
    for seed in SEEDS:
        trace, real_dropped, sim_dropped = _drive(seed, max_staleness, True, monkeypatch)
        assert trace["sim"] == trace["real"], f"seed {seed}: batches differ"
        assert sim_dropped == real_dropped, f"seed {seed}: drops differ"
        batches += len(trace["real"])
        drops += len(real_dropped)
    assert batches >= 5 * len(SEEDS) and drops > 0  # the scripts exercise both decisions


def test_checking_at_train_time_is_not_what_trl_does(monkeypatch):
    differ = 0
    for seed in SEEDS:
        trace, real_dropped, sim_dropped = _drive(seed, 1, False, monkeypatch)
        differ += trace["sim"] != trace["real"] or sim_dropped != real_dropped
    assert differ > 0
