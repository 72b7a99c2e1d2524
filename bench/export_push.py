"""Weights from the trainer to the engine, per step, against model size, on CPU: the export
(gather + write ``weights/vN``) of the single-process trainer and of the sharded trainer, and
the push into a real vLLM engine through the runtime's own path (the driver's refit bracket:
``pause("keep")``, ``load_weights`` = ``collective_rpc("reload_weights")``, ``resume``).

For each model size (random Qwen2 models of growing shape, up to Qwen2.5-0.5B's: 24 layers,
hidden 896, a 151,936-token vocabulary, 494 M parameters; built here, nothing downloaded):

* ``single``: ``GRPOTrainer._export`` (``save_pretrained``) in this process;
* ``N ranks``: ``ShardedTrainer._export`` with ``--ranks`` rank processes (gloo): rank 0
  gathers one tensor at a time and streams it into ``model.safetensors``
  (``runtime.trainer.safetensors_writer``);
* ``N ranks, whole``: the same ranks exporting as the sharded trainer did before the stream
  (``get_model_state_dict(full_state_dict, cpu_offload)`` of the whole model onto rank 0,
  then one ``save_file``), for the memory it costs side by side;
* ``push``: a vLLM CPU engine (in this process) loading the exported directory.

Printed per size and path: seconds per export and per push (median of ``--repeats``), and how
far the exporting process's resident memory rose above where it was while it exported (sampled
every 5 ms: rank 0's for the ranks), the point of the stream. No training step runs: the
time to gather, write and load weights does not depend on their values. Asserts nothing.

    python bench/export_push.py                       # all sizes, 2 ranks (a few minutes)
    python bench/export_push.py --sizes h256x4 --repeats 1 --no-engine
    make bench-export                                 # --write: docs/runtime.md's table
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401

from runtime.trainer.rank import RankTrainer  # noqa: E402  (imports torch)

# Qwen2 shapes, named by hidden size x layers (head size 64 throughout: vLLM's CPU attention
# takes it): 12.1 M, 46.8 M, 153 M and 494 M parameters
SIZES = {
    "h256x4": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=32_000,
                tie_word_embeddings=True),
    "h512x8": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8,
                num_attention_heads=8, num_key_value_heads=2, vocab_size=32_000,
                tie_word_embeddings=True),
    "h768x12": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=4, vocab_size=64_000,
                 tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, vocab_size=151_936,
                 tie_word_embeddings=True),
}
RSS_FILE = "export_rss.json"  # rank 0's measurement of its last export, in its out_dir
DOC = ROOT / "docs" / "runtime.md"
RESULTS = ROOT / "docs" / "results" / "export_push.json"
BEGIN, END = "<!-- export-push:begin -->", "<!-- export-push:end -->"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssRise:
    """How far this process's resident set rose above its level at entry, sampled every
    5 ms by a thread while the block runs (``/proc/self/statm``; Linux)."""

    def __enter__(self) -> RssRise:
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        self.rise = self.peak - self.base


class MeasuredRank(RankTrainer):
    """A rank whose export rank 0 measures (seconds, RSS rise) into ``out_dir``/RSS_FILE."""

    def _export(self, version: int) -> Path:
        gc.collect()
        t0 = time.perf_counter()
        with RssRise() as m:
            path = super()._export(version)
        if self.rank == 0:
            (self.out_dir / RSS_FILE).write_text(json.dumps(
                {"rise": m.rise, "seconds": time.perf_counter() - t0}))
        return path


class WholeRank(MeasuredRank):
    """The export as it was before the stream: the whole model gathered onto rank 0's CPU
    (``get_model_state_dict``), then written by one ``save_file``."""

    def _write_full(self, path: Path | None) -> None:
        from safetensors.torch import save_file
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        from runtime.trainer.grpo import tied_keys

        state = get_model_state_dict(self.model, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True))
        if path is None:
            return
        tied, seen, out = tied_keys(self.model), set(), {}
        for k, v in state.items():
            if k in tied or v.data_ptr() in seen:
                continue
            seen.add(v.data_ptr())
            out[k] = v.detach().contiguous()
        path.mkdir(parents=True, exist_ok=True)
        save_file(out, str(path / "model.safetensors"), metadata={"format": "pt"})
        self.model.config.save_pretrained(path)


def build(shape: dict, where: Path) -> int:
    """A random Qwen2 of ``shape`` with the tiny tokenizer in ``where``; its parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from runtime.models.tiny import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen2Config(**shape, max_position_embeddings=256, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(where)
    tok.save_pretrained(where)
    n = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    return n


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def measure_size(name: str, shape: dict, args: argparse.Namespace, work: Path,
                 log=print) -> dict:
    from runtime.config import TrainerConfig
    from runtime.trainer.grpo import GRPOTrainer
    from runtime.trainer.sharded import ShardedTrainer

    model_dir = work / f"model-{name}"
    t0 = time.perf_counter()
    n_params = build(shape, model_dir)
    row: dict = {"size": name, "params": n_params, "build_s": time.perf_counter() - t0}
    log(f"[{name}] {n_params / 1e6:.1f} M parameters, built in {row['build_s']:.1f} s")
    settings = TrainerConfig(lr=1e-6)
    exported: Path | None = None

    # the single-process trainer, in this process
    tr = GRPOTrainer(model_dir, settings, work / f"single-{name}", seed=0,
                     keep_weights=args.repeats + 1)
    times, rises = [], []
    for v in range(1, args.repeats + 1):
        gc.collect()
        t0 = time.perf_counter()
        with RssRise() as m:
            exported = tr._export(v)
        times.append(time.perf_counter() - t0)
        rises.append(m.rise)
    row["file_bytes"] = (exported / "model.safetensors").stat().st_size
    row["single"] = {"export_s": _median(times), "rss_rise": max(rises)}
    log(f"[{name}] single: export {row['single']['export_s']:.2f} s, memory rise "
        f"{row['single']['rss_rise'] / 2**20:.0f} MiB")
    del tr
    gc.collect()

    for label, cls in (("streamed", "MeasuredRank"), ("whole", "WholeRank")):
        out = work / f"ranks-{label}-{name}"
        repeats = args.repeats if label == "streamed" else 1
        t0 = time.perf_counter()
        sh = ShardedTrainer(model_dir, settings, out, seed=0, world_size=args.ranks,
                            keep_weights=repeats + 1,
                            rank_class=f"bench.export_push:{cls}")
        start_s = time.perf_counter() - t0
        times, rises = [], []
        try:
            for v in range(1, repeats + 1):
                t0 = time.perf_counter()
                path = sh._export(v)
                times.append(time.perf_counter() - t0)
                rises.append(json.loads((out / RSS_FILE).read_text())["rise"])
                if label == "streamed":
                    exported = path
        finally:
            sh.close()
        row[label] = {"export_s": _median(times), "rss_rise": max(rises), "start_s": start_s}
        log(f"[{name}] {args.ranks} ranks, {label}: export {row[label]['export_s']:.2f} s, rank 0 "
            f"memory rise {row[label]['rss_rise'] / 2**20:.0f} MiB (ranks started in "
            f"{start_s:.1f} s)")
        gc.collect()

    if not args.no_engine:
        row["push"] = asyncio.run(_push(model_dir, exported, args.repeats))
        log(f"[{name}] push into vLLM: {row['push']['push_s']:.2f} s (engine started in "
            f"{row['push']['start_s']:.1f} s)")
    shutil.rmtree(work / f"single-{name}", ignore_errors=True)
    return row


async def _push(model_dir: Path, weights: Path, repeats: int) -> dict:
    """The driver's refit bracket on a real engine, no request running: seconds per push."""
    from runtime.rollout.vllm_engine import VLLMRollout

    t0 = time.perf_counter()
    engine = VLLMRollout(model_dir, max_model_len=256, max_num_seqs=4, seed=0)
    start_s = time.perf_counter() - t0
    times = []
    try:
        for v in range(1, repeats + 1):
            t0 = time.perf_counter()
            await engine.pause("keep")
            await engine.load_weights(weights, v)
            await engine.resume()
            times.append(time.perf_counter() - t0)
    finally:
        await engine.close()
    return {"push_s": _median(times), "start_s": start_s}


def table(rows: list[dict], ranks: int) -> str:
    mib = 2**20
    lines = [f"| model | parameters | weights MiB | single export s | {ranks} ranks export s "
             f"| {ranks} ranks whole export s | push s | export + push s, single | export + "
             f"push s, {ranks} ranks | memory rise, single MiB | rank 0 rise, {ranks} ranks "
             f"MiB | rank 0 rise, whole MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        push = r.get("push", {}).get("push_s")
        p = f"{push:.2f}" if push is not None else "-"

        def total(key: str) -> str:
            return f"{r[key]['export_s'] + push:.2f}" if push is not None else "-"

        lines.append(
            f"| {r['size']} | {r['params'] / 1e6:.1f} M | {r['file_bytes'] / mib:.0f} | "
            f"{r['single']['export_s']:.2f} | {r['streamed']['export_s']:.2f} | "
            f"{r['whole']['export_s']:.2f} | {p} | {total('single')} | {total('streamed')} | "
            f"{r['single']['rss_rise'] / mib:.0f} | {r['streamed']['rss_rise'] / mib:.0f} | "
            f"{r['whole']['rss_rise'] / mib:.0f} |")
    return "\n".join(lines)


def render(results: dict) -> str:
    """The block docs/runtime.md holds between its export-push markers, from a results file."""
    return (f"`make bench-export`: export and push per step, CPU fp32, {results['ranks']} "
            f"ranks over gloo, median of {results['repeats']} ({results['seconds']:.0f} s in "
            f"all, one run):\n\n{table(results['rows'], results['ranks'])}")


def write_doc(results: dict) -> None:
    """The results file and the page's block (``bench.docblock``)."""
    from bench.docblock import splice

    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    splice(DOC, BEGIN, END, render(results))


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="export_push.py", description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(SIZES),
                    help=f"comma-separated, of {', '.join(SIZES)} (default: all)")
    ap.add_argument("--ranks", type=int, default=2, help="sharded trainer's ranks (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="exports and pushes per size, "
                                                           "median printed (default 3)")
    ap.add_argument("--no-engine", action="store_true", help="skip the push into vLLM")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "bench" / "export_push",
                    help="a directory under which the bench makes a folder of its own for the "
                         "models and exported weights (removed at the end); nothing else in "
                         "it is touched")
    ap.add_argument("--out", type=out_path, default=ROOT / "out" / "bench" / "export_push.json")
    ap.add_argument("--table", type=in_path, metavar="JSON",
                    help="print the table of an earlier run's --out file and exit")
    ap.add_argument("--write", action="store_true",
                    help=f"keep the results in {RESULTS.relative_to(ROOT)} and the table in "
                         f"{DOC.relative_to(ROOT)} (with --table: those of that file)")
    args = ap.parse_args(argv)
    if args.table is not None:
        try:
            saved = json.loads(args.table.read_text())
            print(render(saved))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"export_push: --table {args.table}: not a file this bench wrote ({exc})",
                  file=sys.stderr)
            return 2
        if args.write:
            write_doc(saved)
        return 0
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in SIZES]
    if bad or not sizes:
        print(f"export_push: --sizes: unknown {', '.join(bad) or '(none given)'} (choose from "
              f"{', '.join(SIZES)})", file=sys.stderr)
        return 2
    if args.ranks < 1 or args.ranks > (os.cpu_count() or 1):
        print(f"export_push: --ranks {args.ranks}: between 1 and the {os.cpu_count()} CPUs "
              f"here", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print(f"export_push: --repeats {args.repeats}: at least 1", file=sys.stderr)
        return 2
    from runtime.rollout.env import configure

    configure()
    # The bench removes only the folder it made: --work may be a directory of the user's
    # (deleting --work itself, as before, would delete whatever else it held).
    try:
        args.work.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="export_push-", dir=args.work))
    except OSError as exc:
        print(f"export_push: --work {args.work}: cannot make a folder in it ({exc.strerror})",
              file=sys.stderr)
        return 2
    rows = []
    t0 = time.perf_counter()
    try:
        for name in sizes:
            rows.append(measure_size(name, SIZES[name], args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    took = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = {"ranks": args.ranks, "repeats": args.repeats, "seconds": took, "rows": rows}
    args.out.write_text(json.dumps(results, indent=1))
    print(f"\n{render(results)}\n\n(results: {args.out})")
    if args.write:
        write_doc(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
