"""The trainer's tokens/s with padded and with packed micro-batches, side by side, on one
seeded long-tail batch (``make bench-trainer``).

The batch: ``--groups`` groups of ``--group-size`` samples, prompts of ``--prompt-len``
tokens, response lengths drawn from a lognormal (median ``--median``, sigma ``--sigma``,
capped at ``--max-response``), the shape of reasoning rollouts: most answers short, a few
long. The model: a randomly initialised Qwen2 (``--shape``: ``tiny``, 2 layers of 128; or
``small``, 4 layers of 256 with a 32k vocabulary) with the tiny tokenizer, written to a temporary
directory; nothing is downloaded. Each mode is the real ``GRPOTrainer._train`` (forward,
backward, optimizer step) on the same batch, with the same ``trainer.max_tokens_per_micro_batch``;
the steps after a first warm-up one are timed, modes interleaved so that machine load hits both.

Printed per mode: micro-batches per step, tokens computed (padded rows include their padding),
the padding fraction (computed tokens that are padding), seconds per step and trained tokens/s
(prompt + response tokens of the batch, the same for both, per second). Asserts nothing.
``--write`` puts the table into docs/runtime.md between its ``trainer-bench`` markers.

    python bench/trainer_bench.py                 # CPU, ~1 min on one core
    python bench/trainer_bench.py --device cuda --shape small --groups 64
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docblock import splice  # noqa: E402

from runtime.rollout.env import configure  # noqa: E402

configure()

SHAPES = {
    "tiny": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                 tie_word_embeddings=True),
    "small": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=32_768,
                  tie_word_embeddings=True),
}
DOC = ROOT / "docs" / "runtime.md"
BEGIN, END = "<!-- trainer-bench:begin -->", "<!-- trainer-bench:end -->"


def build_model(shape: dict, max_len: int, where: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from runtime.models.tiny import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen2Config(**shape, max_position_embeddings=max_len, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(where)
    tok.save_pretrained(where)


def long_tail_batch(args: argparse.Namespace, vocab: int):  # type: ignore[no-untyped-def]
    """The seeded batch: lognormal response lengths; random ids; behaviour log-probabilities
    near the trainer's (the ratio's value does not change the work)."""
    from runtime.trainer.base import GroupSample, Sample, TrainBatch

    rng = random.Random(args.seed)
    groups = []
    for g in range(args.groups):
        prompt = tuple(rng.randrange(3, vocab) for _ in range(args.prompt_len))
        samples = []
        for i in range(args.group_size):
            n = min(args.max_response, max(1, round(rng.lognormvariate(
                __import__("math").log(args.median), args.sigma))))
            ids = tuple(rng.randrange(3, vocab) for _ in range(n))
            samples.append(Sample(ids, tuple(-7.0 for _ in ids), tuple(0 for _ in ids),
                                  float(rng.random() < 0.5), "stop", 1, i))
        groups.append(GroupSample(f"g{g}", g, prompt, 0, 0, tuple(samples)))
    return TrainBatch(0, tuple(groups))


def plan_cost(trainer, batch) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """(micro-batches, tokens computed, tokens trained) of one step's single pass."""
    rows = trainer._rows(batch.groups)
    prompts, responses = [r[0] for r in rows], [r[1] for r in rows]
    plan = trainer._micro_batches(prompts, responses)
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    computed = sum(sum(lengths[i] for i in part) if trainer.packing
                   else len(part) * max(lengths[i] for i in part) for part in plan)
    return len(plan), computed, sum(lengths)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--median", type=float, default=48.0)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--max-response", type=int, default=1024)
    ap.add_argument("--budget", type=int, default=4096, help="max_tokens_per_micro_batch")
    ap.add_argument("--micro-batch", type=int, default=64, help="rows cap (padded)")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per mode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--write", action="store_true", help="put the table in docs/runtime.md")
    args = ap.parse_args(argv)

    import torch

    from runtime.config import TrainerConfig
    from runtime.trainer.grpo import GRPOTrainer

    shape = SHAPES[args.shape]
    modes = ("padded", "packed")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_model(shape, args.prompt_len + args.max_response + 8, model)
        batch = long_tail_batch(args, shape["vocab_size"])
        trainers = {m: GRPOTrainer(model, TrainerConfig(
            lr=1e-6, packing=m == "packed", max_tokens_per_micro_batch=args.budget,
            micro_batch=args.micro_batch, device=args.device, threads=args.threads,
            precision=args.precision), Path(tmp) / m, seed=0) for m in modes}
        times: dict[str, list[float]] = {m: [] for m in modes}
        cuda = args.device.startswith("cuda")
        for step in range(args.steps + 1):
            for m in modes:
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                trainers[m]._train(batch)
                if cuda:
                    torch.cuda.synchronize()
                if step:  # the first step of each is warm-up
                    times[m].append(time.perf_counter() - t0)
        results = []
        for m in modes:
            parts, computed, trained = plan_cost(trainers[m], batch)
            s = median(times[m])
            results.append({"mode": m, "micro_batches": parts, "computed_tokens": computed,
                            "trained_tokens": trained,
                            "padding_frac": 1 - trained / computed, "step_s": s,
                            "tokens_per_s": trained / s})
    lengths = sorted(len(smp.token_ids) for _, smp in batch.samples)
    setting = (f"{args.shape} Qwen2 ({shape['num_hidden_layers']} layers of "
               f"{shape['hidden_size']}, vocab {shape['vocab_size']}), {args.device}, "
               f"{args.precision}, {args.threads} thread(s); {args.groups} groups x "
               f"{args.group_size}, prompts {args.prompt_len} tokens, responses lognormal "
               f"(median {args.median:g}, sigma {args.sigma:g}, cap {args.max_response}: "
               f"min {lengths[0]}, median {lengths[len(lengths) // 2]}, max {lengths[-1]}), "
               f"max_tokens_per_micro_batch {args.budget}, seed {args.seed}; median of "
               f"{args.steps} steps")
    lines = ["| mode | micro-batches | tokens computed | padding | s/step | trained tokens/s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['mode']} | {r['micro_batches']} | {r['computed_tokens']} | "
                     f"{r['padding_frac']:.0%} | {r['step_s']:.2f} | {r['tokens_per_s']:.0f} |")
    speedup = results[1]["tokens_per_s"] / results[0]["tokens_per_s"]
    ideal = results[0]["computed_tokens"] / results[0]["trained_tokens"]
    summary = (f"Packed / padded tokens/s: {speedup:.2f}x; the padding alone would give "
               f"{ideal:.2f}x (padded computes {ideal:.2f} tokens per trained token).")
    table = "\n".join(lines)
    print(setting)
    print(table)
    print(summary)
    if args.out:
        args.out.write_text(json.dumps({"setting": setting, "results": results,
                                        "speedup": speedup}, indent=2))
    if args.write:
        try:
            splice(DOC, BEGIN, END, f"`make bench-trainer` ({setting}):\n\n{table}\n\n{summary}")
        except ValueError as exc:  # a marker missing: say which, leave the page alone
            print(f"{DOC}: {exc}", file=sys.stderr)
            return 2
        print(f"wrote the table into {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
