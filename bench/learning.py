"""Learning at a staleness bound, measured: ``make bench-learning`` (issue 39, item 2).

What a run of the demo's task learns, per staleness bound and trainer objective, against the
training step and against the wall clock, with several seeds side by side.

Design
------
* **The task and the model are the demo's** (``configs/demo.yaml``: the tiny Qwen2 model after
  its supervised warm-up, the 100 arithmetic prompts, ``exact_answer``, 16 groups of 8,
  answers of at most 8 tokens), with the settings this bench overrides printed and written into
  the results (``--lr``, ``--steps``).
* **The rows** (``--rows``): Reserve–Occupy at each eta of ``--etas`` (default 0, 1, 2, 4) and
  the ``unbounded`` peer (no staleness bound: the ceiling of staleness), each with every
  trainer objective of ``--objectives`` (``plain``: PPO's clipped ratio against the engine's
  log-probabilities; the corrections of ``trainer.correction``, docs/runtime.md "Off-policy
  corrections", where the runtime has them).
* **Side by side, one engine per seed**: for each seed (``--seeds``) every row runs on one
  warm vLLM engine, one after the other, the row order rotated by one per seed so that no row
  is always first (the engine's warm-up, the host's drift). The engine's weights are reset to
  the model's before each run (``run_training`` with a borrowed engine).
* **The curve without disturbing the run**: a run saves its weights every ``--every`` steps
  (``run.save_model_every``) and evaluates nothing while it trains (``run.eval_prompts`` 0);
  after the run, each saved checkpoint is loaded into the engine and scored on the eval set.
  Its wall-clock time is the run's own (``time_s`` of that step's ``metrics.jsonl`` row): the
  evaluation costs the run nothing, so the reward-against-time curve is the training's.
* **The peers** (``--peers``, issue 39 item 3): the rules of ``PEER_ROWS`` instead of
  Reserve–Occupy's etas, each as it ships on this runtime (Reserve–Occupy and NeMo-RL's
  ``nemo_in_order`` with the trainer streaming; ``verl_drop``, ``areal`` and ``synchronous``
  whole batch; all with in-flight refit), at every eta of ``--etas`` with every objective;
  the first row is the one the others are paired against, and a table says what each row
  trained (staleness, units dropped, tokens): a rule that trains staler or less data shows it.
  Written to ``docs/results/learning_peers.json`` and its own block of docs/learning.md.
* **The eval set**: the demo's 100 prompts (the ones trained on: the task has no others),
  greedy and ``--samples`` seeded samples each at the run's temperature. With 32 samples the
  sampled reward's standard error given the prompts, ``sqrt(sum_i p_i (1 - p_i) / S) / N``, is
  at most ``sqrt(0.25 / 32) / 10 = 0.0088``; the results hold each point's own.
* **What is reported** per row, over the seeds (mean, and a 90 % t-interval of the mean; with
  3 seeds ``t = 2.92``): the sampled and greedy reward at the last step; at a fixed wall-clock
  time (``t_fixed``: the earliest time by which every run of that seed had finished, the curve
  interpolated linearly between checkpoints and held at the last one); the time to reach the
  target reward (``--target``, or the plain eta-0 row's mean final sampled reward less 0.02 by
  default; interpolated; "not reached" otherwise); and, paired per seed against the plain
  eta-0 row, the difference of each of them (mean and interval: a difference whose interval
  excludes 0 is *resolved*).

    python bench/learning.py --seeds 0,1,2 --steps 60 --every 10 --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cli import Parser, float_in, int_in, int_list  # noqa: E402
from bench.docblock import between, splice  # noqa: E402
from runtime.rollout.env import configure  # noqa: E402

configure()

DOC = ROOT / "docs" / "learning.md"
RESULTS = ROOT / "docs" / "results" / "learning.json"
BEGIN, END = "<!-- begin: learning (generated) -->", "<!-- end: learning -->"
LEVEL = 0.90
# two-sided 90 % Student t quantiles by degrees of freedom (t_{0.95, df}); scipy is not a
# dependency of the runtime and these are the only ones a bench of a few seeds needs
T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860,
       9: 1.833, 10: 1.812, 11: 1.796, 12: 1.782, 13: 1.771, 14: 1.761, 15: 1.753}
# the trainer objectives a row may use: the settings each sets (``trainer.correction``, docs/
# runtime.md "Off-policy corrections"); "plain" is the runtime's default objective
OBJECTIVES: dict[str, dict[str, Any]] = {
    "plain": {},
    "tis": {"trainer.correction.kind": "tis"},  # token-level truncated IS, cap 2
    "seq_tis": {"trainer.correction.kind": "seq_tis"},
    "mask": {"trainer.correction.kind": "mask"},  # icepop-style band [0.5, 2]
    "seq_mask": {"trainer.correction.kind": "seq_mask"},
    "decoupled": {"trainer.correction.kind": "decoupled"},  # prox: recompute, cap 2
    "decoupled_loglinear": {"trainer.correction.kind": "decoupled",
                            "trainer.correction.prox": "loglinear"},
}
UNBOUNDED = "unbounded"
# The rules ``--peers`` compares (issue 39, item 3), each as it ships on this runtime: the
# settings each row sets over the demo's. Reserve-Occupy and NeMo-RL (``nemo_in_order``) with
# the trainer streaming and in-flight refit (``refit: keep``), the others whole batch (they do
# not stream), every one ``refit: keep`` so that the rules, not the refit, differ.
PEER_ROWS: dict[str, dict[str, Any]] = {
    "reserve_occupy": {"staleness.policy": "reserve_occupy", "trainer.streaming": True,
                       "rollout.refit": "keep"},
    "nemo_shipped": {"staleness.policy": "nemo_in_order", "trainer.streaming": True,
                     "rollout.refit": "keep"},
    "verl_drop": {"staleness.policy": "verl_drop", "rollout.refit": "keep"},
    "areal": {"staleness.policy": "areal", "rollout.refit": "keep"},
    "synchronous": {"staleness.policy": "synchronous", "rollout.refit": "keep"},
}
# ``--peers``' results and its table's markers in docs/learning.md ("The peers")
PEERS_RESULTS = ROOT / "docs" / "results" / "learning_peers.json"
PEERS_BEGIN = "<!-- begin: learning-peers (generated) -->"
PEERS_END = "<!-- end: learning-peers -->"

# A row: (eta, objective) for Reserve-Occupy with the demo's settings (eta None: the unbounded
# peer), or (peer, eta, objective) for a rule of ``PEER_ROWS``
Row = tuple[Any, ...]


def row_name(eta: int | None, objective: str, peer: str | None = None) -> str:
    return (f"{peer} " if peer else "") + f"{'unbounded' if eta is None else f'eta {eta}'} " \
        f"{objective}"


def _row_parts(row: Row) -> tuple[str | None, int | None, str]:
    """(peer or None, eta, objective) of a row in either form."""
    return (row[0], row[1], row[2]) if len(row) == 3 else (None, row[0], row[1])


def settings(eta: int | None, objective: str, seed: int, steps: int, every: int, lr: float,
             out: Path, peer: str | None = None) -> dict[str, Any]:
    """The ``--set`` settings of one run: the demo's, with this bench's overrides (``peer``: a
    rule of ``PEER_ROWS`` with its settings)."""
    s: dict[str, Any] = {
        "run.steps": steps, "run.seed": seed, "run.output_dir": str(out),
        "run.save_model_every": every, "run.eval_prompts": 0, "run.plot": False,
        "run.progress": False, "run.tensorboard": False, "recovery.enabled": False,
        "trainer.lr": lr, "staleness.policy": "reserve_occupy" if eta is not None
        else UNBOUNDED, "staleness.max_staleness": 1 if eta is None else eta}
    if peer is not None:
        s.update(PEER_ROWS[peer])
    s.update(OBJECTIVES[objective])
    return s


# ------------------------------------------------------------------------- the statistics ---

def mean_interval(xs: list[float], level: float = LEVEL) -> dict[str, Any]:
    """Mean, sample standard deviation and the t-interval of the mean (``level`` 0.9 only:
    ``T95``); one value: no interval."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return {"n": 0, "mean": None, "sd": None, "lo": None, "hi": None}
    m = fmean(xs)
    if len(xs) < 2:
        return {"n": 1, "mean": m, "sd": None, "lo": None, "hi": None}
    sd = stdev(xs)
    half = T95[min(len(xs) - 1, max(T95))] * sd / math.sqrt(len(xs))
    return {"n": len(xs), "mean": m, "sd": sd, "lo": m - half, "hi": m + half}


