"""The NeMo-RL sampler, driven the way NeMo-RL's single-controller async loop drives a sampler.

NeMo-RL does not install from the package index, so this file holds a small driver written
from reading NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909 (nothing copied):

* ``nemo_rl/algorithms/single_controller.py``: ``_rollout_pump`` awaits ``sampler.admit`` once
  per dataloader batch, then per prompt ``_launch`` acquires the ``max_buffered_rollouts``
  semaphore, the ``max_inflight_prompts`` semaphore and waits for ``_rollout_permitted`` before
  creating the rollout task; ``_train_pump`` loops ``evict`` then ``select(min_prompt_groups=
  min(min_groups_for_streaming_train, remaining), max_prompt_groups=remaining)`` until the step
  has ``num_prompts_per_step`` groups, releasing one buffer permit per evicted or selected group
  and sleeping 5 ms when nothing is selectable; after training it increments
  ``_trainer_version`` and runs ``_sync_weights`` (clear ``_rollout_permitted``, ask
  ``should_abort_inflight`` per in-flight group, sync, ``set_weight_version``, set the event).
* ``nemo_rl/experience/rollout_manager.py`` ``generate_and_push``: reserve a buffer slot stamped
  with the rollout weight version, generate, commit with start and end weight versions.
* ``nemo_rl/algorithms/async_utils/replay_buffer.py`` ``TQReplayBuffer``: parallel lists
  ``meta_list`` / ``start_weight_list`` / ``end_weight_list`` / ``target_step_list`` /
  ``ready_list``; ``reserve`` appends an unready slot, ``commit`` marks it ready, ``remove``
  deletes indexes.

Generation is an ``asyncio.sleep`` of a scheduled length with a straggler every seventh prompt,
on simulated time (``tests/virtual_loop.py``): which group finishes before which step is the same
on every machine, loaded or not.
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid

import pytest

from reserve_occupy import Phase, UnitState
from reserve_occupy.integrations.nemo_rl import NemoSamplerError, ReserveOccupySampler
from tests import virtual_loop


class Meta:
    """The part of NeMo-RL's ``KVBatchMeta`` a sampler touches: sample ids and ``concat``."""

    def __init__(self, sample_ids, start_weights):
        self.sample_ids = list(sample_ids)
        self.start_weights = list(start_weights)  # one per group, for the staleness check

    def concat(self, *others):
        return Meta(self.sample_ids + [s for o in others for s in o.sample_ids],
                    self.start_weights + [w for o in others for w in o.start_weights])


class SlotBuffer:
    """``TQReplayBuffer``'s reserve-then-commit slot lists (no data plane)."""

    def __init__(self):
        self.meta_list, self.start_weight_list, self.end_weight_list = [], [], []
        self.target_step_list, self.ready_list, self._group_ids = [], [], []
        self.cleared = 0  # groups removed with remove_in_dp=True (evicted)

    def reserve(self, *, weight_version, target_step=None, group_id=None):
        group_id = group_id or str(uuid.uuid4())
        for lst, value in ((self.meta_list, None), (self.start_weight_list, weight_version),
                           (self.end_weight_list, -1), (self.target_step_list, target_step),
                           (self.ready_list, False), (self._group_ids, group_id)):
            lst.append(value)
        return group_id

    async def commit(self, group_id, prompt, start_weight_version, end_weight_version):
        idx = self._group_ids.index(group_id)
        self.meta_list[idx] = Meta([f"{group_id}_{prompt}_{k}" for k in range(2)],
                                   [start_weight_version])
        self.end_weight_list[idx] = end_weight_version
        self.ready_list[idx] = True

    async def remove(self, idxs, remove_in_dp):
        for i in sorted(idxs, reverse=True):
            for lst in (self.meta_list, self.start_weight_list, self.end_weight_list,
                        self.target_step_list, self.ready_list, self._group_ids):
                del lst[i]
        if remove_in_dp:
            self.cleared += len(idxs)
        return len(idxs)

    def __len__(self):
        return len(self.meta_list)


