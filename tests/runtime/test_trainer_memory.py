"""The trainer's memory and schedule settings, and checkpoints other tools load: bf16 mixed and
pure bfloat16 steps still move probability the right way, activation checkpointing leaves the
gradient unchanged, the learning rate follows warm-up and decay (and a resumed trainer continues
it), and every checkpoint is a model directory ``from_pretrained`` loads, tied weights too."""

from __future__ import annotations

import math

import pytest
import torch

from runtime.config import TrainerConfig
from runtime.trainer.grpo import GRPOTrainer, lr_at

from .test_grpo import PROMPT, _batch


def _trainer(model, tmp_path, total_steps=None, **kw) -> GRPOTrainer:
    return GRPOTrainer(model, TrainerConfig(**kw), tmp_path, total_steps=total_steps)


def test_lr_at_warms_up_then_decays():
    assert [lr_at(k, 10, warmup=4) for k in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    lin = [lr_at(k, 10, warmup=2, schedule="linear", min_ratio=0.1) for k in range(11)]
    assert lin[:3] == [0.5, 1.0, 1.0] and lin[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lin[1:], lin[2:]))
    cos = [lr_at(k, 10, schedule="cosine") for k in range(11)]
    assert cos[0] == 1.0 and cos[5] == pytest.approx(0.5) and cos[10] == pytest.approx(0.0)
    assert lr_at(50, 10, schedule="cosine", min_ratio=0.2) == pytest.approx(0.2)  # past the end


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16"])
def test_a_bf16_step_moves_probability_towards_rewarded_samples(tiny_model, tmp_path,
                                                                precision):
    tr = _trainer(tiny_model, tmp_path, precision=precision, lr=1e-3, max_grad_norm=None)
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    assert all(p.dtype == want for p in tr.model.parameters())
    good, bad = [13, 12, 2], [7, 2]
    before = [sum(x) for x in tr.score([PROMPT] * 2, [good, bad])]
    metrics = tr._train(_batch(tr, [good, bad], [1.0, 0.0]))
    after = [sum(x) for x in tr.score([PROMPT] * 2, [good, bad])]
    assert after[0] - after[1] > before[0] - before[1] + 0.1
    assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0


def test_activation_checkpointing_leaves_the_update_unchanged(tiny_model, tmp_path):
    plain = _trainer(tiny_model, tmp_path / "a", lr=1e-3)
    ckpt = _trainer(tiny_model, tmp_path / "b", lr=1e-3, gradient_checkpointing=True)
    assert ckpt.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    good, bad = [13, 12, 2], [7, 2]
    m1 = plain._train(_batch(plain, [good, bad], [1.0, 0.0]))
    m2 = ckpt._train(_batch(ckpt, [good, bad], [1.0, 0.0]))
    assert m1["grad_norm"] == pytest.approx(m2["grad_norm"], rel=1e-5)
    for (n, a), b in zip(plain.model.named_parameters(), ckpt.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6), n


def test_the_schedule_is_applied_and_continues_after_resume(tiny_model, tmp_path):
    kw = dict(lr=1e-3, warmup_steps=2, lr_schedule="linear", min_lr_ratio=0.0)
    tr = _trainer(tiny_model, tmp_path / "a", total_steps=4, **kw)
    good, bad = [13, 12, 2], [7, 2]
    lrs = [tr._train(_batch(tr, [good, bad], [1.0, 0.0]))["lr"] for _ in range(3)]
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3])  # warm-up, then linear decay from step 2
    tr._save(tmp_path / "ck")
    again = _trainer(tiny_model, tmp_path / "b", total_steps=4, **kw)
    again._load(tmp_path / "ck")
    assert again.steps == 3 and again.lr() == pytest.approx(5e-4)


def test_a_checkpoint_is_a_model_directory_transformers_loads(tiny_chat_model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tr = _trainer(tiny_chat_model, tmp_path, precision="bf16-mixed", lr=1e-2)
    tok = tr.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "2+2="}],
                                                tokenize=False, add_generation_prompt=True))
    tr._train(_batch(tr, [[13, 12, 2], [7, 2]], [1.0, 0.0]))
    tr._save(tmp_path / "checkpoint")
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "checkpoint")).eval()
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "checkpoint"))
    assert loaded.chat_template == tok.chat_template and loaded.encode("a b") == tok.encode("a b")
    ids = torch.tensor([prompt])
    with torch.no_grad():
        ours = tr.model.eval()(input_ids=ids).logits
        theirs = model(input_ids=ids).logits
    assert torch.allclose(ours, theirs, atol=1e-5)  # the trained weights, not the base ones
    base = AutoModelForCausalLM.from_pretrained(str(tiny_chat_model)).eval()
    with torch.no_grad():
        assert not torch.allclose(base(input_ids=ids).logits, theirs, atol=1e-3)


def test_tied_embeddings_save_once_and_resume(tiny_model, tmp_path):
    """Small instruct models (Qwen2.5-0.5B, Llama-3.2-1B) tie the output layer to the input
    embeddings; safetensors refuses the shared tensor twice and from_pretrained re-ties it."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(str(tiny_model))
    config.tie_word_embeddings = True
    src = tmp_path / "tied"
    AutoModelForCausalLM.from_config(config).save_pretrained(src)
    AutoTokenizer.from_pretrained(str(tiny_model)).save_pretrained(src)
    tr = _trainer(src, tmp_path / "a", lr=1e-2)
    tr._train(_batch(tr, [[13, 12, 2], [7, 2]], [1.0, 0.0]))
    tr._save(tmp_path / "ck")
    assert "lm_head.weight" not in load_file(str(tmp_path / "ck" / "model.safetensors"))
    again = _trainer(src, tmp_path / "b")
    again._load(tmp_path / "ck")
    assert again.model.lm_head.weight.data_ptr() == again.model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(again.model.lm_head.weight, tr.model.lm_head.weight)
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ck"))
    assert torch.equal(loaded.lm_head.weight, tr.model.lm_head.weight)