def at_time(curve: list[dict[str, Any]], t: float, key: str = "reward") -> float:
    """The curve's ``key`` at wall-clock time ``t``: linear between checkpoints, held at the
    first before it and at the last after it."""
    pts = sorted((p["time_s"], p[key]) for p in curve)
    if t <= pts[0][0]:
        return pts[0][1]
    for (t0, y0), (t1, y1) in zip(pts, pts[1:]):
        if t <= t1:
            return y0 + (y1 - y0) * (t - t0) / (t1 - t0) if t1 > t0 else y1
    return pts[-1][1]


def time_to(curve: list[dict[str, Any]], target: float, key: str = "reward") -> float | None:
    """The first wall-clock time the curve reaches ``target`` (linear between checkpoints), or
    None."""
    pts = sorted((p["time_s"], p[key]) for p in curve)
    if pts[0][1] >= target:
        return pts[0][0]
    for (t0, y0), (t1, y1) in zip(pts, pts[1:]):
        if y1 >= target:
            return t0 + (t1 - t0) * (target - y0) / (y1 - y0) if y1 > y0 else t1
    return None


def summarize(runs: list[dict[str, Any]], target: float | None = None) -> dict[str, Any]:
    """Per row, over the seeds: the final rewards, the rewards at each seed's fixed time, the
    time to the target, and each paired with the plain eta-0 row of the same seed."""
    seeds = sorted({r["seed"] for r in runs})
    names = list(dict.fromkeys(r["row"] for r in runs))
    by = {(r["row"], r["seed"]): r for r in runs}
    base = row_name(0, "plain") if any(r["row"] == row_name(0, "plain") for r in runs) \
        else names[0]
    t_fixed = {s: min(by[(n, s)]["curve"][-1]["time_s"] for n in names if (n, s) in by)
               for s in seeds}
    if target is None:
        target = fmean(by[(base, s)]["curve"][-1]["reward"] for s in seeds
                       if (base, s) in by) - 0.02
    rows = []
    for n in names:
        per: dict[str, list[Any]] = {k: [] for k in (
            "final", "final_greedy", "fixed", "fixed_greedy", "to_target", "d_final",
            "d_fixed", "d_final_greedy", "d_fixed_greedy")}
        for s in seeds:
            if (n, s) not in by:
                continue
            c, b = by[(n, s)]["curve"], by.get((base, s), {}).get("curve")
            vals = {"final": c[-1]["reward"], "final_greedy": c[-1]["greedy_reward"],
                    "fixed": at_time(c, t_fixed[s]),
                    "fixed_greedy": at_time(c, t_fixed[s], "greedy_reward")}
            for k, v in vals.items():
                per[k].append(v)
            per["to_target"].append(time_to(c, target))
            if b is not None:
                per["d_final"].append(vals["final"] - b[-1]["reward"])
                per["d_final_greedy"].append(vals["final_greedy"] - b[-1]["greedy_reward"])
                per["d_fixed"].append(vals["fixed"] - at_time(b, t_fixed[s]))
                per["d_fixed_greedy"].append(vals["fixed_greedy"]
                                             - at_time(b, t_fixed[s], "greedy_reward"))
        row = {"row": n, "seeds": len(per["final"]),
               "reached": sum(x is not None for x in per["to_target"]),
               "to_target_s": per["to_target"],
               "wall_s": mean_interval([by[(n, s)]["curve"][-1]["time_s"] for s in seeds
                                        if (n, s) in by])}
        for k in ("final", "final_greedy", "fixed", "fixed_greedy", "d_final", "d_fixed",
                  "d_final_greedy", "d_fixed_greedy"):
            row[k] = mean_interval(per[k])
            if k.startswith("d_") and n != base:
                lo, hi = row[k]["lo"], row[k]["hi"]
                row[k]["resolved"] = lo is not None and (lo > 0 or hi < 0)
        row["to_target"] = mean_interval([x for x in per["to_target"] if x is not None])
        rows.append(row)
    return {"base": base, "target": target, "t_fixed_s": t_fixed, "rows": rows}


