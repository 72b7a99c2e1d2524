"""The trainer side on a GPU: step time, tokens/s and peak memory per precision and with or
without activation checkpointing, for a model of about 0.5B parameters built here, in one
process or sharded over N ranks (``--ranks``).

For a machine with torch and CUDA but no vLLM (and no network): the model is a randomly
initialised Qwen2 of Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads, 2 KV heads, a
151,936-token vocabulary, tied embeddings: 494M parameters), written to a temporary directory
with the tiny tokenizer; nothing is downloaded. Each configuration is one ``run_training`` run
with the scripted engine of ``runtime/rollout/fake.py`` (``rollout.backend: fake``: near-instant
responses of random length up to ``--response-len``, about half of it on average) and the real
GRPO trainer on the GPU, so what is timed is the trainer's side of the production path: its
``train_step`` (forward, backward, optimizer step) and the ``export_weights`` each publish does
(a ``save_pretrained`` of the whole model; sharded: the gather onto rank 0 and its write), each
timed where the driver calls it.

``--ranks 1,2`` runs every configuration with the sharded trainer
(``runtime/trainer/sharded.py``: ``trainer.strategy fsdp``, ``trainer.world_size`` N) at each
count: N spawned rank processes, rank r on ``cuda:r`` over NCCL (on CPU, ``--tiny``: gloo).
Without ``--ranks`` the trainer is the single-process one, in this process (``single`` in the
ranks column). More ranks than this machine has GPUs (CPUs, for a CPU run) is refused with one
line before any work. The sharded path has run only on CPU (``--tiny``, gloo): on a GPU
(NCCL, ``cuda_peak``) it has not been run.

Printed per configuration: the start-up's seconds (from ``run_training``'s call until its
driver is built: the model's load; with ranks, spawning them and each loading and sharding
the model), seconds per training step (mean over the steps after the first, which pays CUDA's
warm-up), trained tokens per second (prompt + response tokens through the forward and
backward), the export's seconds and, per rank: peak GPU memory (``max_memory_allocated`` of
that rank's process on its device; single: this process's), the bytes of parameters,
gradients and AdamW state it holds (``rank.state_bytes``: its shards) and its peak resident set
(VmHWM; single: not shown, this process holds every configuration's history). Results also go
to ``--out`` as JSON. Asserts nothing. The defaults finish in well under 8 minutes on one
recent GPU; a configuration whose training would start past ``--budget-s`` (the time gone plus
the longest start-up measured so far at that rank count, else at any) is skipped and said so.
Each configuration at each rank count starts its ranks anew, so a ``--ranks`` run wants a
subset of ``--configs`` to fit the budget.

    python bench/gpu_trainer.py                  # the GPU measurement, one process
    python bench/gpu_trainer.py --ranks 1,2 --configs bf16-mixed,bf16-mixed+ckpt
                                                 # sharded over 1 and 2 GPUs (make bench-gpu RANKS=1,2)
    python bench/gpu_trainer.py --tiny           # a small model, on CPU if there is no GPU
    python bench/gpu_trainer.py --tiny --ranks 2 # the same over 2 rank processes (gloo on CPU)
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
from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401

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


def _settings(args: argparse.Namespace, precision: str, ckpt: bool, out: Path,
              ranks: int | None) -> object:
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
        # ranks None: the single-process trainer; N: the sharded one at N ranks (1 included)
        "trainer.world_size": ranks or 1,
        "trainer.strategy": "fsdp" if ranks else "single",
        "trainer.lr": 1e-6, "run.steps": args.steps, "run.output_dir": str(out),
        "run.progress": False, "run.plot": False, "run.trace": False, "run.eval_prompts": 0,
        "run.keep_weights": 1, "recovery.enabled": False, "timeouts.stuck_s": None})


def _reward(prompt: object, completion: str) -> float:
    return float(len(completion) % 2)  # anything with variance; the values do not matter


async def measure(args: argparse.Namespace, model: Path, label: str, precision: str,
                  ckpt: bool, out: Path, ranks: int | None = None) -> dict:
    """One configuration's run; ``ranks`` None: the single-process trainer in this process,
    N: the sharded trainer's N rank processes."""
    import torch

    from runtime.session import run_training
    from runtime.tasks.base import Prompt
    from runtime.trainer.rank import state_bytes

    # digit prompts: the fake engine's tokenizer reads digits, "+" and "="
    prompts = [Prompt("".join(str((i + k) % 10) for k in range(args.prompt_len - 1)) + "=",
                      None, i) for i in range(64)]
    on_gpu = torch.cuda.is_available() and args.device.startswith("cuda")
    # With ranks this process does no CUDA work (each rank syncs its own device: a step's
    # metrics are all-reduced and read back before it answers), so it neither syncs nor
    # touches a device here.
    cuda = on_gpu and ranks is None
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times: dict[str, list[float]] = {"train": [], "export": []}
    seen: dict[str, object] = {}
    t_call = time.perf_counter()

    def timed(driver) -> None:  # the trainer's own calls, timed where the driver makes them
        seen["startup_s"] = time.perf_counter() - t_call
        trainer = seen["trainer"] = driver.trainer
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
        if ranks is not None:  # the ranks' memory, asked before the run closes them
            close = trainer.aclose

            async def aclose(_close=close) -> None:
                from runtime.trainer.sharded import RankLost

                try:
                    seen["memory"] = await asyncio.to_thread(trainer.memory)
                except RankLost:
                    pass  # the run's own error says why
                await _close()

            trainer.aclose = aclose

    result = await run_training(_settings(args, precision, ckpt, out, ranks), model, prompts,
                                _reward, out, log=lambda _: None, driver_hook=timed)
    trainer = seen.pop("trainer")
    if ranks is None:
        per_rank = [{"pid": None, "peak_rss": None,
                     **state_bytes(trainer.model, trainer.opt),  # type: ignore[attr-defined]
                     **({"cuda_peak": torch.cuda.max_memory_allocated()} if cuda else {})}]
    else:
        per_rank = seen["memory"]  # type: ignore[assignment]
    skip = 1 if len(result.rows) > 1 else 0  # the first step pays CUDA's warm-up
    rows, train_s = result.rows[skip:], times["train"][skip:]
    samples = args.groups * args.group_size
    tokens = [r["train/tokens"] + samples * args.prompt_len for r in rows]
    peaks = [r["cuda_peak"] for r in per_rank if "cuda_peak" in r]
    row = {
        "config": label, "precision": precision, "checkpointing": ckpt,
        "ranks": ranks or "single",
        "startup_s": seen["startup_s"],
        "train_s_per_step": fmean(train_s),
        "tokens_per_s": sum(tokens) / sum(train_s),
        "export_s": fmean(times["export"][skip:]),
        "peak_gib": max(peaks) / 2**30 if peaks else None,  # the largest rank's
        "per_rank": per_rank,
        "steps_timed": len(rows),
    }
    del result, trainer
    gc.collect()
    return row