class SingleControllerDriver:
    """The two pumps and the weight sync of NeMo-RL's SC loop, around any sampler."""

    def __init__(self, sampler_factory, *, groups_per_step, steps, max_inflight=6,
                 max_buffered=64, min_groups_for_streaming_train=1, durations, resume_step=0,
                 train_s=0.004, sync_s=0.002):
        self.buffer = SlotBuffer()
        self.sampler = sampler_factory(self.buffer)
        self.sampler.set_dispatch_index(resume_step)
        required = self.sampler.required_buffer_capacity(groups_per_step)
        self.max_buffered = max(max_buffered, required or 0)
        self.b, self.steps, self.durations = groups_per_step, steps, durations
        self.max_inflight, self.min_stream = max_inflight, min_groups_for_streaming_train
        self.train_s, self.sync_s = train_s, sync_s
        self.trainer_version = self.weight_version = resume_step
        self.staleness: list[int] = []
        self.step_sizes: list[int] = []
        self.committed = 0
        self.evicted = 0
        self.chunks: list[tuple[int, bool]] = []  # (groups, handed before the batch was whole)

    async def run(self):
        self.permitted = asyncio.Event()
        self.permitted.set()
        self.capacity = asyncio.Semaphore(self.max_buffered)
        self.inflight = asyncio.Semaphore(self.max_inflight)
        rollout = asyncio.create_task(self._rollout_pump())
        try:
            await asyncio.wait_for(self._train_pump(), timeout=60)
        finally:
            rollout.cancel()
            await asyncio.gather(rollout, return_exceptions=True)

    async def _rollout_pump(self):
        prompt = 0
        async with asyncio.TaskGroup() as tasks:
            while True:
                stamp = await self.sampler.admit(trainer_version_fn=lambda: self.trainer_version)
                for _ in range(self.b):  # one dataloader batch
                    await self.capacity.acquire()
                    await self.inflight.acquire()
                    await self.permitted.wait()
                    tasks.create_task(self._generate_and_push(prompt, stamp))
                    prompt += 1

    async def _generate_and_push(self, prompt, stamp):
        try:
            start = self.weight_version
            group_id = self.buffer.reserve(weight_version=start, target_step=stamp)
            await asyncio.sleep(self.durations(prompt))
            await self.buffer.commit(group_id, prompt, start, self.weight_version)
            self.committed += 1
        finally:
            self.inflight.release()

    async def _train_pump(self):
        for _ in range(self.steps):
            version_during_step, got = self.trainer_version, 0
            while got < self.b:
                await asyncio.sleep(0)
                evicted = await self.sampler.evict(current_train_weight=self.trainer_version)
                self.evicted += evicted
                for _ in range(evicted):
                    self.capacity.release()
                remaining = self.b - got
                meta, n = await self.sampler.select(
                    current_train_weight=self.trainer_version,
                    min_prompt_groups=min(self.min_stream, remaining),
                    max_prompt_groups=remaining)
                if meta is None:
                    await asyncio.sleep(0.005)
                    continue
                for _ in range(n):
                    self.capacity.release()
                # the sampler consumes when the head is READY: IDLE means it was not yet
                self.chunks.append((n, self.sampler.controller.phase is Phase.IDLE))
                self.staleness += [version_during_step - w for w in meta.start_weights]
                got += n
            self.step_sizes.append(got)
            await asyncio.sleep(self.train_s)  # the optimizer step
            self.trainer_version += 1
            # _sync_weights
            self.permitted.clear()
            for i, ready in enumerate(self.buffer.ready_list):
                if not ready:
                    assert not self.sampler.should_abort_inflight(
                        start_weight_version=self.buffer.start_weight_list[i],
                        current_train_weight=self.trainer_version)
            await asyncio.sleep(self.sync_s)
            self.weight_version = self.trainer_version
            self.permitted.set()


def schedule(seed=0, every=7, long_s=0.12):
    rng = random.Random(seed)
    short = [rng.uniform(0.002, 0.02) for _ in range(10_000)]
    return lambda i: long_s if i % every == 3 else short[i]


def drive(eta, b=4, steps=12, streaming=False, **kw):
    driver = SingleControllerDriver(
        lambda buf: ReserveOccupySampler(buf, max_staleness=eta, groups_per_step=b,
                                         streaming=streaming),
        groups_per_step=b, steps=steps, durations=kw.pop("durations", schedule()), **kw)
    virtual_loop.run(driver.run())  # simulated time: the same run on any machine, any load
    return driver


@pytest.mark.parametrize("eta", [0, 1, 2])
def test_trained_staleness_within_eta_and_nothing_dropped(eta):
    d = drive(eta)
    assert len(d.step_sizes) == 12 and all(n == 4 for n in d.step_sizes)
    assert max(d.staleness) <= eta
    assert min(d.staleness) >= 0
    assert d.evicted == 0 and d.buffer.cleared == 0 and d.sampler.orphans == 0
    # every committed group is trained or still waits in the buffer
    assert d.committed == len(d.staleness) + sum(d.buffer.ready_list)
    d.sampler.controller.check()
    if eta:
        assert max(d.staleness) == eta  # the window is used, not just respected


def test_streaming_chunks_and_a_resumed_run():
    d = drive(1, b=4, steps=6, min_groups_for_streaming_train=2, resume_step=5)
    assert d.trainer_version == 11
    assert max(d.staleness) <= 1 and d.evicted == 0
    # The sampler publishes lazily, when a pump next calls it with the trainer's version; the
    # run may end before the rollout pump's last admit does, so make the call the next step's
    # train pump would make first.
    assert asyncio.run(d.sampler.evict(current_train_weight=d.trainer_version)) == 0
    assert d.sampler.controller.version == 6  # counted from the resume step (11 - 5)