# -------------------------------------------------------------------------------- the page ---

def _mi(x: dict[str, Any], fmt: str = ".3f", sign: bool = False) -> str:
    if x["mean"] is None:
        return "n/a"
    f = ("+" if sign else "") + fmt
    if x["lo"] is None:
        return f"{x['mean']:{f}}"
    return f"{x['mean']:{f}} [{x['lo']:{f}}, {x['hi']:{f}}]"


def render(results: dict[str, Any]) -> str:
    """The generated part of docs/learning.md, from the results file."""
    s, summ = results["setup"], results["summary"]
    seeds = results["seeds"]
    lines = [
        f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), {s['steps']} steps a run, "
        f"lr {s['lr']:g}, the curve every {s['every']} steps; eval: the {s['eval_prompts']} "
        f"prompts, greedy and {s['samples']} samples each; rows run side by side on one "
        f"engine per seed, the order rotated per seed; {results['wall_s'] / 60:.0f} min in "
        f"all. Each cell: the mean over the seeds [90 % t-interval]. Fixed time: per seed "
        f"the earliest end of its runs ("
        + ", ".join(f"seed {k}: {v:.0f} s" for k, v in summ["t_fixed_s"].items())
        + f"). Target: sampled reward {summ['target']:.3f}"
        + ((" (the plain eta-0 row's final, less 0.02)" if summ["base"] == row_name(0, "plain")
            else f" (the `{summ['base']}` row's final, less 0.02)")
           if results["target"] is None else "")
        + f". Differences are paired per seed against `{summ['base']}`; **resolved** when "
          f"the interval excludes 0.", "",
        "| row | sampled reward, last step | greedy, last step | sampled at the fixed time "
        "| greedy at the fixed time | time to the target, s (seeds reaching it) | run, s |",
        "|---|---|---|---|---|---|---|"]
    for r in summ["rows"]:
        lines.append(f"| {r['row']} | {_mi(r['final'])} | {_mi(r['final_greedy'])} | "
                     f"{_mi(r['fixed'])} | {_mi(r['fixed_greedy'])} | "
                     f"{_mi(r['to_target'], '.0f')} ({r['reached']}/{r['seeds']}) | "
                     f"{_mi(r['wall_s'], '.0f')} |")
    lines += ["", f"Against `{summ['base']}`, paired per seed (difference of the means "
                  f"[90 % t-interval], resolved or not):", "",
              "| row | sampled, last step | greedy, last step | sampled, fixed time "
              "| greedy, fixed time |", "|---|---|---|---|---|"]
    for r in summ["rows"]:
        if r["row"] == summ["base"]:
            continue
        cells = []
        for k in ("d_final", "d_final_greedy", "d_fixed", "d_fixed_greedy"):
            x = r[k]
            cells.append(_mi(x, sign=True) + (" resolved" if x.get("resolved") else ""))
        lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    if any("peer" in r for r in results["runs"]):  # what each rule trained
        split = all(r.get("units_filtered") is not None for r in results["runs"])
        lines += ["", "What each row trained (mean over the seeds): staleness mean / max, units "
                      + ("filtered (zero reward variance) / dropped by the rule"
                         if split else "filtered (zero reward variance) or dropped by the rule")
                      + ", tokens trained:", "",
                  "| row | staleness mean / max | "
                  + ("units filtered / dropped" if split else "units filtered or dropped")
                  + " | tokens trained |", "|---|---|---|---|"]
        for n in dict.fromkeys(r["row"] for r in results["runs"]):
            rs = [r for r in results["runs"] if r["row"] == n]

            def mean_of(key: str) -> float | None:
                xs = [r.get(key) for r in rs if r.get(key) is not None]
                return fmean(xs) if xs else None

            sm, dr, tt = mean_of("staleness_mean"), mean_of("units_dropped"), \
                mean_of("tokens_trained")
            mx = max((r["staleness_max"] for r in rs if r.get("staleness_max") is not None),
                     default=None)
            lost = "n/a" if dr is None else f"{dr:.1f}"
            if split and dr is not None:
                fi = mean_of("units_filtered") or 0.0
                lost = f"{fi:.1f} / {dr - fi:.1f}"
            lines.append(f"| {n} | {'n/a' if sm is None else f'{sm:.2f}'} / "
                         f"{'n/a' if mx is None else mx} | {lost} | "
                         f"{'n/a' if tt is None else f'{tt:.0f}'} |")
    lines += ["", "The curves (sampled reward at each checkpoint, mean over the seeds; step: "
                  "reward @ mean time):", ""]
    for n in dict.fromkeys(r["row"] for r in results["runs"]):
        rs = [r for r in results["runs"] if r["row"] == n]
        pts = []
        for i, p in enumerate(rs[0]["curve"]):
            if all(len(r["curve"]) > i for r in rs):
                pts.append(f"{p['step']}: {fmean(r['curve'][i]['reward'] for r in rs):.3f} @ "
                           f"{fmean(r['curve'][i]['time_s'] for r in rs):.0f} s")
        lines.append(f"* {n}: " + "; ".join(pts))
    return "\n".join(lines)


