"""Packed sequences in the torch GRPO trainer (``trainer.packing``): a micro-batch is several
samples in one row with attention kept within each sample, sized by tokens
(``trainer.max_tokens_per_micro_batch``). Its log-probabilities and its update are the padded
computation's; a row with attention crossing samples is not, and these tests say by how much."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from runtime.cli import main
from runtime.config import TrainerConfig
from runtime.trainer.base import TrainBatch
from runtime.trainer.grpo import GRPOTrainer, TokenBudgetError, plan_micro_batches

from .helpers import fp32_tol, load_bench
from .test_grpo_streaming import PROMPTS, RESPONSES, _batch, _chunks, _weights_apart

# Prompt + response lengths of the streaming tests' batch run 6 to 14 tokens: a 24-token budget
# splits its 16 samples (189 tokens) into several micro-batches of two or three samples each.
BUDGET = 24


def _trainer(model, tmp_path, packing, attn=None, cls=GRPOTrainer, **kw) -> GRPOTrainer:
    kw = {"lr": 1e-3, "packing": packing, **kw}
    tr = cls(model, TrainerConfig(**kw), tmp_path, seed=0)
    if attn == "eager":
        tr.model.set_attn_implementation(attn)
    return tr


def _all() -> tuple[list[list[int]], list[list[int]]]:
    return ([p for p, rs in zip(PROMPTS, RESPONSES) for _ in rs],
            [r for rs in RESPONSES for r in rs])


def _max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v))


def _tol(trainer: GRPOTrainer, want: list[list[float]]) -> float:
    """float32's summation-order noise on these log-probabilities (``helpers.fp32_tol``)."""
    return fp32_tol(max(abs(x) for row in want for x in row), trainer.model.config)


class CrossSample(GRPOTrainer):
    """The broken variant: the packed row as one causal sequence (one segment under
    ``per_sample_sdpa``, a lower-triangular mask under eager), so a sample's tokens attend to
    the samples before it in the row."""

    def _packed_inputs(self, model, seqs):
        out = super()._packed_inputs(model, seqs)
        n = out["input_ids"].shape[1]
        if "packed_segments" in out:
            out["packed_segments"] = ((0, n),)
        else:
            out["attention_mask"] = torch.zeros(n, n).masked_fill_(
                ~torch.ones(n, n, dtype=torch.bool).tril(), torch.finfo(torch.float32).min
            )[None, None]
        return out


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logprobs_equal_the_padded_ones(tiny_model, tmp_path, attn):
    prompts, responses = _all()
    padded = _trainer(tiny_model, tmp_path, False, attn)
    packed = _trainer(tiny_model, tmp_path, True, attn, max_tokens_per_micro_batch=BUDGET)
    assert len(packed._micro_batches(prompts, responses)) > 1
    assert packed.model.config._attn_implementation == (
        "ro_per_sample_sdpa" if attn == "sdpa" else attn)
    want = padded.score(prompts, responses)
    got = packed.score(prompts, responses)
    tol = _tol(padded, want)
    assert [len(x) for x in got] == [len(r) for r in responses]
    assert _max_diff(got, want) < tol
    # One row for everything (no budget split) is the same computation.
    whole = _trainer(tiny_model, tmp_path, True, attn)
    assert len(whole._micro_batches(prompts, responses)) == 1
    assert _max_diff(whole.score(prompts, responses), want) < tol
    # Attention across samples is a different distribution, far outside the tolerance.
    cross = _trainer(tiny_model, tmp_path, True, attn, cls=CrossSample)
    assert _max_diff(cross.score(prompts, responses), want) > 100 * tol


def test_position_ids_alone_isolate_samples_only_without_a_cache(tiny_model, tmp_path,
                                                                 monkeypatch):
    """The route for flash-attention and flex_attention (no 4D mask): transformers derives the
    samples from ``position_ids`` restarting at 0 only when the forward has no KV cache. The
    trainer passes ``use_cache=False``; the model's default (a cache) mixes the samples."""
    prompts, responses = _all()
    want = _trainer(tiny_model, tmp_path, False).score(prompts, responses)
    monkeypatch.setattr("runtime.trainer.grpo.packed_attention", lambda impl: "position_ids")
    tr = _trainer(tiny_model, tmp_path, True)
    assert "attention_mask" not in tr._packed_inputs(tr.model, [[1, 2], [3, 4]])
    assert _max_diff(tr.score(prompts, responses), want) < _tol(tr, want)
    # The same row with the model's default cache: the second sample sees the first.
    a, b = PROMPTS[0] + RESPONSES[0][0], PROMPTS[2] + RESPONSES[2][0]
    inputs = tr._packed_inputs(tr.model, [a, b])
    with torch.no_grad():
        alone = tr.model(input_ids=torch.tensor([b]), use_cache=False).logits[0]
        cached = tr.model(**inputs).logits[0, len(a):]
        nocache = tr.model(**inputs, use_cache=False).logits[0, len(a):]
    tol = fp32_tol(float(alone.abs().max()), tr.model.config)
    assert float((nocache - alone).abs().max()) < tol
    assert float((cached - alone).abs().max()) > 100 * tol


