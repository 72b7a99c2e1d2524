"""The simulator's verl baseline against verl's own replay buffer (verl==0.9.1), call for call.

A simulated run of the ``verl_drop`` policy asks verl's real ``ReplayBufferAsync.sample`` the
same question every time the policy samples a mini-batch: the same global step, the same
prompts in flight and the same finished groups with their step tags (and, with reward
filtering, rewards that make exactly the no-gradient groups DAPO-filtered). Both must evict
the same stale groups, refill the same number of prompts, wait at the same moments and take
mini-batches with the same tags. verl's order among *equal* tags is the iteration order of a
Python set of uid strings (it depends on the process's hash seed), so for the last tag taken
only the count is compared.

TransferQueue is verl's key-value store (a Ray service); ``ReplayBufferAsync`` reads it only
through ``tq.kv_list``, ``tq.kv_clear`` and ``tq.kv_batch_get``, so an in-memory store with
those three calls stands in for it and the buffer's own code makes every decision.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("transfer_queue", reason="verl extra not installed")
rb_module = pytest.importorskip("verl.trainer.ppo.v1.replay_buffer",
                                reason="verl is not installed (make install puts verl==0.9.1 in)")
pytestmark = pytest.mark.verl

from reserve_occupy_sim.model.core import SimGroup, Simulator  # noqa: E402
from reserve_occupy_sim.model.cost import preset  # noqa: E402
from reserve_occupy_sim.model.filtering import RewardFilter  # noqa: E402
from reserve_occupy_peers.verl_drop import VerlDrop  # noqa: E402
from reserve_occupy_sim.model.workload import MathReasoningShape, generate  # noqa: E402


class MemoryKV:
    """The three TransferQueue calls the replay buffer makes, over a dict."""

    def __init__(self) -> None:
        self.store: dict[str, dict[str, dict]] = {}
        self.scores: dict[str, float] = {}
        self.cleared: list[list[str]] = []

    def kv_list(self):
        return {p: dict(items) for p, items in self.store.items()}

    def kv_clear(self, partition_id, keys):
        self.cleared.append(list(keys))
        for key in keys:
            self.store.get(partition_id, {}).pop(key, None)

    def kv_batch_get(self, keys, partition_id, select_fields):
        assert select_fields == ["rm_scores"]
        return {"rm_scores": [np.array([self.scores[k]]) for k in keys]}


class WouldBlock(Exception):
    """verl would sleep poll_interval and look again: not enough is sampleable."""


class LockstepVerl(VerlDrop):
    """The simulator's policy; every mini-batch it samples is also sampled by verl's buffer."""

    def attach(self, sim) -> None:
        super().attach(sim)
        self.kv = rb_module.tq  # the MemoryKV the fixture put in TransferQueue's place
        self.refilled: list[int] = []
        self.real = rb_module.ReplayBufferAsync(
            trainer_mode="separate_async", trainer_config=None,
            max_off_policy_threshold=self.threshold, max_off_policy_strategy="drop",
            sampler_kwargs={}, poll_interval=0.0, refill_fn=self.refilled.append,
            filter_groups_metric="reward" if sim.filtering is not None else None)

        def would_block(partition_id, last_debug_time):
            raise WouldBlock

        self.real._wait_for_next_poll = would_block
        self.checked = Counter()

    def _load(self) -> None:
        """TransferQueue as verl would hold it now: every prompt's status, tag and rows."""
        train: dict[str, dict] = {}
        for g in self.sim.groups:
            if g.state == SimGroup.RUNNING:
                train[f"g{g.gid}"] = {"is_prompt": True, "status": "running",
                                      "global_steps": g.tag}
        for g in self._finished:
            uid = f"g{g.gid}"
            train[uid] = {"is_prompt": True, "status": "finished", "global_steps": g.tag}
            for i in range(len(g.requests)):
                key = f"{uid}_{i}_0"
                train[key] = {"global_steps": g.tag}
                # zero variance exactly for the no-gradient groups
                self.kv.scores[key] = 0.0 if g.no_grad else float(i % 2)
        self.kv.store = {"train": train}
        self.kv.cleared.clear()
        self.refilled.clear()

    def _sample(self, size):
        self._load()
        by_uid = {f"g{g.gid}": g for g in self._finished}
        try:
            meta, _ = self.real.sample(self.step, "train", size)
            real_taken = sorted({k.split("_")[0] for k in meta.keys})
        except WouldBlock:
            real_taken = None
        materialized = set(real_taken or ())
        real_evicted = {k for call in self.kv.cleared for k in call
                        if "_" not in k and k not in materialized}

        before = set(by_uid)
        ours = super()._sample(size)
        ours_taken = None if ours is None else sorted(f"g{g.gid}" for g in ours)
        left = {f"g{g.gid}" for g in self._finished}
        ours_evicted = before - left - set(ours_taken or ())

        assert real_evicted == ours_evicted, (self.step, real_evicted, ours_evicted)
        assert sum(self.refilled) == len(ours_evicted)
        assert (real_taken is None) == (ours_taken is None), (self.step, real_taken, ours_taken)
        if ours_taken is not None:
            real_tags = sorted(by_uid[u].tag for u in real_taken)
            assert real_tags == sorted(by_uid[u].tag for u in ours_taken)
            below = real_tags[-1]  # groups with a smaller tag than the last one taken: no tie
            assert ({u for u in real_taken if by_uid[u].tag < below}
                    == {u for u in ours_taken if by_uid[u].tag < below})
            self.checked["samples"] += 1
        else:
            self.checked["waits"] += 1
        self.checked["evicted"] += len(ours_evicted)
        return ours


@pytest.fixture(autouse=True)
def memory_kv(monkeypatch):
    monkeypatch.setattr(rb_module, "tq", MemoryKV())


@pytest.mark.parametrize("eta,sync_step,rate", [(1, 1, 0.0), (1, 4, 0.0), (2, 4, 0.3),
                                                (0, 2, 0.2)])
def test_verl_replay_buffer_decides_like_the_simulator(eta, sync_step, rate):
    policy = LockstepVerl(eta, parameter_sync_step=sync_step)
    sim = Simulator(policy, generate(5, MathReasoningShape(groups=256)), preset("qwen3-8b-h20"),
                    batches=10, batch_size=8,
                    filtering=RewardFilter(rate, seed=3) if rate else None).run()
    assert len(sim.ledger.batches) == 10
    assert policy.checked["samples"] == 10 * sync_step
    assert policy.checked["waits"] > 0
    if eta <= 1:
        assert sim.ledger.dropped  # the stale path was exercised
    if rate:
        assert sim.ledger.filtered


def test_parameter_sync_step_must_divide_the_batch():
    with pytest.raises(ValueError, match="not divisible"):
        Simulator(VerlDrop(1, parameter_sync_step=3), generate(0, MathReasoningShape(groups=32)),
                  preset("qwen3-8b-h20"), batches=1, batch_size=8).run()