def _per_rank(row: dict, key: str, scale: float, fmt: str) -> str:
    """``row``'s per-rank ``key`` values, scaled, joined by "/" in rank order ("-": none)."""
    values = [r.get(key) for r in row["per_rank"]]
    if any(v is None for v in values):
        return "-"
    return "/".join(format(v / scale, fmt) for v in values)


def _table(rows: list[dict]) -> str:
    head = ["config", "ranks", "start s", "s/step", "tokens/s", "export s",
            "peak GiB/rank", "state MiB/rank", "RSS MiB/rank"]
    body = []
    for r in rows:
        state = [dict(x, state=x["params"] + x["grads"] + x["optim"]) for x in r["per_rank"]]
        body.append([r["config"], str(r["ranks"]), f"{r['startup_s']:.1f}",
                     f"{r['train_s_per_step']:.2f}", f"{r['tokens_per_s']:.0f}",
                     f"{r['export_s']:.2f}", _per_rank(r, "cuda_peak", 2**30, ".1f"),
                     _per_rank({"per_rank": state}, "state", 2**20, ".1f"),
                     _per_rank(r, "peak_rss", 2**20, ".0f")])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return "\n".join(" ".join(x.ljust(w) if i == 0 else x.rjust(w)
                              for i, (x, w) in enumerate(zip(line, widths)))
                     for line in [head, *body])


def expected_startup(startups: dict[int | None, float], ranks: int | None) -> float:
    """The start-up to expect at ``ranks`` (None: the single process): the longest measured at
    that count, else the longest at any count (ranks load the model side by side, so a count
    not yet run is taken to start as slowly as one that has), else 0."""
    return startups.get(ranks, max(startups.values(), default=0.0))


