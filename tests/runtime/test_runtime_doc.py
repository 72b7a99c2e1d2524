"""What docs/runtime.md states about the tiny model is what the code builds (issue 25, class
11: the page said 0.8 M parameters where transformers counts 1,056,128)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_tiny_models_parameter_count_is_the_documented_one():
    from runtime.config import TinyModelConfig
    from runtime.models.tiny import TinySpec, build_model, build_tokenizer

    t = TinyModelConfig()  # the embedded default's model
    model = build_model(TinySpec(hidden_size=t.hidden_size, layers=t.layers, heads=t.heads),
                        build_tokenizer())
    count = sum(p.numel() for p in model.parameters())
    doc = (ROOT / "docs" / "runtime.md").read_text(encoding="utf-8")
    assert (f"A tiny Qwen2 ({t.layers} layers, hidden {t.hidden_size}, {t.heads} heads of "
            f"{t.hidden_size // t.heads}, {count:,} parameters)") in doc
