"""The trainer side on a GPU: step time, tokens/s and peak memory per precision and with or
without activation checkpointing, for a model of about 0.5B parameters built here.

For a machine with torch and CUDA but no vLLM (and no network): the model is a randomly
initialised Qwen2 of Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads, 2 KV heads, a
151,936-token vocabulary, tied embeddings: 494M parameters), written to a temporary directory
with the tiny tokenizer; nothing is downloaded. Each configuration is one ``run_training`` run
with the scripted engine of ``runtime/rollout/fake.py`` (``rollout.backend: fake``: near-instant
responses of random length up to ``--response-len``, about half of it on average) and the real
GRPO trainer on the GPU, so what is timed is the trainer's side of the production path: its
``train_step`` (forward, backward, optimizer step) and the ``export_weights`` each publish does
(a ``save_pretrained`` of the whole model), each timed where the driver calls it.

Printed per configuration: seconds per training step (mean over the steps after the first,
which pays CUDA's warm-up), trained tokens per second (prompt + response tokens through the
forward and backward), the export's seconds, and peak GPU memory (``max_memory_allocated``).
Results also go to ``--out`` as JSON. Asserts nothing. The defaults finish in well under 8
minutes on one recent GPU; a configuration that would start past ``--budget-s`` is skipped and
said so.

    python bench/gpu_trainer.py                  # the GPU measurement
    python bench/gpu_trainer.py --tiny           # a small model, on CPU if there is no GPU
    python bench/gpu_trainer.py --packing off    # padded micro-batches (default: packed)

Without CUDA (and without ``--tiny``) it exits with status 2 and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.rollout.env import configure

configure()

# What the trainer side imports (no vLLM, no matplotlib: run.plot is off)
NEEDS = ("torch", "transformers", "tokenizers", "safetensors", "pydantic", "yaml",
         "transitions", "tqdm")
# (label, trainer.precision, trainer.gradient_checkpointing)
CONFIGS = [("fp32", "fp32", False), ("fp32+ckpt", "fp32", True),
           ("bf16-mixed", "bf16-mixed", False), ("bf16-mixed+ckpt", "bf16-mixed", True),
           ("bf16", "bf16", False), ("bf16+ckpt", "bf16", True)]
HALF_B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
              num_attention_heads=14, num_key_value_heads=2, vocab_size=151_936,
              tie_word_embeddings=True)
TINY = dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1024, tie_word_embeddings=True)


def build_model(shape: dict, max_len: int, where: Path) -> int:
    """A random Qwen2 of ``shape`` with the tiny tokenizer in ``where``; its parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from runtime.models.tiny import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen2Config(**shape, max_position_embeddings=max_len, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return sum(p.numel() for p in model.parameters())


def _settings(args: argparse.Namespace, precision: str, ckpt: bool, out: Path) -> object:
    from runtime.config import load_config

    return load_config(None, {
        "rollout.backend": "fake", "rollout.fake_token_s": 1e-6,
        "rollout.max_tokens": args.response_len, "rollout.ignore_eos": True,
        "rollout.max_model_len": args.prompt_len + args.response_len,
        "staleness.max_staleness": 1, "staleness.batch_size": args.groups,
        "staleness.group_size": args.group_size, "staleness.filter_zero_variance": False,
        "trainer.device": args.device, "trainer.precision": precision,
        "trainer.gradient_checkpointing": ckpt, "trainer.micro_batch": args.micro_batch,
        "trainer.packing": args.packing == "on",
        "trainer.max_tokens_per_micro_batch": args.micro_batch * (args.prompt_len
                                                                 + args.response_len),
        "trainer.lr": 1e-6, "run.steps": args.steps, "run.output_dir": str(out),
        "run.progress": False, "run.plot": False, "run.trace": False, "run.eval_prompts": 0,
        "run.keep_weights": 1, "recovery.enabled": False, "timeouts.stuck_s": None})


def _reward(prompt: object, completion: str) -> float:
    return float(len(completion) % 2)  # anything with variance; the values do not matter


async def measure(args: argparse.Namespace, model: Path, label: str, precision: str,
                  ckpt: bool, out: Path) -> dict:
    import torch

    from runtime.session import run_training
    from runtime.tasks.base import Prompt

    # digit prompts: the fake engine's tokenizer reads digits, "+" and "="
    prompts = [Prompt("".join(str((i + k) % 10) for k in range(args.prompt_len - 1)) + "=",
                      None, i) for i in range(64)]
    cuda = torch.cuda.is_available() and args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times: dict[str, list[float]] = {"train": [], "export": []}

    def timed(driver) -> None:  # the trainer's own calls, timed where the driver makes them
        trainer = driver.trainer
        for name, attr in (("train", "train_step"), ("export", "export_weights")):
            call = getattr(trainer, attr)

            async def wrapper(*a, _call=call, _name=name):
                if cuda:
                    torch.cuda.synchronize()
                t = time.perf_counter()
                out = await _call(*a)
                if cuda:
                    torch.cuda.synchronize()
                times[_name].append(time.perf_counter() - t)
                return out

            setattr(trainer, attr, wrapper)

    result = await run_training(_settings(args, precision, ckpt, out), model, prompts, _reward,
                                out, log=lambda _: None, driver_hook=timed)
    skip = 1 if len(result.rows) > 1 else 0  # the first step pays CUDA's warm-up
    rows, train_s = result.rows[skip:], times["train"][skip:]
    samples = args.groups * args.group_size
    tokens = [r["train/tokens"] + samples * args.prompt_len for r in rows]
    row = {
        "config": label, "precision": precision, "checkpointing": ckpt,
        "train_s_per_step": fmean(train_s),
        "tokens_per_s": sum(tokens) / sum(train_s),
        "export_s": fmean(times["export"][skip:]),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "steps_timed": len(rows),
    }
    del result
    gc.collect()
    return row


def _table(rows: list[dict]) -> str:
    lines = [f"{'config':<17} {'s/step':>8} {'tokens/s':>10} {'export s':>9} {'peak GiB':>9}"]
    for r in rows:
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        lines.append(f"{r['config']:<17} {r['train_s_per_step']:>8.2f} "
                     f"{r['tokens_per_s']:>10.0f} {r['export_s']:>9.2f} {peak:>9}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true",
                    help="a 2-layer model and small batches (CPU when there is no GPU)")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS),
                    help="comma-separated subset of " + ", ".join(c[0] for c in CONFIGS))
    ap.add_argument("--steps", type=int, help="training steps per configuration (default 4)")
    ap.add_argument("--groups", type=int, help="groups per step (default 8)")
    ap.add_argument("--group-size", type=int, help="samples per group (default 8)")
    ap.add_argument("--prompt-len", type=int, help="prompt tokens (default 256)")
    ap.add_argument("--response-len", type=int, help="response tokens (default 512)")
    ap.add_argument("--micro-batch", type=int, help="sequences per forward (default 8); the "
                    "token budget per forward is this many full-length samples")
    ap.add_argument("--packing", choices=("on", "off"), default="on",
                    help="trainer.packing: samples packed in one row per micro-batch (on) or "
                         "one padded row each (off); docs/runtime.md, 'Packed sequences'")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="start no configuration after this many seconds (default 420)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "gpu_trainer.json")
    args = ap.parse_args(argv)
    import importlib.util

    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        print(f"gpu_trainer: missing {', '.join(missing)} (needs torch with CUDA, "
              f"transformers, tokenizers, safetensors, pydantic, pyyaml, transitions, tqdm; "
              f"vLLM is not needed)", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available() and not args.tiny:
        print("gpu_trainer: needs a CUDA device (torch.cuda.is_available() is False on this "
              "machine); --tiny runs a small model on CPU instead", file=sys.stderr)
        return 2
    known = {c[0]: c for c in CONFIGS}
    chosen = args.configs.split(",")
    if unknown := [c for c in chosen if c not in known]:
        print(f"gpu_trainer: unknown --configs {unknown}; choose from {', '.join(known)}",
              file=sys.stderr)
        return 2
    small = args.tiny
    for name, big, tiny in (("steps", 4, 2), ("groups", 8, 2), ("group_size", 8, 4),
                            ("prompt_len", 256, 8), ("response_len", 512, 8),
                            ("micro_batch", 8, 4)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if small else big)
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    rows: list[dict] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_trainer-") as tmp:
        model = Path(tmp) / "model"
        n = build_model(TINY if small else HALF_B, args.prompt_len + args.response_len, model)
        print(f"model: Qwen2, {n / 1e6:.0f}M parameters (random weights, built here); "
              f"device {device}, torch {torch.__version__}; {args.groups} groups x "
              f"{args.group_size} samples of {args.prompt_len} + {args.response_len} tokens "
              f"per step, micro-batch {args.micro_batch} samples' tokens, packing "
              f"{args.packing}, {args.steps} steps per config",
              flush=True)
        for label in chosen:
            if time.perf_counter() - t0 > args.budget_s:
                print(f"skipped {label}: past the {args.budget_s:.0f} s budget", flush=True)
                continue
            _, precision, ckpt = known[label]
            try:
                row = asyncio.run(measure(args, model, label, precision, ckpt,
                                          Path(tmp) / label))
            except torch.OutOfMemoryError:
                row = {"config": label, "precision": precision, "checkpointing": ckpt,
                       "error": "out of memory"}
                print(f"{label}: out of memory", flush=True)
                gc.collect()
                torch.cuda.empty_cache()
            else:
                peak = "" if row["peak_gib"] is None else f", peak {row['peak_gib']:.1f} GiB"
                print(f"{label}: {row['train_s_per_step']:.2f} s/step, "
                      f"{row['tokens_per_s']:.0f} tokens/s{peak}", flush=True)
            rows.append(row)
    done = [r for r in rows if "error" not in r]
    print()
    print(_table(done))
    print(f"\n{time.perf_counter() - t0:.0f} s in all")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": device, "parameters": n, "tiny": small,
                                    "rows": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
