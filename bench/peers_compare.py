"""Every staleness rule the runtime drives (``staleness.policy``) on the real vLLM CPU engine,
on a long-tail workload, side by side in one process: ``make bench-peers``.

The grid: each policy x trainer streaming off/on x ``rollout.refit`` abort/keep x eta, per
seed. Streaming on runs for the rules that stream: ``reserve_occupy`` and the peers whose
simulator policy streams (``runtime.peers.peer_streams``: ``nemo_in_order``,
``nemo_weight_fifo``, ``unbounded``); the runtime refuses ``trainer.streaming`` with the others.
Every row shows its ratio to the reference of the same seed and eta, ``nemo_in_order``
whole-batch with ``keep`` (in-flight refit; ``REF``), and, when the grid ran it, to NeMo-RL as
shipped, ``nemo_in_order`` streaming with ``keep`` (``SHIPPED``; ``ratio_shipped``).

Workload. The runtime gives one ``rollout.max_tokens`` to every request, so the long tail is
made here, in the bench, with no runtime option: ``LongTail`` wraps the engine and gives each
candidate (a unit's sample, the same one across its resumed segments) its own length cap, drawn
from a lognormal (median ``--median`` tokens, sigma ``--sigma``, at most ``rollout.max_tokens``),
seeded by (seed, unit, candidate), with ``rollout.ignore_eos`` so every answer runs to its cap.
The same seed gives every policy the same lengths for the same unit ids. A resumed segment
(``refit: abort`` ends running requests; the driver resumes them) keeps its candidate's cap.
The evaluation requests are not capped (``rollout.max_tokens``).

Task. The shipped arithmetic prompts on the tiny model; the reward is the fraction of the digit
1 in the answer (length-free, so it does not itself pay a long or a short answer, and it varies
inside every group, so every step moves the weights). Held-out evaluation: the last
``run.eval_prompts`` prompts, never trained on (``run.eval_holdout``), scored before and after.

Per run: generated tokens/s, trained tokens/s (tokens trained / wall time), steps/s, trained
staleness (max, mean over trained units), units dropped (units aborted by the rule or the run,
not those in flight at the end), wasted tokens (the tokens of those units' samples), length bias
(mean trained / mean admitted length), trainer idle (fraction of the wall time), eval reward
before / after and reward gained per wall-clock minute. The runs of a seed and eta follow each
other in the grid's order, seeds in turn, so load drifts across the grid; each run is short.
``--write`` stores docs/results/peers_compare.json and the table of docs/peers.md (means over the
seeds; ratios are the mean of each seed's ratio to its own reference).

    python bench/peers_compare.py --seeds 0 --etas 1,2 --steps 6 --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from refit_compare import SETTINGS as REFIT_SETTINGS  # noqa: E402  (configures vLLM's env)
from refit_compare import _g  # noqa: E402

from runtime.peers import POLICY_CHOICES, REFERENCE, peer_streams  # noqa: E402

REF = ("nemo_in_order", False, "keep")  # (policy, streaming, refit) every row is compared to
SHIPPED = ("nemo_in_order", True, "keep")  # NeMo-RL as shipped: each row's second ratio
REFITS = ("abort", "keep")
SETTINGS = {**{k: v for k, v in REFIT_SETTINGS.items() if k not in ("run.seed",
                                                                    "run.eval_prompts")},
            "rollout.max_tokens": 96, "run.eval_prompts": 16, "run.eval_holdout": True,
            "run.eval_samples": 4, "run.trace": True}
MEDIAN, SIGMA = 12.0, 1.0

DOC = ROOT / "docs" / "peers.md"
RESULTS = ROOT / "docs" / "results" / "peers_compare.json"
BEGIN, END = "<!-- begin: peers-compare (generated) -->", "<!-- end: peers-compare -->"


def ones_fraction(prompt: Any, completion: str) -> float:
    return completion.count("1") / max(1, len(completion))


class LongTail:
    """The engine, with each candidate's answer capped at its own lognormal length."""

    def __init__(self, engine: Any, max_tokens: int, seed: int, median: float, sigma: float):
        self.engine, self.max_tokens, self.seed = engine, max_tokens, seed
        self.median, self.sigma = median, sigma
        self.caps: dict[str, int] = {}

    def cap(self, key: str) -> int:
        if key not in self.caps:
            z = random.Random(f"{self.seed}:{key}").gauss(0.0, 1.0)
            self.caps[key] = max(1, min(self.max_tokens,
                                        round(self.median * math.exp(self.sigma * z))))
        return self.caps[key]

    async def generate(self, request: Any) -> Any:
        from dataclasses import replace

        key, sep, _ = request.request_id.rpartition("-s")  # unit-cI-sN: the candidate
        if not sep or request.request_id.startswith("eval"):
            return await self.engine.generate(request)
        kept = self.max_tokens - request.max_tokens  # the driver resumes with the rest
        left = max(1, self.cap(key) - kept)
        return await self.engine.generate(replace(request, max_tokens=min(left,
                                                                          request.max_tokens)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def grid(policies: list[str], etas: list[int], refits: list[str],
         streaming: list[bool]) -> list[tuple[str, bool, str, int]]:
    """(policy, streaming, refit, eta) in the table's order; streaming on only for the rules
    that stream (reserve_occupy, and a peer whose simulator policy streams)."""
    return [(p, s, r, eta) for eta in etas for p in policies
            for s in (streaming if p == REFERENCE or peer_streams(p)
                      else [m for m in streaming if not m])
            for r in refits]


def _row(result: Any, policy: str, streaming: bool, refit: str, eta: int, seed: int
         ) -> dict[str, Any]:
    s = result.summary
    hist = {int(k): v for k, v in s["staleness"].items()}
    n = sum(hist.values())
    fates = s.get("length_by_fate") or {}
    lost = {f: v for f, v in fates.items() if f != "trained" and not f.startswith("unsettled")}
    wall = s["wall_s"]
    before, after = result.eval_before["reward"], result.eval_after["reward"]
    by_reason = s.get("aborted_by_reason", {})
    return {
        "policy": policy, "streaming": streaming, "refit": refit, "eta": eta, "seed": seed,
        "steps": s["steps"], "wall_s": wall,
        "gen_tok_s": s["tokens_per_s"], "trained_tok_s": s["tokens_trained"] / wall,
        "steps_per_s": s["steps_per_s"],
        "staleness_max": max(hist, default=0),
        "staleness_mean": sum(k * v for k, v in hist.items()) / n if n else 0.0,
        "units_dropped": s["filtered"] + sum(v for k, v in by_reason.items()
                                             if k not in ("shutdown", "lost_in_crash",
                                                          "recovered", "trajectory_missing")),
        "wasted_tokens": round(sum(v["samples"] * v["mean"] for v in lost.values())),
        "tokens_generated": s["tokens_generated"], "tokens_trained": s["tokens_trained"],
        "length_ratio": s.get("length_ratio"), "trainer_idle": s["trainer_idle"],
        "eval_before": before, "eval_after": after,
        "reward_gain_per_min": (after - before) / (wall / 60.0),
    }


RATIO_KEYS = ("gen_tok_s", "trained_tok_s", "steps_per_s")


def add_ratios(runs: list[dict[str, Any]]) -> None:
    """Each run's ratio to the reference run of its seed and eta (``ratio``) and to NeMo-RL as
    shipped (``ratio_shipped``); None where the grid has no such run."""
    for field, which in (("ratio", REF), ("ratio_shipped", SHIPPED)):
        ref = {(r["seed"], r["eta"]): r for r in runs
               if (r["policy"], r["streaming"], r["refit"]) == which}
        for r in runs:
            base = ref.get((r["seed"], r["eta"]))
            r[field] = {k: (r[k] / base[k] if base and base[k] else None) for k in RATIO_KEYS}


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return fmean(xs) if xs else None


def render(results: dict[str, Any]) -> str:
    """The table docs/peers.md shows, from the results file: one row per (eta, policy,
    streaming, refit), means over the seeds. A results file whose grid ran NeMo-RL as shipped
    (``SHIPPED``) gets one more column: each row's ratios to it."""
    shipped = any((r["policy"], r["streaming"], r["refit"]) == SHIPPED for r in results["runs"])
    lines = ["| eta | policy | streaming | refit | seeds | gen tok/s (x ref) "
             "| trained tok/s (x ref) | steps/s (x ref) | staleness max / mean | units dropped "
             "| wasted tokens | length bias | trainer idle | eval before -> after "
             "| reward gain / min |" + (" x shipped: gen / trained / steps |" if shipped else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
             + ("---|" if shipped else "")]
    keys: list[tuple[Any, ...]] = []
    for r in results["runs"]:
        k = (r["eta"], r["policy"], r["streaming"], r["refit"])
        if k not in keys:
            keys.append(k)
    for eta, policy, streaming, refit in keys:
        rs = [r for r in results["runs"] if (r["eta"], r["policy"], r["streaming"],
                                             r["refit"]) == (eta, policy, streaming, refit)]

        def m(key: str) -> float | None:
            return _mean([r[key] for r in rs])

        def x(key: str) -> str:
            return _g(_mean([r["ratio"][key] for r in rs]), ".2f")

        def xs(key: str) -> str:
            return _g(_mean([(r.get("ratio_shipped") or {}).get(key) for r in rs]), ".2f")

        ref = (" (ref)" if (policy, streaming, refit) == REF else
               " (shipped)" if shipped and (policy, streaming, refit) == SHIPPED else "")
        last = (f" {xs('gen_tok_s')} / {xs('trained_tok_s')} / {xs('steps_per_s')} |"
                if shipped else "")
        lines.append(
            f"| {eta} | {policy}{ref} | {'on' if streaming else 'off'} | {refit} | {len(rs)} | "
            f"{m('gen_tok_s'):.0f} ({x('gen_tok_s')}) | {m('trained_tok_s'):.0f} "
            f"({x('trained_tok_s')}) | {m('steps_per_s'):.2f} ({x('steps_per_s')}) | "
            f"{max(r['staleness_max'] for r in rs)} / {m('staleness_mean'):.2f} | "
            f"{m('units_dropped'):.1f} | {m('wasted_tokens'):.0f} | "
            f"{_g(m('length_ratio'), '.2f')} | {m('trainer_idle'):.2f} | "
            f"{m('eval_before'):.3f} -> {m('eval_after'):.3f} | "
            f"{m('reward_gain_per_min'):+.3f} |" + last)
    return "\n".join(lines)


def doc_block(text: str) -> str:
    """What stands between the markers of the doc."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def write(results: dict[str, Any], results_path: Path = RESULTS, doc: Path = DOC) -> None:
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    text = doc.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:start] + "\n" + render(results) + "\n" + text[end:])


async def _one(engine: Any, model: Path, prompts: list[Any], policy: str, streaming: bool,
               refit: str, eta: int, seed: int, steps: int, out: Path, median: float,
               sigma: float) -> dict[str, Any]:
    from runtime.config import load_config
    from runtime.session import run_training

    cfg = load_config(None, {**SETTINGS, "run.steps": steps, "run.seed": seed,
                             "run.output_dir": str(out), "staleness.policy": policy,
                             "staleness.max_staleness": eta, "trainer.streaming": streaming,
                             "rollout.refit": refit})
    tail = LongTail(engine, cfg.rollout.max_tokens, seed, median, sigma)
    result = await run_training(cfg, model, prompts, ones_fraction, out, rollout=tail,
                                log=lambda _: None)
    return _row(result, policy, streaming, refit, eta, seed)


async def main(runs_grid: list[tuple[str, bool, str, int]], seeds: list[int], steps: int,
               median: float, sigma: float, rows: Path | None = None, engine: Any = None
               ) -> list[dict[str, Any]]:
    """The grid's rows, seeds in turn, on ``engine`` (None: a new one, closed at the end)."""
    from runtime.data import load_prompts
    from runtime.models.tiny import ensure_tiny_model
    from runtime.rollout.vllm_engine import VLLMRollout

    model = ensure_tiny_model(log=None)
    prompts = load_prompts()
    owned = engine is None
    if owned:
        engine = VLLMRollout(model, max_model_len=128, max_num_seqs=64, seed=0)
    runs: list[dict[str, Any]] = []
    total, t0 = len(runs_grid) * len(seeds), time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for seed in seeds:
                for policy, streaming, refit, eta in runs_grid:
                    out = Path(tmp) / f"{policy}-{int(streaming)}-{refit}-{eta}-{seed}"
                    row = await _one(engine, model, prompts, policy, streaming, refit, eta,
                                     seed, steps, out, median, sigma)
                    runs.append(row)
                    if rows is not None:  # each run as it ends (a cut grid keeps its runs)
                        with rows.open("a") as f:
                            f.write(json.dumps(row) + "\n")
                    print(f"[{len(runs)}/{total} {time.perf_counter() - t0:.0f}s] {policy} "
                          f"streaming={'on' if streaming else 'off'} refit={refit} eta={eta} "
                          f"seed={seed}: {row['gen_tok_s']:.0f} gen tok/s, "
                          f"{row['trained_tok_s']:.0f} trained tok/s, staleness max "
                          f"{row['staleness_max']}, dropped {row['units_dropped']}, eval "
                          f"{row['eval_before']:.3f} -> {row['eval_after']:.3f}, "
                          f"{row['wall_s']:.1f} s", flush=True)
    finally:
        if owned:
            await engine.close()
    add_ratios(runs)
    return runs


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    parser.add_argument("--etas", default="1,2", help="comma-separated max staleness values")
    parser.add_argument("--policies", default=",".join(POLICY_CHOICES),
                        help=f"comma-separated, of: {', '.join(POLICY_CHOICES)}")
    parser.add_argument("--refits", default=",".join(REFITS), help="abort, keep or both")
    parser.add_argument("--streaming", default="off,on",
                        help="off, on or both (on: the rules that stream only)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--median", type=float, default=MEDIAN,
                        help="median answer length (tokens) of the lognormal")
    parser.add_argument("--sigma", type=float, default=SIGMA, help="the lognormal's sigma")
    parser.add_argument("--write", action="store_true",
                        help=f"write {RESULTS.relative_to(ROOT)} and the table of "
                             f"{DOC.relative_to(ROOT)}")
    parser.add_argument("--rows", type=Path, default=None,
                        help="append each run's row to this JSONL file as it ends")
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    def bad(msg: str) -> None:
        print(f"peers_compare: {msg}", file=sys.stderr)
        raise SystemExit(2)

    try:
        args.seed_list, args.eta_list = _ints(args.seeds), _ints(args.etas)
    except ValueError:
        bad(f"--seeds and --etas take comma-separated whole numbers (got {args.seeds!r}, "
            f"{args.etas!r})")
    args.policy_list = [p.strip() for p in args.policies.split(",") if p.strip()]
    args.refit_list = [r.strip() for r in args.refits.split(",") if r.strip()]
    modes = [m.strip() for m in args.streaming.split(",") if m.strip()]
    unknown = [p for p in args.policy_list if p not in POLICY_CHOICES]
    if unknown:
        bad(f"unknown policy {unknown[0]!r}; one of {', '.join(POLICY_CHOICES)}")
    if [r for r in args.refit_list if r not in REFITS]:
        bad(f"--refits takes abort and/or keep (got {args.refits!r})")
    if [m for m in modes if m not in ("off", "on")]:
        bad(f"--streaming takes off and/or on (got {args.streaming!r})")
    args.streaming_list = [m == "on" for m in modes]
    if [e for e in args.eta_list if e < 0]:
        bad(f"eta must be >= 0 (got {args.etas!r})")
    if [s for s in args.seed_list if s < 0]:
        bad(f"seeds must be >= 0 (got {args.seeds!r})")
    if args.steps < 1 or args.median <= 0 or args.sigma < 0:
        bad("--steps must be >= 1, --median > 0 and --sigma >= 0")
    if not (args.seed_list and args.eta_list and args.policy_list and args.refit_list
            and modes):
        bad("--seeds, --etas, --policies, --refits and --streaming must each name one or more")
    args.grid = grid(args.policy_list, args.eta_list, args.refit_list, args.streaming_list)
    if not args.grid:
        bad("the grid is empty (streaming on alone runs only the rules that stream: "
            "reserve_occupy, " + ", ".join(p for p in POLICY_CHOICES if peer_streams(p)) + ")")
    return args


if __name__ == "__main__":
    args = parse()
    t0 = time.perf_counter()
    runs = asyncio.run(main(args.grid, args.seed_list, args.steps, args.median, args.sigma,
                            args.rows))
    results = {"settings": SETTINGS, "steps": args.steps, "seeds": args.seed_list,
               "etas": args.eta_list, "lognormal": {"median": args.median, "sigma": args.sigma},
               "reference": dict(zip(("policy", "streaming", "refit"), REF)),
               "shipped": dict(zip(("policy", "streaming", "refit"), SHIPPED)),
               "grid_wall_s": round(time.perf_counter() - t0, 1), "runs": runs}
    print(render(results))
    if args.write:
        write(results, args.results, args.doc)
