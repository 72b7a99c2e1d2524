"""End to end on CPU with real vLLM and the torch GRPO trainer, driven by the controller.

Short runs of the embedded task on the session's engine (``conftest.engine``): eta holds for
every consumed batch (measured from the versions that actually generated each token), weights
change in the engine after publish, partial rollout keeps tokens and the oldest version with
per-token behaviour log-probabilities of the right version, a hung request is released by the
STUCK timeout, a raising reward function aborts its group cleanly, and the reward improves.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from reserve_occupy import UnitState, replay
from runtime.config import load_config
from runtime.data import load_prompts
from runtime.recovery.journal import read_log
from runtime.rollout.base import GenerationRequest, Segment
from runtime.session import run_training
from runtime.tasks.arithmetic import ExactAnswerReward

from .helpers import LOGPROB_TOL, version_scorer, window_reward

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]


def _cfg(tmp_path: Path, **overrides):
    base = {"run.progress": False, "run.plot": False, "run.eval_prompts": 0,
            "run.check_invariants": True, "run.output_dir": str(tmp_path),
            "staleness.batch_size": 4, "staleness.group_size": 4, "run.steps": 6}
    base.update(overrides)
    return load_config(None, base)


async def _train(cfg, engine, tiny_model, tmp_path, reward=None, hook=None, prompts=None):
    return await run_training(cfg, tiny_model, prompts or load_prompts(),
                              reward or ExactAnswerReward(), tmp_path, rollout=engine,
                              log=lambda _: None, driver_hook=hook)


def _log_replays(run_dir: Path, controller, durable: bool = True) -> None:
    """The run's ``events.jsonl`` (trace format) rebuilds the controller's final state. A
    durable run's controller kept only the events after its last step in memory (it forgets
    what it counted: the file is the log), and those are the file's last ones; one without
    recovery wrote the file from memory at the end and kept its whole log."""
    contents = read_log(run_dir / "events.jsonl")
    assert contents.config == controller.config and contents.torn is None
    assert replay(contents.config, contents.events).snapshot() == controller.snapshot()
    assert controller.event_count == len(contents.events)
    assert (controller.first_event > 0) == durable
    assert list(controller.events_since(controller.first_event)) == \
        contents.events[controller.first_event:]


def _log_events(run_dir: Path) -> list:
    """The run's whole event log, from its file."""
    return read_log(run_dir / "events.jsonl").events


def _record_batches(driver):
    """Wrap the trainer so the test sees every batch it trained on."""
    seen = []
    train_step = driver.trainer.train_step

    async def spy(batch):
        seen.append(batch)
        return await train_step(batch)

    driver.trainer.train_step = spy
    driver.seen_batches = seen


async def _greedy(engine, tokenizer, prompts: Sequence[str], tag: str) -> list[list[int]]:
    segs = await asyncio.gather(*(engine.generate(GenerationRequest(
        f"{tag}-{i}", tokenizer.encode(p), 8, 0.0)) for i, p in enumerate(prompts)))
    return [s.token_ids for s in segs]


async def test_short_run_respects_eta_and_publishes_real_weights(engine, tokenizer, tiny_model,
                                                                 tmp_path):
    probes = [f"{a}+{b}=" for a in range(10) for b in range(0, 10, 3)]
    await engine.pause()
    await engine.load_weights(tiny_model)
    await engine.resume()
    before = await _greedy(engine, tokenizer, probes, "probe0")
    cfg = _cfg(tmp_path, **{"staleness.max_staleness": 1, "run.steps": 8})
    result = await _train(cfg, engine, tiny_model, tmp_path, hook=_record_batches)
    driver = result.driver
    assert len(driver.seen_batches) == 8 and len(result.rows) == 8
    for batch in driver.seen_batches:
        for g in batch.groups:
            oldest = min(min(s.versions) for s in g.samples)
            assert batch.version - oldest <= 1  # the tokens' own versions, not the label
            assert g.v_traj <= oldest and g.staleness == batch.version - g.v_traj <= 1
    assert any(g.staleness == 1 for b in driver.seen_batches for g in b.groups)  # async
    _log_replays(tmp_path, driver.controller)  # streamed by crash recovery, line by line
    # The engine now runs the trained weights: greedy answers changed ...
    after = await _greedy(engine, tokenizer, probes, "probe1")
    assert after != before
    # ... and its log-probabilities are the trainer's final weights', not the base model's.
    from runtime.config import TrainerConfig
    from runtime.trainer.grpo import GRPOTrainer

    final = GRPOTrainer(tiny_model, TrainerConfig(), tmp_path / "x")
    await final.load_checkpoint(tmp_path / "checkpoint")
    base = GRPOTrainer(tiny_model, TrainerConfig(), tmp_path / "y")
    segs = await asyncio.gather(*(engine.generate(GenerationRequest(
        f"lp-{i}", tokenizer.encode(p), 6, 1.0, seed=i, ignore_eos=True))
        for i, p in enumerate(probes)))
    ids = [tokenizer.encode(p) for p in probes]
    toks = [s.token_ids for s in segs]
    diff_final = max(abs(a - b) for s, t in zip(segs, final.score(ids, toks))
                     for a, b in zip(s.logprobs, t))
    diff_base = max(abs(a - b) for s, t in zip(segs, base.score(ids, toks))
                    for a, b in zip(s.logprobs, t))
    assert diff_final < LOGPROB_TOL
    assert diff_base > 1e-2