def _ranks(text: str) -> tuple[int, ...]:
    try:
        ranks = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants comma-separated rank counts, got {text!r}"
                                         ) from None
    if not ranks or min(ranks) < 1:
        raise argparse.ArgumentTypeError(f"wants rank counts >= 1, got {text!r}")
    return ranks


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="gpu_trainer.py", description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true",
                    help="a 2-layer model and small batches (CPU when there is no GPU)")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS),
                    help="comma-separated subset of " + ", ".join(c[0] for c in CONFIGS))
    ap.add_argument("--ranks", type=_ranks,
                    help="comma-separated rank counts (e.g. 1,2): each configuration with the "
                         "sharded trainer at each count, rank r on cuda:r (default: the "
                         "single-process trainer)")
    ap.add_argument("--steps", type=int_in(1, 10**6), help="training steps per configuration (default 4)")
    ap.add_argument("--groups", type=int_in(1, 10**6), help="groups per step (default 8)")
    ap.add_argument("--group-size", type=int_in(1, 10**6), help="samples per group (default 8)")
    ap.add_argument("--prompt-len", type=int_in(1, 10**7), help="prompt tokens (default 256)")
    ap.add_argument("--response-len", type=int_in(1, 10**7), help="response tokens (default 512)")
    ap.add_argument("--micro-batch", type=int_in(1, 10**6), help="sequences per forward (default 8); the "
                    "token budget per forward is this many full-length samples")
    ap.add_argument("--packing", choices=("on", "off"), default="on",
                    help="trainer.packing: samples packed in one row per micro-batch (on) or "
                         "one padded row each (off); docs/runtime.md, 'Packed sequences'")
    ap.add_argument("--budget-s", type=float_in(0, 1e7, lo_open=True), default=420.0,
                    help="start no configuration whose training (after its start-up, the "
                         "longest measured so far) would begin after this many seconds "
                         "(default 420)")
    ap.add_argument("--out", type=out_path, default=ROOT / "out" / "bench" / "gpu_trainer.json")
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
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.ranks:
        from runtime.machine_checks import check_world_size

        try:  # one GPU per rank (cuda:r), or on CPU one CPU per rank: refused before any work
            check_world_size(max(args.ranks), args.device)
        except ValueError as exc:
            print(f"gpu_trainer: --ranks {max(args.ranks)} refused: {exc}", file=sys.stderr)
            return 2
    small = args.tiny
    for name, big, tiny in (("steps", 4, 2), ("groups", 8, 2), ("group_size", 8, 4),
                            ("prompt_len", 256, 8), ("response_len", 512, 8),
                            ("micro_batch", 8, 4)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if small else big)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    counts: list[int | None] = list(args.ranks) if args.ranks else [None]
    rows: list[dict] = []
    startups: dict[int | None, float] = {}  # the longest start-up measured, per rank count
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_trainer-") as tmp:
        model = Path(tmp) / "model"
        n = build_model(TINY if small else HALF_B, args.prompt_len + args.response_len, model)
        print(f"model: Qwen2, {n / 1e6:.0f}M parameters (random weights, built here); "
              f"device {device}, torch {torch.__version__}; {args.groups} groups x "
              f"{args.group_size} samples of {args.prompt_len} + {args.response_len} tokens "
              f"per step, micro-batch {args.micro_batch} samples' tokens, packing "
              f"{args.packing}, {args.steps} steps per config; trainer: "
              + (f"sharded, {'/'.join(map(str, args.ranks))} rank(s)" if args.ranks
                 else "single process"),
              flush=True)
        from runtime.trainer.sharded import RankLost

        for label in chosen:
            for ranks in counts:
                name = label if ranks is None else f"{label} at {ranks} rank(s)"
                gone = time.perf_counter() - t0
                expect = expected_startup(startups, ranks)
                if gone + expect > args.budget_s:
                    print(f"skipped {name}: its training would start past the "
                          f"{args.budget_s:.0f} s budget ({gone:.0f} s gone + {expect:.0f} s "
                          f"start-up)", flush=True)
                    continue
                _, precision, ckpt = known[label]
                where = Path(tmp) / (label if ranks is None else f"{label}-r{ranks}")
                error = None
                try:
                    row = asyncio.run(measure(args, model, label, precision, ckpt, where,
                                              ranks))
                except torch.OutOfMemoryError:
                    error = "out of memory"
                    gc.collect()
                    torch.cuda.empty_cache()
                except RankLost as exc:  # a rank's out of memory (or NCCL failure) is this
                    error = f"a rank failed: {exc}"
                if error is not None:
                    row = {"config": label, "precision": precision, "checkpointing": ckpt,
                           "ranks": ranks or "single", "error": error}
                    print(f"{name}: {error}", flush=True)
                else:
                    startups[ranks] = max(startups.get(ranks, 0.0), row["startup_s"])
                    peak = ("" if row["peak_gib"] is None
                            else f", peak {row['peak_gib']:.1f} GiB")
                    print(f"{name}: start {row['startup_s']:.1f} s, "
                          f"{row['train_s_per_step']:.2f} s/step, "
                          f"{row['tokens_per_s']:.0f} tokens/s{peak}", flush=True)
                rows.append(row)
    done = [r for r in rows if "error" not in r]
    print()
    print(_table(done))
    print(f"\n{time.perf_counter() - t0:.0f} s in all")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": device, "parameters": n, "tiny": small,
                                    "ranks": list(args.ranks) if args.ranks else None,
                                    "rows": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
