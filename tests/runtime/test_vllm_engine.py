"""The vLLM rollout backend against a real engine (CPU build, the tiny model): sampled-token
log-probabilities agree with the trainer's, abort returns partial output that resumes exactly,
pause ends running requests, and loaded weights really change what the engine computes."""

from __future__ import annotations

import asyncio

import pytest

from runtime.config import TrainerConfig
from runtime.rollout.base import GenerationRequest

from .helpers import LOGPROB_TOL, fp32_tol

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]

PROMPTS = ["3+4=", "9+9=", "1+0=", "7+8="]


async def _reset(engine, path):
    await engine.pause()
    await engine.load_weights(path)
    await engine.resume()


def _trainer(tiny_model, tmp_path, temperature=1.0):
    from runtime.trainer.grpo import GRPOTrainer

    return GRPOTrainer(tiny_model, TrainerConfig(), tmp_path, temperature)


async def _sample(engine, tokenizer, temperature, n=4, max_tokens=12, ignore_eos=True,
                  tag="s"):
    reqs = [GenerationRequest(f"{tag}-{i}-{k}", tokenizer.encode(p), max_tokens, temperature,
                              seed=100 * i + k, ignore_eos=ignore_eos)
            for i, p in enumerate(PROMPTS) for k in range(n)]
    segs = await asyncio.gather(*(engine.generate(r) for r in reqs))
    return reqs, segs


async def _generating(engine, since, tasks):
    """Wait until the engine has sent tokens beyond its count ``since`` (or a request ended):
    generation has really started, however slow the machine is."""
    async def started():
        while engine.tokens_so_far <= since and not any(t.done() for t in tasks):
            await asyncio.sleep(0.001)

    await asyncio.wait_for(started(), 120)


def _max_diff(trainer, reqs, segs):
    scored = trainer.score([r.prompt_ids for r in reqs], [s.token_ids for s in segs])
    return max(abs(a - b) for s, t in zip(segs, scored) for a, b in zip(s.logprobs, t))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_sampled_logprobs_match_the_trainer(engine, tokenizer, tiny_model, tmp_path,
                                                  temperature):
    await _reset(engine, tiny_model)
    reqs, segs = await _sample(engine, tokenizer, temperature, tag=f"lp{temperature}")
    assert all(len(s.token_ids) == 12 == len(s.logprobs) for s in segs)
    # Importance ratios of fresh tokens are 1 up to float noise (LOGPROB_TOL).
    assert _max_diff(_trainer(tiny_model, tmp_path, temperature), reqs, segs) < LOGPROB_TOL
    if temperature != 1.0:  # the check has teeth: ignoring the temperature is caught
        assert _max_diff(_trainer(tiny_model, tmp_path, 1.0), reqs, segs) > 1e-2


async def test_abort_returns_the_partial_and_resuming_continues_exactly(engine, tokenizer,
                                                                        tiny_model):
    await _reset(engine, tiny_model)
    prompt = tokenizer.encode("12+7=")
    full = await engine.generate(GenerationRequest("ref", prompt, 100, 0.0, ignore_eos=True))
    for attempt in range(5):
        since = engine.tokens_so_far
        task = asyncio.ensure_future(engine.generate(
            GenerationRequest(f"long-{attempt}", prompt, 100, 0.0, ignore_eos=True)))
        await _generating(engine, since, [task])  # it has tokens: the abort cuts it midway
        await engine.abort([f"long-{attempt}"])
        part = await task
        if part.finish_reason == "abort":
            break
        # all 100 tokens came before the abort reached the engine (a starved test process):
        # nothing was cut, so cut another one
    assert part.finish_reason == "abort"
    assert 0 < len(part.token_ids) < 100 and len(part.logprobs) == len(part.token_ids)
    rest = await engine.generate(GenerationRequest(
        "resume", prompt + part.token_ids, 100 - len(part.token_ids), 0.0, ignore_eos=True))
    assert part.token_ids + rest.token_ids == full.token_ids
    # the resumed request recomputes the prefix in one prefill: the same log-probabilities up
    # to float32's summation-order noise (the tokens, compared exactly above, are the teeth)
    from transformers import AutoConfig

    tol = fp32_tol(max(map(abs, full.logprobs)), AutoConfig.from_pretrained(tiny_model))
    assert part.logprobs + rest.logprobs == pytest.approx(full.logprobs, abs=tol)


async def test_pause_ends_requests_and_loaded_weights_change_the_engine(
        engine, tokenizer, tiny_model, tmp_path):
    await _reset(engine, tiny_model)
    trainer = _trainer(tiny_model, tmp_path)
    reqs, before = await _sample(engine, tokenizer, 0.0, n=1, tag="before")
    # Long requests in flight, then pause: each returns what it had, marked "abort".
    for attempt in range(5):
        since = engine.tokens_so_far
        tasks = [asyncio.ensure_future(engine.generate(GenerationRequest(
            f"p{attempt}-{i}", tokenizer.encode(p), 120, 1.0, seed=i, ignore_eos=True)))
            for i, p in enumerate(PROMPTS)]
        await _generating(engine, since, tasks)
        await engine.pause()
        paused = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        if all(s.finish_reason == "abort" for s in paused):
            break
        await engine.resume()  # one finished before the pause reached the engine: again
    assert [s.finish_reason for s in paused] == ["abort"] * len(PROMPTS)
    assert engine._active == set()
    # New weights: perturb the trainer's model and push them.
    import torch

    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    await engine.load_weights(await trainer.export_weights(1))
    await engine.resume()
    _, after = await _sample(engine, tokenizer, 0.0, n=1, tag="after")
    assert [s.token_ids for s in after] != [s.token_ids for s in before]
    # ... and the engine computes exactly the trainer's new distribution.
    assert _max_diff(trainer, reqs, after) < LOGPROB_TOL
    await _reset(engine, tiny_model)
    _, again = await _sample(engine, tokenizer, 0.0, n=1, tag="again")
    assert [s.token_ids for s in again] == [s.token_ids for s in before]