async def test_partial_rollout_keeps_tokens_oldest_version_and_right_logprobs(
        engine, tokenizer, tiny_model, tmp_path):
    # Long answers (no end token) and a fast trainer: weight updates land mid-generation. A
    # large learning rate and a flat sampling distribution (temperature 2) make consecutive
    # versions clearly different distributions, so a token scored by the wrong one shows.
    cfg = _cfg(tmp_path, **{"staleness.max_staleness": 2, "trainer.lr": 3e-3,
                            "rollout.temperature": 2.0, "staleness.batch_size": 2,
                            "staleness.group_size": 2, "rollout.ignore_eos": True,
                            "rollout.max_tokens": 64, "run.steps": 5, "run.keep_weights": 10,
                            "staleness.filter_zero_variance": False})
    result = await _train(cfg, engine, tiny_model, tmp_path, hook=_record_batches,
                          reward=lambda p, c: float(c.count("1")))
    driver = result.driver
    resumes = [e for e in driver.notes if e["event"] == "resume" and e["kept"] > 0]
    assert resumes, "no request was interrupted by a weight update with tokens kept"
    mixed = [(b, g, s) for b in driver.seen_batches for g in b.groups for s in g.samples
             if len(set(s.versions)) > 1]
    assert mixed
    scorer = version_scorer(tiny_model, tmp_path / "weights", tmp_path, temperature=2.0)

    for batch, g, s in mixed:
        assert list(s.versions) == sorted(s.versions) and s.versions[0] >= g.v_traj
        assert batch.version - g.v_traj == g.staleness <= 2  # the oldest version, kept
        # Every token's behaviour log-probability is that of the version that generated it,
        # and no single version explains the whole sample (so the check is not vacuous).
        for v in sorted(set(s.versions)):
            scored = scorer(v).score([list(g.prompt_ids)], [list(s.token_ids)])[0]
            idx = [i for i, x in enumerate(s.versions) if x == v]
            assert max(abs(scored[i] - s.logprobs[i]) for i in idx) < LOGPROB_TOL
            assert max(abs(a - b) for a, b in zip(scored, s.logprobs)) > 1e-3


class HangingRollout:
    """The real engine, except that one chosen request hangs (never returns by itself) until
    it is aborted or the engine pauses -- a stuck generation."""

    def __init__(self, inner, hang: str) -> None:
        self.inner, self.hang = inner, hang
        self.tokenizer = inner.tokenizer
        self._released = asyncio.Event()
        self.hung = False

    async def generate(self, request: GenerationRequest) -> Segment:
        if request.request_id == self.hang:
            self.hung = True
            await self._released.wait()
            return Segment(finish_reason="abort")
        return await self.inner.generate(request)

    async def abort(self, request_ids):
        if self.hang in request_ids:
            self._released.set()
        await self.inner.abort(request_ids)

    async def pause(self, mode="abort"):
        await self.inner.pause(mode)

    async def load_weights(self, path, version=None):
        await self.inner.load_weights(path, version)

    async def resume(self):
        await self.inner.resume()

    async def close(self):
        pass