@pytest.mark.parametrize("kw", [{}, {"kl_coef": 0.05}])
def test_a_packed_step_gives_the_padded_step_weights(tiny_model, tmp_path, kw):
    padded = _trainer(tiny_model, tmp_path / "a", False, **kw)
    packed = _trainer(tiny_model, tmp_path / "b", True, max_tokens_per_micro_batch=BUDGET, **kw)
    batch = _batch(padded)
    m_padded = padded._train(batch)
    m_packed = packed._train(batch)
    mean, worst = _weights_apart(packed, padded)
    assert mean < 1e-7 and worst < 0.5e-3  # lr 1e-3 (test_grpo_streaming._weights_apart)
    for key in ("loss", "clip_frac", "ratio_mean", "kl_behaviour", "grad_norm", "tokens",
                *(("kl_ref",) if kw else ())):
        # means of per-token log-probabilities that agree to ~2e-6 (the test above)
        assert m_packed[key] == pytest.approx(m_padded[key], rel=1e-5, abs=2e-6), key
    # The cross-sample row trains something else.
    cross = CrossSample(tiny_model, TrainerConfig(lr=1e-3, packing=True, **kw), tmp_path / "c")
    cross._train(batch)
    mean, worst = _weights_apart(cross, padded)
    assert mean > 1e-5 and worst > 1.5e-3


def test_bf16_mixed_checkpointed_packed_gradient_is_the_padded_one(tiny_model, tmp_path):
    kw = {"precision": "bf16-mixed", "gradient_checkpointing": True, "kl_coef": 0.05}
    padded = _trainer(tiny_model, tmp_path, False, **kw)
    packed = _trainer(tiny_model, tmp_path, True, max_tokens_per_micro_batch=BUDGET, **kw)
    cross = CrossSample(tiny_model, TrainerConfig(packing=True, **kw), tmp_path)
    batch = _batch(padded)
    grads = []
    for tr in (padded, packed, cross):
        tr.opt.zero_grad(set_to_none=True)
        tr._minibatch(tr._rows(batch.groups), batch.version, {}, True)
        grads.append(torch.cat([p.grad.flatten() for p in tr.model.parameters()]))
    scale = float(grads[0].abs().max())
    # bfloat16 activations: rows of other shapes round differently (~1e-2 measured)
    assert float((grads[1] - grads[0]).abs().max()) / scale < 5e-2
    assert float((grads[2] - grads[0]).abs().max()) / scale > 0.2


def test_streamed_packed_step_is_the_whole_padded_step(tiny_model, tmp_path):
    padded = _trainer(tiny_model, tmp_path / "a", False)
    streamed = _trainer(tiny_model, tmp_path / "b", True, max_tokens_per_micro_batch=BUDGET)
    batch = _batch(padded)
    padded._train(batch)
    for chunk in _chunks(batch):
        streamed._accumulate(chunk)
    streamed._finish_step(batch)
    mean, worst = _weights_apart(streamed, padded)
    assert mean < 1e-7 and worst < 0.5e-3


@pytest.mark.parametrize("packed", [True, False])
def test_micro_batches_hold_every_sample_once_within_the_budget(packed):
    rng = random.Random(0)
    for trial in range(200):
        budget = rng.randint(8, 400)
        lengths = [min(budget, max(1, int(rng.lognormvariate(3, 1)))) for _ in
                   range(rng.randint(1, 60))]
        plan = plan_micro_batches(lengths, budget, packed, max_rows=None if packed else 7)
        assert sorted(i for part in plan for i in part) == list(range(len(lengths)))
        for part in plan:
            cost = (sum(lengths[i] for i in part) if packed
                    else len(part) * max(lengths[i] for i in part))
            assert cost <= budget, (trial, part)
            assert packed or (len(part) <= 7 and part == sorted(part))
        assert plan == plan_micro_batches(lengths, budget, packed,
                                          max_rows=None if packed else 7)
    # first-fit-decreasing: the longest first, each into the first part it fits
    assert plan_micro_batches([3, 9, 5, 4, 2], 10, True) == [[1], [2, 3], [0, 4]]
    # a sample longer than the budget stands alone (the trainer refuses it before training)
    assert plan_micro_batches([3, 12, 3], 10, True) == [[1], [0, 2]]