def write(results: dict[str, Any], results_path: Path = RESULTS, doc: Path = DOC,
          begin: str = BEGIN, end: str = END) -> None:
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    splice(doc, begin, end, render(results))


def doc_block(text: str, begin: str = BEGIN, end: str = END) -> str:
    return between(text, begin, end)


# -------------------------------------------------------------------------------- the runs ---

async def curve_of(engine: Any, out: Path, prompts: list[Any], reward_fn: Any, base: dict[str,
                   float], max_tokens: int, temperature: float, samples: int, seed: int
                   ) -> list[dict[str, Any]]:
    """The run's checkpoints scored on ``prompts`` (step 0: ``base``, the model before
    training), each at its step's ``time_s``."""
    from runtime.session import evaluate

    rows = sorted((json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()
                   if x.strip()), key=lambda r: r["step"])
    points = [{"step": 0, "time_s": 0.0, **base}]
    ckpts = sorted((int(p.name.split("-")[1]), p) for p in out.glob("checkpoint-*")
                   if p.name.split("-")[1].isdigit())
    for step, path in ckpts:
        await engine.load_weights(path)
        score = await evaluate(engine, prompts, reward_fn, max_tokens, temperature, samples,
                               seed, tag=f"curve{step}")
        points.append({"step": step, "time_s": rows[step - 1]["time_s"], **score})
    return points


