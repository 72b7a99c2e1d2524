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

Trainers: the single process (``single``) and, for each count in ``--ranks`` (default 1,2),
the sharded trainer (``runtime.trainer.sharded``: that many rank processes, FSDP2), each in
each of ``--modes``; their steps interleaved too.

Printed per trainer and mode: micro-batches per step (sharded: the most of any rank), tokens
computed (padded rows include their padding; summed over ranks), the padding fraction (computed
tokens that are padding), seconds per step, trained tokens/s (prompt + response tokens of the
batch, the same for all, per second), export seconds per step (``_export`` after each step),
per rank the bytes of parameters + gradients + optimiser state it holds (its shards' local
shapes: ``rank.state_bytes``; the largest rank) and its peak resident set (VmHWM; ``single``:
the bench process, which holds every single-process trainer). Asserts nothing.
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
from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401

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
    from runtime.records import GroupSample, Sample, TrainBatch

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


def plan_cost(trainer, batch, world: int = 1) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """(micro-batches, tokens computed, tokens trained) of one step's single pass; with
    ``world`` ranks, each rank plans its own rows (``rank.assign``): the most micro-batches of
    any rank (the others run empty ones to match) and the tokens computed summed over ranks."""
    from runtime.trainer.rank import assign

    rows = trainer._rows(batch.groups)
    prompts, responses = [r[0] for r in rows], [r[1] for r in rows]
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    most, computed = 0, 0
    for mine in assign(rows, world):
        plan = trainer._micro_batches([prompts[i] for i in mine], [responses[i] for i in mine])
        most = max(most, len(plan))
        computed += sum(sum(lengths[mine[i]] for i in part) if trainer.packing
                        else len(part) * max(lengths[mine[i]] for i in part) for part in plan)
    return most, computed, sum(lengths)