@pytest.mark.parametrize("packing", [True, False])
def test_the_trainer_forwards_never_exceed_the_budget(tiny_model, tmp_path, packing):
    tr = _trainer(tiny_model, tmp_path, packing, max_tokens_per_micro_batch=BUDGET)
    batch = _batch(tr)
    shapes = []
    tr.model.register_forward_pre_hook(
        lambda mod, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    tr._train(batch)
    assert len(shapes) > 4 and all(r * w <= BUDGET for r, w in shapes)
    assert all(r == 1 for r, _ in shapes) == packing
    trained = sum(w if packing else 0 for _, w in shapes)
    assert not packing or trained == sum(len(p) + len(r) for p, rs in zip(PROMPTS, RESPONSES)
                                         for r in rs)  # no padding computed


def test_a_budget_below_the_longest_sample_is_refused(tiny_model, tmp_path):
    with pytest.raises(TokenBudgetError, match="max_tokens_per_micro_batch 13 is below the "
                                               "longest sample, 14 tokens"):
        GRPOTrainer(tiny_model, TrainerConfig(max_tokens_per_micro_batch=13), tmp_path,
                    max_sample_tokens=14)
    GRPOTrainer(tiny_model, TrainerConfig(max_tokens_per_micro_batch=14), tmp_path,
                max_sample_tokens=14)
    # A batch with a longer sample than the budget: refused before any work.
    tr = _trainer(tiny_model, tmp_path, True, max_tokens_per_micro_batch=13)
    batch = _batch(tr)  # its longest sample: 4 + 10 tokens
    before = [p.detach().clone() for p in tr.model.parameters()]
    with pytest.raises(TokenBudgetError, match="longest sample, 14 tokens"):
        tr._train(batch)
    tr._accumulate(TrainBatch(batch.version, batch.groups[:2]))
    with pytest.raises(TokenBudgetError):
        tr._accumulate(TrainBatch(batch.version, batch.groups[2:3]))
    with pytest.raises(TokenBudgetError):
        tr._finish_step(batch)
    assert tr._pending["units"] == ["g0", "g1"] and tr.steps == 0
    assert all(torch.equal(a, b) for a, b in zip(before, tr.model.parameters()))


def test_train_check_refuses_a_budget_below_the_longest_sample(tmp_path, capsys):
    base = ["train", "--check", "--output-dir", str(tmp_path / "run")]
    # The demo's longest prompt is 4 tokens, its rollout.max_tokens 8: samples up to 12 tokens.
    assert main([*base, "--set", "trainer.max_tokens_per_micro_batch=11"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(
        "trainer.max_tokens_per_micro_batch 11 is below the longest sample, 12 tokens (a "
        "4-token prompt and rollout.max_tokens 8): raise it to at least 12"), err
    assert main([*base, "--set", "trainer.max_tokens_per_micro_batch=12"]) == 0
    capsys.readouterr()
    # Below a response of rollout.max_tokens alone: the config itself is refused.
    assert main([*base, "--set", "trainer.max_tokens_per_micro_batch=8"]) == 2
    assert "trainer.max_tokens_per_micro_batch 8 is below" in capsys.readouterr().err


def test_the_trainer_bench_runs_small_and_the_doc_holds_its_table(tmp_path, capsys):

    bench = load_bench("trainer_bench")
    assert bench.main(["--groups", "2", "--group-size", "3", "--max-response", "64",
                       "--budget", "256", "--steps", "1", "--ranks", "",
                       "--out", str(tmp_path / "r.json")]) == 0
    res = {r["mode"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    assert res["packed"]["padding_frac"] == 0.0 < res["padded"]["padding_frac"]
    assert res["packed"]["computed_tokens"] == res["padded"]["trained_tokens"]
    assert "| packed |" in capsys.readouterr().out
    doc = (Path(__file__).resolve().parents[2] / "docs" / "runtime.md").read_text()
    block = doc.split(bench.BEGIN, 1)[1].split(bench.END, 1)[0]
    assert "| padded |" in block and "| packed |" in block
