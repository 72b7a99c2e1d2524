"""Chunked (streaming) training in the torch GRPO trainer: chunks of whole groups, one
optimiser step when the batch completes, the same update as training the batch whole."""

from __future__ import annotations

import pytest
import torch

from runtime.config import TrainerConfig
from runtime.trainer.base import GroupSample, Sample, TrainBatch
from runtime.trainer.grpo import GRPOTrainer

from .helpers import fp32_tol

PROMPTS = [[5, 6, 14, 11], [7, 14, 3, 11], [9, 14, 9, 11], [4, 14, 2, 11]]
# Responses of very different lengths per group, so that a chunk's own token mean weighs its
# tokens differently from the batch's token mean.
RESPONSES = [
    [[13, 12, 2], [7, 2], [4, 4, 4, 4, 4, 2], [9, 2]],
    [[3, 2], [3, 3, 3, 3, 3, 3, 3, 2], [5, 2], [6, 6, 2]],
    [[8, 8, 8, 8, 8, 8, 8, 8, 8, 2], [1, 2], [2, 2], [7, 7, 7, 2]],
    [[12, 2], [13, 13, 2], [4, 2], [5, 5, 5, 5, 2]],
]
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0],
           [0.3, 0.9, 0.0, 0.5]]


def _trainer(tiny_model, tmp_path, **kw) -> GRPOTrainer:
    kw = {"lr": 1e-3, **kw}
    return GRPOTrainer(tiny_model, TrainerConfig(**kw), tmp_path, seed=0)


def _batch(trainer: GRPOTrainer, version: int = 1) -> TrainBatch:
    """Four groups; behaviour log-probabilities shifted off the trainer's own so the ratio is
    not 1 and some tokens are clipped; half the samples are one version stale."""
    groups = []
    for g, (prompt, responses, rewards) in enumerate(zip(PROMPTS, RESPONSES, REWARDS)):
        own = trainer.score([prompt] * len(responses), responses)
        samples = tuple(
            Sample(tuple(r), tuple(x + 0.15 * ((i + t) % 3 - 1) for t, x in enumerate(lp)),
                   tuple([version - (i % 2)] * len(r)), rw, "stop", 1, i)
            for i, (r, lp, rw) in enumerate(zip(responses, own, rewards)))
        groups.append(GroupSample(f"g{g}", g, tuple(prompt), version - 1, 1, samples))
    return TrainBatch(version, tuple(groups))


def _chunks(batch: TrainBatch) -> list[TrainBatch]:
    """{g0}, {g1, g2}; g3 is left for ``finish_step`` (the units still arriving)."""
    return [TrainBatch(batch.version, batch.groups[:1]),
            TrainBatch(batch.version, batch.groups[1:3])]


def _grads(tr: GRPOTrainer) -> list[torch.Tensor]:
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
            for p in tr.model.parameters()]


def _whole_batch_grads(tr: GRPOTrainer, batch: TrainBatch) -> list[torch.Tensor]:
    """The gradient ``_train`` steps with (one pass, one minibatch), without stepping."""
    tr.opt.zero_grad(set_to_none=True)
    tr._minibatch(tr._rows(batch.groups), batch.version, {}, True)
    out = _grads(tr)
    tr.opt.zero_grad(set_to_none=True)
    return out


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _weights_apart(a: GRPOTrainer, b: GRPOTrainer) -> tuple[float, float]:
    """(mean, max) absolute difference of all weights.

    Adam's first step is lr * g / (|g| + eps), about lr * sign(g): an entry whose gradient is
    near eps (1e-8) turns float rounding of the gradient into a visible fraction of a step, so
    the largest difference of two equal updates is a fraction of lr on a few entries (22 of
    1e6 entries above 1e-5 measured at lr 1e-3), while the mean stays at rounding level
    (2e-9). A different update flips signs: differences of 2 lr, a mean near 1e-4."""
    wa = torch.cat([p.detach().flatten() for p in a.model.parameters()])
    wb = torch.cat([p.detach().flatten() for p in b.model.parameters()])
    d = (wa - wb).abs()
    return float(d.mean()), float(d.max())