async def test_hung_request_is_released_by_the_stuck_timeout(engine, tiny_model, tmp_path):
    cfg = _cfg(tmp_path, **{"staleness.max_staleness": 0, "staleness.batch_size": 2,
                            "staleness.group_size": 2, "run.steps": 3, "timeouts.stuck_s": 1.5,
                            "recovery.enabled": False})
    hanging = HangingRollout(engine, "g1-c0-s0")
    result = await asyncio.wait_for(
        _train(cfg, hanging, tiny_model, tmp_path, reward=lambda p, c: float(len(c) % 2)), 120)
    driver = result.driver
    assert hanging.hung and hanging._released.is_set()
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert released and released[0]["units"] == ["g1"]
    assert released[0]["t"] >= 1.5
    assert driver.controller.unit_state("g1") is UnitState.ABORTED
    assert len(result.rows) == 3  # the run went on
    _log_replays(tmp_path, driver.controller, durable=False)  # no recovery: written at the end
    assert engine.engine.get_num_unfinished_requests() == 0


async def test_reward_exception_aborts_its_group_cleanly(engine, tiny_model, tmp_path):
    def reward(prompt, completion):  # fails on a third of the prompts
        if prompt.index % 3 == 0:
            raise RuntimeError("reward server down")
        return ExactAnswerReward()(prompt, completion)

    cfg = _cfg(tmp_path, **{"run.steps": 4, "staleness.candidates": 6})
    result = await _train(cfg, engine, tiny_model, tmp_path, reward=reward,
                          hook=_record_batches)
    driver = result.driver
    errors = {e["unit"] for e in driver.notes if e["event"] == "reward_error"}
    assert errors and driver.log_counts.counts()["aborted"] >= len(errors)
    for unit in errors:
        assert driver.controller.unit_state(unit) is UnitState.ABORTED
        assert all(unit not in [g.unit_id for g in b.groups] for b in driver.seen_batches)
    assert len(result.rows) == 4
    # group-level oversampling: the surplus candidates were aborted in the engine
    assert any(e["event"] == "engine_abort" and e["reason"] == "surplus" for e in driver.notes)
    assert engine.engine.get_num_unfinished_requests() == 0
    assert engine._active == set()


async def test_resume_from_a_checkpoint_continues_with_its_weights(engine, tiny_model, tmp_path):
    cfg = _cfg(tmp_path / "a", **{"run.steps": 3, "run.eval_prompts": 20,
                                  "trainer.lr": 3e-3})
    first = await _train(cfg, engine, tiny_model, tmp_path / "a")
    cfg2 = _cfg(tmp_path / "b", **{"run.steps": 1, "run.eval_prompts": 20})
    second = await run_training(cfg2, tiny_model, load_prompts(), ExactAnswerReward(),
                                tmp_path / "b", rollout=engine, log=lambda _: None,
                                resume=tmp_path / "a" / "checkpoint")
    # The resumed run pushed the checkpoint's weights (not the base model's) to the engine
    # before anything else ...
    import torch
    from safetensors.torch import load_file

    ckpt = load_file(str(tmp_path / "a" / "checkpoint" / "model.safetensors"))
    pushed = load_file(str(tmp_path / "b" / "weights" / "v0" / "model.safetensors"))
    base = load_file(str(tiny_model / "model.safetensors"))
    assert all(torch.equal(ckpt[k], pushed[k]) for k in ckpt)
    assert any(not torch.equal(ckpt[k], base[k]) for k in ckpt)
    # ... so its evaluation before training (same prompts, same seeds) is the first run's
    # evaluation after training.
    assert second.eval_before == pytest.approx(first.eval_after, abs=0.02)


# The improvement margin. The evaluation before training is deterministic (fixed weights and
# sampling seeds: 0.357 on the 100 problems x 4 samples); after 60 steps of the embedded default
# it was 0.453-0.480 in eight runs on this machine (gains +0.095 to +0.123; the spread comes
# from asynchronous timing only), and the training reward of the last 10 steps exceeded that of
# the first 10 by +0.123 to +0.136 (docs/runtime.md lists the runs). Asserting +0.05 on both
# leaves about twice the margin to the smallest observed gain, far outside the observed spread,
# while a run that does not learn fails: with trainer.lr = 1e-9 the gains were about 0 (shown in
# docs/runtime.md).
IMPROVEMENT_MARGIN = 0.05


