"""The torch GRPO trainer without an engine: advantages, the clipped ratio against behaviour
log-probabilities (staleness is corrected, not ignored), KL, and checkpoints."""

from __future__ import annotations

import asyncio

import pytest
import torch

from runtime.config import TrainerConfig
from runtime.trainer.base import GroupSample, Sample, TrainBatch
from runtime.trainer.grpo import GRPOTrainer

from .helpers import fp32_tol

PROMPT = [5, 6, 14, 11]  # "12+7" in the tiny tokenizer's ids (any ids below vocab work)


def _trainer(tiny_model, tmp_path, **kw) -> GRPOTrainer:
    return GRPOTrainer(tiny_model, TrainerConfig(**kw), tmp_path)


def _batch(trainer, responses, rewards, shift=0.0, version=0, versions=None) -> TrainBatch:
    """One group whose behaviour log-probabilities are the trainer's own plus ``shift`` (one
    number, or one per sample)."""
    own = trainer.score([PROMPT] * len(responses), responses)
    shifts = shift if isinstance(shift, list) else [shift] * len(responses)
    samples = tuple(
        Sample(tuple(r), tuple(x + shifts[i] for x in lp),
               tuple(versions[i] if versions else [version] * len(r)), rw, "stop", 1, i)
        for i, (r, lp, rw) in enumerate(zip(responses, own, rewards)))
    return TrainBatch(version, (GroupSample("g", 0, tuple(PROMPT), version, 0, samples),))


def test_advantages_are_group_normalised():
    adv = GRPOTrainer.advantages([1.0, 0.0, 0.0, 1.0])
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert GRPOTrainer.advantages([1.0, 0.0], scale=False) == pytest.approx([0.5, -0.5])
    assert GRPOTrainer.advantages([0.3, 0.3, 0.3]) == pytest.approx([0.0, 0.0, 0.0])


def test_a_step_moves_probability_towards_rewarded_samples(tiny_model, tmp_path):
    tr = _trainer(tiny_model, tmp_path, lr=1e-3, max_grad_norm=None)
    good, bad = [13, 12, 2], [7, 2]
    scored = tr.score([PROMPT] * 2, [good, bad])
    before = [sum(x) for x in scored]
    # the training forward scores the behaviour's tokens again: equal up to float32's noise
    tol = fp32_tol(max(abs(x) for row in scored for x in row), tr.model.config)
    metrics = tr._train(_batch(tr, [good, bad], [1.0, 0.0]))
    after = [sum(x) for x in tr.score([PROMPT] * 2, [good, bad])]
    assert after[0] > before[0]  # the rewarded sample became likelier ...
    assert after[0] - after[1] > before[0] - before[1] + 0.1  # ... relative to the other
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=tol)  # on-policy: ratio 1
    assert metrics["onpolicy_logprob_err"] < tol and metrics["clip_frac"] == 0.0
    assert metrics["stale_token_frac"] == 0.0


def test_tokens_outside_the_clip_range_carry_no_gradient(tiny_model, tmp_path):
    # Stale samples whose probability the policy has since moved a lot: the rewarded one is now
    # e times likelier than when sampled (ratio > 1 + clip_high), the other e times less likely
    # (ratio < 1 - clip_low). Both are already past the trust region in the direction of their
    # advantage, so the clipped objective is flat: no gradient. A plain policy gradient, which
    # ignores the behaviour probabilities, would keep pushing.
    tr = _trainer(tiny_model, tmp_path, lr=1e-2, max_grad_norm=None)
    resp = [[13, 12, 2], [7, 2]]
    metrics = tr._train(_batch(tr, resp, [1.0, 0.0], shift=[-1.0, 1.0], version=1,
                               versions=[[0, 0, 0], [0, 0]]))
    assert metrics["clip_frac"] == 1.0 and metrics["stale_token_frac"] == 1.0
    assert metrics["grad_norm"] == 0.0
    # The same batch labelled as fresh (shift 0) does train: the clip is what stopped it.
    tr2 = _trainer(tiny_model, tmp_path, lr=1e-2, max_grad_norm=None)
    assert tr2._train(_batch(tr2, resp, [1.0, 0.0]))["grad_norm"] > 0.0


def test_kl_to_the_initial_weights_is_reported_and_zero_at_the_start(tiny_model, tmp_path):
    tr = _trainer(tiny_model, tmp_path, lr=1e-2, kl_coef=0.1)
    m1 = tr._train(_batch(tr, [[13, 12, 2], [7, 2]], [1.0, 0.0]))
    assert m1["kl_ref"] == pytest.approx(0.0, abs=1e-6)
    m2 = tr._train(_batch(tr, [[13, 12, 2], [7, 2]], [1.0, 0.0]))
    assert m2["kl_ref"] > 0.0


def test_minibatches_take_several_optimiser_steps(tiny_model, tmp_path):
    one = _trainer(tiny_model, tmp_path, lr=1e-2)
    two = _trainer(tiny_model, tmp_path, lr=1e-2, minibatches=2)
    resp, rew = [[13, 12, 2], [7, 2], [4, 2], [9, 9, 2]], [1.0, 0.0, 1.0, 0.0]
    one._train(_batch(one, resp, rew))
    two._train(_batch(two, resp, rew))
    assert one.opt.state_dict()["state"][0]["step"] == 1
    assert two.opt.state_dict()["state"][0]["step"] == 2


def test_checkpoint_round_trip_reproduces_the_next_step(tiny_model, tmp_path):
    a = _trainer(tiny_model, tmp_path / "a", lr=1e-2)
    resp, rew = [[13, 12, 2], [7, 2]], [1.0, 0.0]
    a._train(_batch(a, resp, rew))
    asyncio.run(a.save_checkpoint(tmp_path / "ckpt"))
    b = _trainer(tiny_model, tmp_path / "b", lr=1e-2)
    asyncio.run(b.load_checkpoint(tmp_path / "ckpt"))
    assert b.steps == 1
    batch = _batch(a, resp, rew)
    a._train(batch)
    b._train(batch)
    for (name, pa), pb in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.equal(pa, pb), name
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        asyncio.run(b.load_checkpoint(tmp_path / "nothing"))


def test_exported_weights_are_a_safetensors_dir_and_old_versions_are_pruned(tiny_model,
                                                                             tmp_path):
    tr = GRPOTrainer(tiny_model, TrainerConfig(), tmp_path, keep_weights=2)
    paths = [asyncio.run(tr.export_weights(v)) for v in range(1, 5)]
    assert all((p / "model.safetensors").exists() for p in paths[-2:])
    assert not paths[0].exists() and not paths[1].exists()
