"""``train`` with the sharded trainer end to end: two gloo ranks (FSDP2) as processes of their
own, the session's real vLLM CPU engine, the driver unchanged."""

from __future__ import annotations

import asyncio
import os

import pytest

from runtime.config import TrainerConfig, load_config
from runtime.data import load_prompts
from runtime.rollout.base import GenerationRequest
from runtime.session import run_training
from runtime.tasks.arithmetic import ExactAnswerReward
from runtime.trainer.grpo import GRPOTrainer
from runtime.trainer.sharded import ShardedTrainer

from .helpers import LOGPROB_TOL

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]


async def test_two_rank_trainer_trains_the_engine(engine, tokenizer, tiny_model, tmp_path):
    cfg = load_config(None, {
        "run.progress": False, "run.plot": False, "run.eval_prompts": 0,
        "run.check_invariants": True, "run.output_dir": str(tmp_path), "run.steps": 4,
        "staleness.batch_size": 4, "staleness.group_size": 4, "staleness.max_staleness": 1,
        "trainer.world_size": 2, "trainer.streaming": True, "trainer.lr": 1e-3})
    seen = {}

    def hook(driver):
        seen["trainer"] = driver.trainer

    result = await run_training(cfg, tiny_model, load_prompts(), ExactAnswerReward(), tmp_path,
                                rollout=engine, log=lambda _: None, driver_hook=hook)
    trainer = seen["trainer"]
    assert isinstance(trainer, ShardedTrainer) and trainer.world == 2
    # streaming: every step went through finish_step (and accumulate, when units were ready)
    assert len(result.rows) == 4 and trainer.steps == 4
    # the ranks were processes of their own, and the run stopped them
    assert os.getpid() not in trainer.pids and len(set(trainer.pids)) == 2
    assert all(p.exitcode is not None for p in trainer.procs)
    # The final checkpoint is a consolidated Hugging Face directory (transformers loads it),
    # and the engine runs its weights: vLLM loaded what the ranks exported.
    final = GRPOTrainer(tmp_path / "checkpoint", TrainerConfig(), tmp_path / "x")
    base = GRPOTrainer(tiny_model, TrainerConfig(), tmp_path / "y")
    probes = [f"{a}+{b}=" for a in range(10) for b in range(0, 10, 5)]
    segs = await asyncio.gather(*(engine.generate(GenerationRequest(
        f"sh-{i}", tokenizer.encode(p), 6, 1.0, seed=i, ignore_eos=True))
        for i, p in enumerate(probes)))
    ids = [tokenizer.encode(p) for p in probes]
    toks = [s.token_ids for s in segs]

    def gap(scorer: GRPOTrainer) -> float:
        return max(abs(a - b) for s, t in zip(segs, scorer.score(ids, toks))
                   for a, b in zip(s.logprobs, t))

    assert gap(final) < LOGPROB_TOL
    assert gap(base) > 1e-2  # the check can fail: the base weights are far off