async def test_reward_improves_on_the_synthetic_task(engine, tiny_model, tmp_path):
    cfg = load_config(None, {"run.progress": False, "run.plot": True,
                             "run.output_dir": str(tmp_path), "run.seed": 0})
    result = await _train(cfg, engine, tiny_model, tmp_path)
    gain = result.eval_after["reward"] - result.eval_before["reward"]
    first = window_reward(result.rows[:10])
    last = window_reward(result.rows[-10:])
    print(f"eval reward {result.eval_before['reward']:.3f} -> {result.eval_after['reward']:.3f}"
          f" (greedy {result.eval_before['greedy_reward']:.3f} -> "
          f"{result.eval_after['greedy_reward']:.3f}); training reward {first:.3f} -> "
          f"{last:.3f}")
    assert gain >= IMPROVEMENT_MARGIN
    assert last - first >= IMPROVEMENT_MARGIN
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == cfg.run.steps


# bf16-mixed learns as fp32 does: in one 60-step run of each (bench/precision_curve.py,
# docs/runtime.md) the training reward of steps 21-30 exceeded that of steps 1-10 by +0.100
# (fp32: +0.088, pure bf16: +0.064), and the evaluation gain after 60 steps was +0.108 (fp32
# +0.130). The test runs the demo's 60 steps and asks of the last 10 against the first 10 what
# test_reward_improves_on_the_synthetic_task asks of fp32 (IMPROVEMENT_MARGIN). It ran 30 steps
# before, and on this project's 2-core machine (2026-12-06) the window gain at 30 steps was
# +0.041 on f3d3cca and on the code after it alike (the same trajectory to 3 decimals), under
# its 0.05: half a run is too short for that margin; at 60 steps it was +0.090. It runs in
# `make test-deep` (RO_TEST_DEEP=1), not in `make test`.
@pytest.mark.deep
@pytest.mark.skipif(os.environ.get("RO_TEST_DEEP") != "1", reason="make test-deep runs it")
async def test_the_demo_still_learns_in_bf16_mixed(engine, tiny_model, tmp_path):
    cfg = load_config(None, {"run.progress": False, "run.plot": False, "run.steps": 60,
                             "run.eval_prompts": 0, "run.output_dir": str(tmp_path),
                             "trainer.precision": "bf16-mixed"})
    result = await _train(cfg, engine, tiny_model, tmp_path)
    first = window_reward(result.rows[:10])
    last = window_reward(result.rows[-10:])
    print(f"bf16-mixed training reward {first:.3f} -> {last:.3f}")
    assert last - first >= IMPROVEMENT_MARGIN


async def test_streaming_run_trains_chunks_and_whole_batches(engine, tiny_model, tmp_path):
    # Two groups in flight at a time: the head buffer fills one group after another, so the
    # trainer has final units to train before each batch is whole.
    cfg = _cfg(tmp_path, **{"staleness.max_staleness": 1, "staleness.max_concurrency": 2,
                            "trainer.streaming": True, "run.steps": 4})
    seen = []

    def spy(driver):
        finish = driver.trainer.finish_step

        async def wrapped(batch):
            seen.append(batch)
            return await finish(batch)

        driver.trainer.finish_step = wrapped

    result = await _train(cfg, engine, tiny_model, tmp_path, hook=spy)
    driver = result.driver
    assert len(seen) == 4 and all(len(b.groups) == 4 for b in seen)
    for batch in seen:
        for g in batch.groups:
            assert batch.version - min(min(s.versions) for s in g.samples) <= 1
    assert sum(r["streamed_units"] for r in result.rows) > 0
    assert all(r["train/chunks"] >= 1 for r in result.rows)
    assert driver.trainer.steps == 4  # one optimiser step per batch, chunks or not
    events = _log_events(tmp_path)
    streamed = {u.unit_id for e in events if e.op == "stream" for u in e.batch.units}
    consumed = [u for e in events if e.op == "consume" for u in e.batch.unit_ids]
    assert streamed and len(consumed) == len(set(consumed)) == 16
    assert streamed <= set(consumed) | {u for u in streamed
                                        if driver.controller.unit_state(u) is UnitState.STREAMED}
    _log_replays(tmp_path, driver.controller)  # the journal holds the stream lines
