"""OpenRLHF 0.11.2's async trainer as shipped against OpenRLHF with Reserve–Occupy, on one
schedule.

Each row runs OpenRLHF's own async actors (``GenerateSamplesActor`` / ``TrainingActor`` as
shipped, or the plugin's subclasses of them) on a local Ray bound to 127.0.0.1, with the
schedule engine of tests/integrations/openrlhf_harness.py: every prompt group takes a seeded
time (a long tail of stragglers), one token per 20 ms, each token stamped with the weight
version it was made under; a training step takes ``--train-s``. As shipped: ``async_queue_size``
1 and 2, and 1 with ``vllm_generate_batch_size`` twice the batch (OpenRLHF's over-sampling: one
vLLM call serves two steps), partial rollout off and on. With Reserve–Occupy: eta 1 and 2,
partial rollout off and on. Columns (measured on the engine's stamps, the same way for every
row): trained samples and steps; staleness of a trained sample (the trainer's weight version
minus its first token's: max / mean); its version span (how many weight versions its tokens
came from: max / mean) and how many trained samples span more than one; groups dropped; seconds
the trainer waited for a batch; the run's wall time. Wall-clock: the waits move with the
host's load, the staleness columns less so.

    python bench/openrlhf_compare.py [--prompts 24] [--batch 4] [--seeds 0,1] [--write]

``--write`` writes docs/results/openrlhf_compare.json and the table into
docs/porting/openrlhf.md between its ``openrlhf-compare`` markers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docblock import between, splice  # noqa: E402
from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on 127.0.0.1 only
DOC = ROOT / "docs" / "porting" / "openrlhf.md"
RESULTS = ROOT / "docs" / "results" / "openrlhf_compare.json"
START, END = "<!-- openrlhf-compare:start -->", "<!-- openrlhf-compare:end -->"

RUNS = [("OpenRLHF queue 1", {"eta": None, "queue_size": 1}),
        ("OpenRLHF queue 2", {"eta": None, "queue_size": 2}),
        ("OpenRLHF queue 1, over-sampling 2x", {"eta": None, "queue_size": 1, "oversample": 2}),
        ("+ Reserve–Occupy eta 1", {"eta": 1}),
        ("+ Reserve–Occupy eta 2", {"eta": 2})]


def measure(r, seed: int, partial: bool) -> dict:
    stale, spans = r.staleness, r.spans
    return {"run": r.name, "seed": seed, "partial": partial, "trained": len(r.trained),
            "steps": r.steps, "stale_max": max(stale),
            "stale_mean": round(sum(stale) / len(stale), 3), "span_max": max(spans),
            "span_mean": round(sum(spans) / len(spans), 3),
            "multi_version": sum(1 for s in spans if s > 1), "dropped": r.dropped,
            "wait_s": round(r.wait_s, 2), "wall_s": round(r.wall_s, 2),
            "trace_ok": None if r.trace is None else bool(_check(r.trace))}


def _check(trace) -> bool:
    from tests.integrations.openrlhf_harness import check_trace

    return check_trace(trace).ok


def render(results: dict) -> str:
    s = results["settings"]
    head = ("| seed | run | partial rollout | trained samples (steps) | staleness max / mean | "
            "version span max / mean | samples spanning > 1 version | dropped | trainer waited s "
            "| run s |")
    lines = [f"{s['prompts']} prompt groups of {s['n_samples']} samples, {s['batch']} groups a "
             f"step, training {s['train_s']} s a step, generation 0.5-1.5 x {s['mean_s']} s a "
             f"group, {int(s['tail'] * 100)} % of groups x{s['tail_x']:g} (stragglers); "
             f"{s['host']}.", "", head,
             "|" + "|".join("---" for _ in head.split("|")[1:-1]) + "|"]
    for r in results["runs"]:
        lines.append(f"| {r['seed']} | {r['run']} | {'on' if r['partial'] else 'off'} | "
                     f"{r['trained']} ({r['steps']}) | {r['stale_max']} / {r['stale_mean']:.2f} | "
                     f"{r['span_max']} / {r['span_mean']:.2f} | {r['multi_version']} | "
                     f"{r['dropped']} | {r['wait_s']:.2f} | {r['wall_s']:.2f} |")
    return "\n".join(lines)


def doc_block(text: str) -> str:
    return between(text, START, END)


def write(results: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    splice(DOC, START, END, render(results))


def main(argv: list[str] | None = None) -> None:
    ap = Parser(prog="openrlhf_compare.py", description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int_in(1, 10**6), default=24)
    ap.add_argument("--batch", type=int_in(1, 10**6), default=4)
    ap.add_argument("--n-samples", type=int_in(1, 10**4), default=2)
    ap.add_argument("--train-s", type=float_in(0, 3600), default=1.0)
    ap.add_argument("--seeds", type=int_list(0, 2**32 - 1), default=[0, 1])
    ap.add_argument("--write", action="store_true",
                    help=f"write {RESULTS.name} and {DOC.name}'s table")
    args = ap.parse_args(argv)
    seeds = args.seeds

    from tests.integrations import openrlhf_harness as h

    VLLMLock = h.import_openrlhf().VLLMLock
    import ray

    from runtime.ray_backend import loopback

    t0 = time.monotonic()
    h.ray_init()
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {loopback.LOOPBACK}
    lock = VLLMLock.remote()
    print(f"Ray on {loopback.LOOPBACK} up in {time.monotonic() - t0:.1f} s", flush=True)
    shape = {"mean_s": 0.25, "tail": 0.15, "tail_x": 5.0}
    settings = {"prompts": args.prompts, "batch": args.batch, "n_samples": args.n_samples,
                "train_s": args.train_s, **shape,
                "host": f"{os.cpu_count()} CPUs, Ray {ray.__version__}, one run at a time"}
    runs = []
    try:
        for seed in seeds:
            sched = h.durations(args.prompts, seed, **shape)
            for partial in (False, True):
                for name, kw in RUNS:
                    r = h.run(name, partial=partial, sched=sched, lock=lock,
                              batch_size=args.batch, n_samples=args.n_samples,
                              train_s=args.train_s, **kw)
                    row = measure(r, seed, partial)
                    if row["trace_ok"] is False:
                        raise SystemExit(f"{name}: the controller's trace fails check-trace")
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()
    results = {"settings": settings, "runs": runs}
    print()
    print(render(results))
    if args.write:
        write(results)
        print(f"\nwrote {RESULTS.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