def _max_rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest difference relative to the largest gradient entry (float32 rounding of
    sums taken in another order: ~5e-6 measured; ``_grad_tol`` is the bound)."""
    return _max_diff(a, b) / max(float(y.abs().max()) for y in b)


def _grad_tol(tr: GRPOTrainer, tokens: float) -> float:
    """float32's summation-order noise on a gradient relative to its largest entry: each entry
    sums the per-token products of every layer's backward over the batch's tokens
    (``helpers.fp32_tol`` with that many more terms: 2.1e-4 for this batch's 58 response
    tokens, against 1.6e-6 measured and 0.41 for the per-chunk mean below)."""
    return fp32_tol(1.0, tr.model.config, terms=int(tokens))


@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_streamed_chunks_accumulate_the_whole_batch_gradient(tiny_model, tmp_path, kl_coef):
    tr = _trainer(tiny_model, tmp_path, kl_coef=kl_coef)
    batch = _batch(tr)
    whole = _whole_batch_grads(tr, batch)
    for chunk in _chunks(batch):
        tr._accumulate(chunk)
    tr._accumulate(TrainBatch(batch.version, batch.groups[3:]))
    n = tr._pending["tokens"]
    streamed = [g / n for g in _grads(tr)]
    tol = _grad_tol(tr, n)
    assert _max_rel(streamed, whole) < tol
    # The mistake the deferred division avoids: each chunk normalised by its own tokens (and
    # the chunks averaged) is a different gradient, far outside the tolerance above.
    tr._discard()
    wrong = [torch.zeros_like(g) for g in whole]
    parts = [*_chunks(batch), TrainBatch(batch.version, batch.groups[3:])]
    for part in parts:
        tr.opt.zero_grad(set_to_none=True)
        tr._minibatch(tr._rows(part.groups), batch.version, {}, True)
        wrong = [w + g / len(parts) for w, g in zip(wrong, _grads(tr))]
    assert _max_rel(wrong, whole) > 10 * tol


def test_a_streamed_step_gives_the_weights_of_the_whole_batch_step(tiny_model, tmp_path):
    whole = _trainer(tiny_model, tmp_path / "whole")
    streamed = _trainer(tiny_model, tmp_path / "streamed")
    wrong = _trainer(tiny_model, tmp_path / "wrong")
    batch = _batch(whole)
    m_whole = whole._train(batch)
    for chunk in _chunks(batch):
        streamed._accumulate(chunk)
    m_streamed = streamed._finish_step(batch)
    mean, worst = _weights_apart(streamed, whole)
    assert mean < 1e-7 and worst < 0.5e-3  # lr 1e-3; no entry moved the other way
    for key in ("loss", "clip_frac", "ratio_mean", "kl_behaviour", "grad_norm",
                "stale_token_frac", "tokens"):
        assert m_streamed[key] == pytest.approx(m_whole[key], rel=1e-5, abs=1e-7), key
    assert m_streamed["chunks"] == 3 and m_streamed["streamed_units"] == 3
    assert streamed.steps == whole.steps == 1
    assert streamed.opt.state_dict()["state"][0]["step"] == 1
    # Counterpart: the per-chunk token mean, stepped, lands measurably elsewhere.
    for part in [*_chunks(batch), TrainBatch(batch.version, batch.groups[3:])]:
        wrong._minibatch(wrong._rows(part.groups), batch.version, {}, True)
    wrong._optimizer_step()
    mean, worst = _weights_apart(wrong, whole)
    assert mean > 1e-5 and worst > 1.5e-3


def test_finish_step_with_nothing_streamed_is_the_whole_batch_step(tiny_model, tmp_path):
    # A resumed run: the units handed to the trainer that died are in the batch, untrained
    # here, and finish_step trains them with the rest.
    whole = _trainer(tiny_model, tmp_path / "whole")
    resumed = _trainer(tiny_model, tmp_path / "resumed")
    batch = _batch(whole)
    whole._train(batch)
    metrics = resumed._finish_step(batch)
    assert metrics["chunks"] == 1 and metrics["streamed_units"] == 0
    mean, worst = _weights_apart(resumed, whole)
    assert mean < 1e-7 and worst < 0.5e-3


def test_bad_chunks_are_refused_and_change_nothing(tiny_model, tmp_path):
    tr = _trainer(tiny_model, tmp_path / "a")
    ref = _trainer(tiny_model, tmp_path / "b")
    batch = _batch(tr)
    tr._accumulate(TrainBatch(batch.version, batch.groups[:1]))
    before = _grads(tr)
    with pytest.raises(ValueError, match="already accumulated"):
        tr._accumulate(TrainBatch(batch.version, batch.groups[:2]))
    with pytest.raises(ValueError, match="chunk of batch 2 while batch 1 is pending"):
        tr._accumulate(TrainBatch(2, batch.groups[1:2]))
    with pytest.raises(ValueError, match="'g0' was accumulated but is not in batch 1"):
        tr._finish_step(TrainBatch(batch.version, batch.groups[1:]))
    assert _max_diff(_grads(tr), before) == 0.0 and tr._pending["units"] == ["g0"]
    tr._finish_step(batch)  # the refusals left the pending step intact
    ref._train(batch)
    mean, worst = _weights_apart(tr, ref)
    assert mean < 1e-7 and worst < 0.5e-3


@pytest.mark.parametrize("kw", [{"epochs": 2}, {"minibatches": 2}])
def test_streaming_needs_one_pass_and_one_minibatch(tiny_model, tmp_path, kw):
    tr = _trainer(tiny_model, tmp_path, **kw)
    with pytest.raises(ValueError, match="must be 1"):
        tr._accumulate(TrainBatch(1, _batch(tr).groups[:1]))