@pytest.mark.parametrize("eta", [0, 1, 2])
@pytest.mark.parametrize("min_stream", [1, 2])
def test_streaming_selection_hands_final_groups_before_the_batch_is_whole(eta, min_stream):
    d = drive(eta, b=4, steps=12, streaming=True, min_groups_for_streaming_train=min_stream)
    assert len(d.step_sizes) == 12 and all(n == 4 for n in d.step_sizes)
    assert 0 <= min(d.staleness) and max(d.staleness) <= eta
    assert d.evicted == 0 and d.buffer.cleared == 0 and d.sampler.orphans == 0
    assert d.committed == len(d.staleness) + sum(d.buffer.ready_list)
    early = [n for n, before in d.chunks if before]
    assert early  # chunks trained while the step's stragglers still generated ...
    assert all(n >= min_stream for n in early)  # ... each as large as the pump asked
    d.sampler.controller.check()
    # the log is the run: every streamed unit was consumed in its batch, none trained twice
    events = d.sampler.controller.events
    streamed = [u.unit_id for e in events if e.op == "stream" for u in e.batch.units]
    consumed = [u for e in events if e.op == "consume" for u in e.batch.unit_ids]
    assert len(consumed) == len(set(consumed)) and set(streamed) <= set(consumed) | {
        u for u in streamed if d.sampler.controller.unit_state(u) is UnitState.STREAMED}


def test_without_streaming_no_chunk_is_handed_before_the_batch_is_whole():
    d = drive(1, b=4, steps=12, min_groups_for_streaming_train=1)
    assert d.chunks and not any(before for _, before in d.chunks)
    assert all(e.op != "stream" for e in d.sampler.controller.events)


def test_config_mismatch_and_bad_calls_are_refused():
    sampler = ReserveOccupySampler(SlotBuffer(), max_staleness=1, groups_per_step=4)
    with pytest.raises(NemoSamplerError, match="num_prompts_per_step=8"):
        sampler.required_buffer_capacity(8)
    assert sampler.required_buffer_capacity(4) == 8
    with pytest.raises(ValueError):
        asyncio.run(sampler.select(current_train_weight=0, min_prompt_groups=0,
                                   max_prompt_groups=1))
    with pytest.raises(NemoSamplerError, match="stuck_timeout_s"):
        ReserveOccupySampler(SlotBuffer(), max_staleness=1, groups_per_step=4,
                             stuck_timeout_s=0)
    # the trainer version moved without a trained batch: refused, state unchanged
    with pytest.raises(NemoSamplerError, match="whole batches"):
        asyncio.run(sampler.evict(current_train_weight=1))
    assert sampler.controller.version == 0


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_fail_safe_backs_off_then_escalates_to_units_older_than_the_previous_release():
    """After the first step every group hangs until the fail-safe escalates: the head's
    reservations are released and re-admitted (fruitless) at T, T, 2T, 4T; the fourth release
    also aborts the reservations in flight since before the third (the next buffer's), whose
    slots admission refills with groups that finish, and the run trains on. Driven directly on
    a simulated clock (one poll per tick), so every time is exact."""
    from reserve_occupy.integrations._shared import free_reservations
    from tests.integrations.stuck_checks import check_backoff, check_escalation

    b, steps, timeout, tick = 2, 6, 1.0, 0.05
    clock, buf = _Clock(), SlotBuffer()
    s = ReserveOccupySampler(buf, max_staleness=1, groups_per_step=b, stuck_timeout_s=timeout,
                             clock=clock)
    finish: dict[str, float] = {}  # group id -> when it commits
    trained, release_times, staleness = 0, [], []

    async def play():
        nonlocal trained
        version, got, prompt = 0, 0, 0
        for n in range(4000):
            clock.now = n * tick
            for gid, t in list(finish.items()):
                if t <= clock.now:
                    await buf.commit(gid, gid, buf.start_weight_list[buf._group_ids.index(gid)],
                                     version)
                    del finish[gid]
            await s.evict(current_train_weight=version)
            released = len(s.released)
            meta, k = await s.select(current_train_weight=version, min_prompt_groups=1,
                                     max_prompt_groups=b - got)
            if len(s.released) > released:
                release_times.append(clock.now)
            if meta is not None:
                staleness.extend(version - w for w in meta.start_weights)
                got += k
                if got == b:  # the step trains at once
                    trained, got, version = trained + 1, 0, version + 1
                    if trained == steps:
                        return
            await s.evict(current_train_weight=version)  # publishes a trained step
            while free_reservations(s.controller) >= b:  # the rollout pump's next batch
                await s.admit(trainer_version_fn=lambda: version)
                for _ in range(b):
                    gid = buf.reserve(weight_version=version)
                    hangs = version >= 1 and not s.escalated
                    finish[gid] = math.inf if hangs else clock.now + 0.1 + 0.01 * (prompt % 3)
                    prompt += 1

    asyncio.run(play())
    assert trained == steps and max(staleness) <= 1  # the livelock ended
    assert len(release_times) == 4 and len(s.released) == 4 * b
    check_backoff(release_times, timeout, tick)
    assert check_escalation(s.controller.events, s.escalated) == ["r6", "r7"]
    s.controller.check()