def _ranks(text: str) -> tuple[int, ...]:
    try:
        ranks = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ranks wants comma-separated counts, got {text!r}") from None
    if any(r < 1 for r in ranks):
        raise argparse.ArgumentTypeError(f"--ranks wants counts >= 1, got {text!r}")
    return ranks


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    if not modes or set(modes) - {"padded", "packed"}:
        raise argparse.ArgumentTypeError(f"--modes wants padded and/or packed, got {text!r}")
    return modes


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="trainer_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int_in(1, 4096), default=1)
    ap.add_argument("--groups", type=int_in(1, 10**6), default=8)
    ap.add_argument("--group-size", type=int_in(1, 10**6), default=8)
    ap.add_argument("--prompt-len", type=int_in(1, 10**7), default=32)
    ap.add_argument("--median", type=float_in(0, 1e7, lo_open=True), default=48.0)
    ap.add_argument("--sigma", type=float_in(0, 5), default=1.0)
    ap.add_argument("--max-response", type=int_in(1, 10**7), default=1024)
    ap.add_argument("--budget", type=int_in(1, 10**9), default=4096, help="max_tokens_per_micro_batch")
    ap.add_argument("--micro-batch", type=int_in(1, 10**6), default=64, help="rows cap (padded)")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--steps", type=int_in(1, 10**6), default=3, help="timed steps per mode")
    ap.add_argument("--ranks", type=_ranks, default=(1, 2),
                    help="sharded-trainer world sizes to run besides the single process "
                         "(comma-separated; '' for none)")
    ap.add_argument("--modes", type=_modes, default=("padded", "packed"))
    ap.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0)
    ap.add_argument("--out", type=out_path, help="write the results as JSON here")
    ap.add_argument("--write", action="store_true", help="put the table in docs/runtime.md")
    args = ap.parse_args(argv)

    import torch

    from runtime.config import TrainerConfig
    from runtime.trainer.grpo import GRPOTrainer
    from runtime.trainer.rank import peak_rss_bytes, state_bytes
    from runtime.trainer.sharded import ShardedTrainer

    shape = SHAPES[args.shape]
    modes = args.modes
    runs = [("single", m) for m in modes] + [(f"{w} rank{'s' * (w > 1)}", m)
                                             for w in args.ranks for m in modes]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_model(shape, args.prompt_len + args.max_response + 8, model)
        batch = long_tail_batch(args, shape["vocab_size"])
        trainers: dict[tuple[str, str], object] = {}
        try:
            for key in runs:
                kind, m = key
                settings = TrainerConfig(
                    lr=1e-6, packing=m == "packed", max_tokens_per_micro_batch=args.budget,
                    micro_batch=args.micro_batch, device=args.device, threads=args.threads,
                    precision=args.precision)
                where = Path(tmp) / f"{kind.replace(' ', '')}-{m}"
                trainers[key] = (GRPOTrainer(model, settings, where, seed=0) if kind == "single"
                                 else ShardedTrainer(model, settings, where, seed=0,
                                                     world_size=int(kind.split()[0])))
            times: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
            exports: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
            cuda = args.device.startswith("cuda")
            for step in range(args.steps + 1):
                for key in runs:  # interleaved, so that machine load hits every run
                    tr = trainers[key]
                    if cuda:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    tr._train(batch)  # type: ignore[attr-defined]
                    if cuda:
                        torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    tr._export(step + 1)  # type: ignore[attr-defined]
                    if step:  # the first step of each is warm-up
                        times[key].append(t1 - t0)
                        exports[key].append(time.perf_counter() - t1)
            results = []
            for key in runs:
                kind, m = key
                tr = trainers[key]
                if isinstance(tr, ShardedTrainer):
                    ranks = tr.memory()
                else:  # the bench process itself: its peak holds every single-process trainer
                    ranks = [{"pid": 0, "peak_rss": peak_rss_bytes(),
                              **state_bytes(tr.model, tr.opt)}]  # type: ignore[attr-defined]
                parts, computed, trained = plan_cost(trainers[("single", m)], batch,
                                                     len(ranks) if kind != "single" else 1)
                s = median(times[key])
                results.append({
                    "trainer": kind, "mode": m, "world": len(ranks), "micro_batches": parts,
                    "computed_tokens": computed, "trained_tokens": trained,
                    "padding_frac": 1 - trained / computed, "step_s": s,
                    "tokens_per_s": trained / s, "export_s": median(exports[key]),
                    "state_bytes": max(r["params"] + r["grads"] + r["optim"] for r in ranks),
                    "peak_rss_bytes": max(r["peak_rss"] for r in ranks),
                    "ranks": ranks})
        finally:
            for tr in trainers.values():
                if isinstance(tr, ShardedTrainer):
                    tr.close()
    lengths = sorted(len(smp.token_ids) for _, smp in batch.samples)
    n_params = results[0]["ranks"][0]["params"] // 4 if args.precision != "bf16" else 0
    setting = (f"{args.shape} Qwen2 ({shape['num_hidden_layers']} layers of "
               f"{shape['hidden_size']}, vocab {shape['vocab_size']}"
               + (f", {n_params / 1e6:.2f} M parameters" if n_params else "")
               + f"), {args.device}, "
               f"{args.precision}, {args.threads} thread(s) per process; {args.groups} groups x "
               f"{args.group_size}, prompts {args.prompt_len} tokens, responses lognormal "
               f"(median {args.median:g}, sigma {args.sigma:g}, cap {args.max_response}: "
               f"min {lengths[0]}, median {lengths[len(lengths) // 2]}, max {lengths[-1]}), "
               f"max_tokens_per_micro_batch {args.budget}, seed {args.seed}; median of "
               f"{args.steps} steps")
    mib = 1 << 20
    lines = ["| trainer | mode | micro-batches | tokens computed | padding | s/step | "
             "trained tokens/s | export s/step | per-rank params+grads+optim MiB | "
             "per-rank peak RSS MiB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['trainer']} | {r['mode']} | {r['micro_batches']} | "
                     f"{r['computed_tokens']} | {r['padding_frac']:.0%} | {r['step_s']:.2f} | "
                     f"{r['tokens_per_s']:.0f} | {r['export_s']:.3f} | "
                     f"{r['state_bytes'] / mib:.2f} | {r['peak_rss_bytes'] / mib:.0f} |")
    notes = []
    by = {(r["trainer"], r["mode"]): r for r in results}
    for kind in dict.fromkeys(r["trainer"] for r in results):
        if "padded" in modes and "packed" in modes:
            pad, pack = by[(kind, "padded")], by[(kind, "packed")]
            notes.append(f"{kind}: packed / padded tokens/s "
                         f"{pack['tokens_per_s'] / pad['tokens_per_s']:.2f}x against the "
                         f"padding's {pad['computed_tokens'] / pad['trained_tokens']:.2f}x "
                         f"(tokens computed per trained token, padded)")
    worlds = sorted({r["world"] for r in results if r["trainer"] != "single"})
    one = by[("single", modes[0])]["state_bytes"]
    for w in worlds:
        r = next(x for x in results if x["world"] == w and x["trainer"] != "single")
        notes.append(f"per-rank state at {w} rank{'s' * (w > 1)} / single process: "
                     f"{r['state_bytes'] / one:.2f}")
    summary = "; ".join(notes) + "."
    summary = summary[0].upper() + summary[1:]
    table = "\n".join(lines)
    print(setting)
    print(table)
    print(summary)
    if args.out:
        args.out.write_text(json.dumps({"setting": setting, "results": results,
                                        "summary": summary}, indent=2))
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
