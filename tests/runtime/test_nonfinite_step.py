"""A NaN or an infinity in a loss or a gradient stops the step before the optimizer
(``runtime.trainer.grpo.NonFiniteStep``): the weights are bit-identical afterwards, the
optimizer took no step, nothing is written, and the error names the group (unit id)."""

from __future__ import annotations

import math

import pytest
import torch

from runtime.config import TrainerConfig
from runtime.trainer.base import GroupSample, NonFiniteStep, Sample, TrainBatch
from runtime.trainer.grpo import GRPOTrainer

PROMPT = [5, 6, 14, 11]


def _group(trainer, unit, rewards, responses=([13, 12, 2], [7, 2])):
    own = trainer.score([PROMPT] * len(responses), list(map(list, responses)))
    samples = tuple(Sample(tuple(r), tuple(lp), (0,) * len(r), rw, "stop", 1, i)
                    for i, (r, lp, rw) in enumerate(zip(responses, own, rewards)))
    return GroupSample(unit, 0, tuple(PROMPT), 0, 0, samples)


def _snapshot(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def _files(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _assert_unchanged(trainer, before, out, files):
    after = trainer.model.state_dict()
    assert before.keys() == after.keys()
    for k, v in before.items():
        assert torch.equal(v, after[k]), k  # bit-identical, not close
    assert not trainer.opt.state  # AdamW never stepped (it keeps no moments yet)
    assert all(p.grad is None for p in trainer.model.parameters())
    assert _files(out) == files  # nothing written


@pytest.mark.parametrize("max_grad_norm", [None, 1.0])
def test_a_nan_loss_stops_the_step_before_the_optimizer(tiny_model, tmp_path, max_grad_norm):
    out = tmp_path / "out"
    out.mkdir()
    tr = GRPOTrainer(tiny_model, TrainerConfig(lr=1e-2, max_grad_norm=max_grad_norm), out)
    files, before = _files(out), _snapshot(tr)
    # two groups; the second's advantages are NaN (what an unchecked inf reward gives)
    batch = TrainBatch(0, (_group(tr, "g1", [1.0, 0.0]), _group(tr, "g7", [math.inf, 0.0])))
    with pytest.raises(NonFiniteStep, match=r"unit\(s\) g7 is NaN") as info:
        tr._train(batch)
    assert "g1" not in str(info.value)
    _assert_unchanged(tr, before, out, files)
    assert tr.steps == 0
    tr._train(TrainBatch(0, (_group(tr, "g2", [1.0, 0.0]),)))  # the trainer is usable after
    assert tr.steps == 1


def test_a_non_finite_gradient_with_finite_losses_stops_the_step(tiny_model, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tr = GRPOTrainer(tiny_model, TrainerConfig(lr=1e-2, max_grad_norm=1.0), out)
    files, before = _files(out), _snapshot(tr)
    param = next(tr.model.parameters())
    hook = param.register_hook(lambda g: g * math.inf)  # the loss stays finite
    try:
        with pytest.raises(NonFiniteStep, match=r"gradient's norm is (nan|inf) \(units g3\)"):
            tr._train(TrainBatch(0, (_group(tr, "g3", [1.0, 0.0]),)))
    finally:
        hook.remove()
    _assert_unchanged(tr, before, out, files)


def test_a_nan_in_a_streamed_chunk_stops_the_step(tiny_model, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tr = GRPOTrainer(tiny_model, TrainerConfig(lr=1e-2, streaming=True), out)
    files, before = _files(out), _snapshot(tr)
    bad, good = _group(tr, "g4", [math.nan, 1.0]), _group(tr, "g5", [1.0, 0.0])
    tr._accumulate(TrainBatch(0, (bad,)))  # a chunk trained while the batch fills
    with pytest.raises(NonFiniteStep, match=r"unit\(s\) g4 is"):
        tr._finish_step(TrainBatch(0, (bad, good)))
    _assert_unchanged(tr, before, out, files)
    assert tr._pending is None


@pytest.mark.slow
def test_the_sharded_ranks_stop_a_non_finite_step_alike_and_stay_usable(tiny_model, tmp_path):
    """Two FSDP2 ranks: the NaN group's rows are on rank 1 only (rows are dealt by tokens:
    rank 0 takes the 30-token response), yet every rank stops before its optimizer with the
    same message naming the group; the exported weights after are bit-identical to those
    before, and the trainer trains the next batch."""
    from safetensors.torch import load_file

    from runtime.trainer.sharded import ShardedTrainer

    def batch(rewards_u1):
        groups = []
        for g, (prompt, responses, rewards) in enumerate([
                ([5, 6, 14, 11], [[4] * 29 + [2], [3, 3, 2]], [1.0, 0.0]),
                ([7, 14, 3, 11], [[6, 6, 6, 2], [5, 2]], rewards_u1)]):
            samples = tuple(Sample(tuple(r), tuple([-1.0] * len(r)), (0,) * len(r), rw,
                                   "stop", 1, i)
                            for i, (r, rw) in enumerate(zip(responses, rewards)))
            groups.append(GroupSample(f"u{g}", g, tuple(prompt), 0, 0, samples))
        return TrainBatch(0, tuple(groups))

    tr = ShardedTrainer(tiny_model, TrainerConfig(lr=1e-2), tmp_path / "sh", seed=0,
                        world_size=2)
    try:
        before = load_file(str(tr._export(0) / "model.safetensors"))
        with pytest.raises(NonFiniteStep, match=r"step 1: the loss of unit\(s\) u1 is NaN"):
            tr._train(batch([math.nan, 1.0]))
        after = load_file(str(tr._export(1) / "model.safetensors"))
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k], after[k]) for k in before)
        tr._train(batch([0.0, 1.0]))  # usable: the next step trains
        assert tr.steps == 1
    finally:
        tr.close()