async def main(rows: list[Row], seeds: list[int], steps: int, every: int,
               lr: float, samples: int, target: float | None = None, engine: Any = None,
               log: Any = print) -> dict[str, Any]:
    """Every row for every seed (the rows rotated per seed), each run's curve: the results."""
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.models.tiny import ensure_tiny_model
    from runtime.prompts import render_for_model
    from runtime.rollout.vllm_engine import VLLMRollout
    from runtime.session import evaluate, run_training
    from runtime.tasks.base import load_reward

    from bench.peers_compare import trained_data

    t_start = time.perf_counter()
    cfg0 = load_config(None, {})
    model = ensure_tiny_model(log=None)
    prompts = load_prompts()
    reward_fn = load_reward(cfg0.reward.name, **cfg0.reward.options)
    eval_prompts = render_for_model(prompts, model, cfg0.data.chat_template)
    max_tokens, temperature = cfg0.rollout.max_tokens, cfg0.rollout.temperature
    owned = engine is None
    if owned:
        engine = VLLMRollout(model, max_model_len=cfg0.rollout.max_model_len,
                             max_num_seqs=cfg0.rollout.max_num_seqs, seed=0)
    runs: list[dict[str, Any]] = []
    total, count = len(rows) * len(seeds), 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, seed in enumerate(seeds):
                await engine.load_weights(model)
                base = await evaluate(engine, eval_prompts, reward_fn, max_tokens, temperature,
                                      samples, seed, tag="curve0")
                for k in range(len(rows)):
                    peer, eta, objective = _row_parts(rows[(i + k) % len(rows)])
                    name = row_name(eta, objective, peer)
                    count += 1
                    out = Path(tmp) / f"run-{count}"
                    cfg = load_config(None, settings(eta, objective, seed, steps, every, lr,
                                                     out, peer))
                    result = await run_training(cfg, model, prompts, reward_fn, out,
                                                rollout=engine, log=lambda _: None)
                    c = await curve_of(engine, out, eval_prompts, reward_fn, base, max_tokens,
                                       temperature, samples, seed)
                    runs.append({"row": name, "eta": eta, "objective": objective,
                                 **({"peer": peer} if peer else {}), "seed": seed, "curve": c,
                                 **trained_data(result.summary),
                                 "tokens_trained": result.rows[-1].get("tokens_trained")})
                    log(f"[{count}/{total} {time.perf_counter() - t_start:.0f}s] seed {seed} "
                        f"{name}: reward {c[0]['reward']:.3f} -> "
                        f"{c[-1]['reward']:.3f} (greedy {c[0]['greedy_reward']:.3f} -> "
                        f"{c[-1]['greedy_reward']:.3f}) in {c[-1]['time_s']:.1f} s")
    finally:
        if owned:
            await engine.close()
    return {"setup": {"steps": steps, "every": every, "lr": lr, "samples": samples,
                      "eval_prompts": len(eval_prompts), "task": cfg0.reward.name,
                      "batch_size": cfg0.staleness.batch_size,
                      "group_size": cfg0.staleness.group_size, "max_tokens": max_tokens},
            "seeds": seeds, "target": target, "rows": [list(r) for r in rows],
            "wall_s": round(time.perf_counter() - t_start, 1), "runs": runs,
            "summary": summarize(runs, target)}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog="learning.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int_list(0), default=[0, 1, 2],
                        help="comma-separated run seeds (default 0,1,2)")
    parser.add_argument("--etas", type=int_list(0), default=[0, 1, 2, 4],
                        help="Reserve-Occupy's max staleness values (default 0,1,2,4)")
    parser.add_argument("--no-unbounded", action="store_true",
                        help="leave out the unbounded peer's row (the ceiling of staleness)")
    parser.add_argument("--peers", default=None,
                        help=f"compare these rules instead (comma-separated, of: "
                             f"{', '.join(PEER_ROWS)}; each at every eta of --etas with every "
                             f"objective; docs/learning.md \"The peers\"): --write writes "
                             f"docs/results/learning_peers.json and that table; the first row "
                             f"is the one the others are paired against")
    parser.add_argument("--objectives", default="plain",
                        help=f"comma-separated trainer objectives, of: {', '.join(OBJECTIVES)}")
    parser.add_argument("--steps", type=int_in(1, 100_000), default=60,
                        help="steps per run (default 60, the demo's)")
    parser.add_argument("--every", type=int_in(1, 100_000), default=10,
                        help="a checkpoint, and a point of the curve, every this many steps")
    parser.add_argument("--lr", type=float_in(0.0, 1.0, lo_open=True), default=3e-4,
                        help="trainer.lr (default 3e-4, the demo's)")
    parser.add_argument("--samples", type=int_in(1, 10_000), default=32,
                        help="sampled answers per eval prompt (default 32)")
    parser.add_argument("--target", type=float_in(0.0, 1.0), default=None,
                        help="the reward whose time to reach is reported (default: the plain "
                             "eta-0 row's mean final sampled reward less 0.02)")
    parser.add_argument("--write", action="store_true",
                        help=f"write {RESULTS.relative_to(ROOT)} and the table of "
                             f"{DOC.relative_to(ROOT)}")
    parser.add_argument("--results", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if not objectives or unknown:
        parser.error(f"--objectives: unknown {unknown[0]!r}; of {', '.join(OBJECTIVES)}"
                     if unknown else "--objectives: name at least one")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds names a seed twice ({args.seeds})")
    if args.every > args.steps:
        parser.error(f"--every {args.every} is more than --steps {args.steps}: no checkpoint")
    args.peer_list = None
    if args.peers is not None:
        args.peer_list = [x.strip() for x in args.peers.split(",") if x.strip()]
        bad = [x for x in args.peer_list if x not in PEER_ROWS]
        if not args.peer_list or bad:
            parser.error(f"--peers: unknown {bad[0]!r}; of {', '.join(PEER_ROWS)}" if bad
                         else "--peers: name at least one")
        if len(set(args.peer_list)) != len(args.peer_list):
            parser.error(f"--peers names a rule twice ({args.peers})")
        args.rows = [(p, e, o) for p in args.peer_list for o in objectives
                     for e in dict.fromkeys(args.etas)]
    else:
        args.rows = [(e, o) for o in objectives for e in dict.fromkeys(args.etas)]
        if not args.no_unbounded:
            args.rows += [(None, o) for o in objectives]
    if args.results is None:
        args.results = RESULTS if args.peer_list is None else PEERS_RESULTS
    args.begin, args.end = (BEGIN, END) if args.peer_list is None else (PEERS_BEGIN, PEERS_END)
    if args.write:
        from bench.peers_compare import check_write

        check_write(args, lambda m: parser.error(m), args.begin, args.end)
    return args


if __name__ == "__main__":
    args = parse()
    results = asyncio.run(main(args.rows, args.seeds, args.steps, args.every, args.lr,
                               args.samples, args.target))
    print(render(results))
    if args.write:
        write(results, args.results, args.doc, args.begin, args.end)
