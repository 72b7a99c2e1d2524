"""The simulator's prediction, per candidate workload of ``bench/peers_compare.py``, of the
headline comparisons' trained tok/s ratios and of the headline grid's time, with the cost terms
``bench/calibrate.py`` fitted to this machine's vLLM CPU engine (docs/results/calibration.json,
its revised model: the trainer and the engine slowing each other). A prediction, not a
measurement: it chose ``peers_compare.WORKLOADS["separating"]`` (docs/peers.md, "The workload").
Each simulated unit is the real run's: its answers' caps (``LongTail``) and its prompt's tokens
on the engine's tokenizer (``unit_prompt_tokens``: 4, "a+b="; the tables of docs/peers.md
before 2026-12-07 11:30 UTC simulated 20, which made every simulated step's training about
1.7 times the trainer's).

``--filtering``: the same for the filtering workload's comparisons
(``peers_compare.filtering_headline()``) on candidate shapes and shares of prompts without
gradient (``FILTER_CANDIDATES``): each simulated group is without gradient exactly when its
unit's prompt is in the real run of the same seed (``UnitFilter``: ``NoGradientReward`` on the
prompt ``draw_positions`` gives the unit); NeMo-RL trains such groups (its policies' default,
``on_no_gradient="train"``), Reserve-Occupy and verl filter them; the ratios are of useful
trained tok/s (the tokens of groups with a gradient). It chose
``peers_compare.WORKLOADS["filtering"]`` (docs/peers.md, "The filtering workload").

    python bench/workload_predict.py [--seeds 0,1,2] [--filtering]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import calibrate  # noqa: E402
import peers_compare as peers  # noqa: E402
from bench.cli import Parser, float_in, int_list  # noqa: E402

ENGINE_SEQS = 64  # peers_compare's engine: max_num_seqs


def _name(c: dict[str, Any]) -> str:
    a, b = c["a"], c["b"]
    mode = "streaming" if a[1] else "whole batch"
    return f"{a[0]} ({mode}) eta {a[3]} vs {c['against']}" + (
        f" eta {b[3]}" if c["against"] != "itself at eta 0" else "")


COMPARISONS = [c for c in peers.headline() if not c["aa"]]


class UnitFilter:
    """The simulator's reward filter (``RunSpec.filtering``; the interface of
    ``reserve_occupy_sim.model.filtering.RewardFilter``: ``bind``, ``no_gradient``,
    ``to_json``) that gives the ``k``-th admitted group the outcome of unit ``g{k}`` of the real
    run of ``seed``: without gradient when ``NoGradientReward(seed, rate)`` says so of the
    training prompt the driver draws for it (``peers_compare.draw_positions``)."""

    def __init__(self, seed: int, rate: float, groups: int) -> None:
        prompts = peers.train_prompts()
        reward = peers.NoGradientReward(seed, rate)
        self.seed, self.rate = seed, rate
        self.outcomes = [reward.no_gradient(prompts[pos])
                         for pos in peers.draw_positions(seed, len(prompts), groups)]

    def bind(self, workload: Any) -> UnitFilter:
        return self

    def no_gradient(self, k: int) -> bool:
        return self.outcomes[k]

    def to_json(self) -> dict[str, Any]:
        return {"unit_filter": {"seed": self.seed, "rate": self.rate}}


@functools.lru_cache(maxsize=1)
def train_prompt_tokens() -> tuple[int, ...]:
    """The tokens of each training prompt (``peers.train_prompts()``, in order) on the engine's
    tokenizer: the tiny model's (``runtime.models.tiny.build_tokenizer``, the one the bench's
    model is saved with; one token per character, no special token added: "7+1=" is 4), as
    the driver encodes a unit's prompt (``Driver._admission_loop``). A simulated request
    prefills these and the trainer trains them with the answer (``calibrate.measure`` fits
    the training cost on answer + prompt tokens)."""
    from runtime.models.tiny import build_tokenizer

    tok = build_tokenizer()
    return tuple(len(tok.encode(p.text)) for p in peers.train_prompts())


def unit_prompt_tokens(seed: int, groups: int) -> list[int]:
    """The prompt tokens of units ``g0`` .. ``g{groups - 1}`` of a run of ``seed``: of the
    training prompt the driver draws for each (``peers.draw_positions``, as ``UnitFilter``)."""
    sizes = train_prompt_tokens()
    return [sizes[pos] for pos in peers.draw_positions(seed, len(sizes), groups)]


def sim_workload(seed: int, w: dict[str, Any]) -> Any:
    """The groups ``LongTail`` gives a run of workload ``w`` (unit ``g{i}``'s candidates, and
    the prompt tokens of its prompt, ``unit_prompt_tokens``); a workload with groups without
    gradient (``no_gradient``) has more of them, as more are admitted."""
    from reserve_occupy_sim.model.workload import GroupSpec, Workload

    tail = peers.LongTail(None, w["max_tokens"], seed, w["median"], w["sigma"])
    groups = w["batch_size"] * (w["steps"] + 4) * (4 if w.get("no_gradient") else 2)
    prompts = unit_prompt_tokens(seed, groups)
    return Workload(f"long-tail(seed={seed})", tuple(
        GroupSpec(i, prompts[i], tuple(tail.cap(f"g{i}-c{j}") for j in range(w["group_size"])))
        for i in range(groups)))


def simulate(fit: dict[str, Any], wl: Any, w: dict[str, Any], policy: str, streaming: bool,
             refit: str, eta: int, filtering: UnitFilter | None = None,
             verl_filter_at: str = "sample") -> dict[str, Any]:
    """One run of the grid, simulated: wall time, steady trained tok/s (the steps after the
    first, as the bench's window; with ``filtering``, of the groups with a gradient: useful
    tokens), each group's step."""
    from reserve_occupy_sim.model.runner import RunSpec, simulate as run

    calibrate.BATCH, calibrate.GROUP = w["batch_size"], w["group_size"]
    cost = calibrate.cost_model(fit, eta, streaming, refit, revised=True)
    cost = type(cost)(**{**cost.__dict__, "concurrency": min(
        ENGINE_SEQS, (eta + 1) * w["batch_size"] * w["group_size"])})
    # Reserve-Occupy streams when told; a peer whose policy streams hands chunks whenever a
    # streaming trainer takes them (cost.train.chunk_groups), as calibrate.simulate_row
    options = (("streaming", True),) if streaming and policy == "reserve_occupy" else ()
    if policy != "reserve_occupy":  # the rule as the runtime runs it (verl: colocate_async)
        from runtime.peers import rule_options
        options += tuple(rule_options(policy).items())
    if policy == "verl_drop" and verl_filter_at != "sample":  # (VerlDrop's filter_at)
        options += (("filter_at", verl_filter_at),)
    _, sim = run(RunSpec(policy, eta, batches=w["steps"], batch_size=w["batch_size"],
                         options=options, filtering=filtering), wl, cost)
    by_tid = {r.tid: r for r in sim.ledger.requests}
    trained = sum(by_tid[t].length for b in sim.ledger.batches for t in b.tids)
    ends = [b.t_published if math.isfinite(b.t_published) else b.t_trained
            for b in sim.ledger.batches]
    t0 = ends[0]
    tokens = (sum(b.useful_tokens for b in sim.ledger.batches[1:]) if filtering is not None
              else sum(by_tid[t].length for b in sim.ledger.batches[1:] for t in b.tids))
    return {"wall_s": sim.now, "steady": tokens / (ends[-1] - t0), "trained": trained,
            "placed": {by_tid[t].group.gid: k for k, b in enumerate(sim.ledger.batches)
                       for t in b.tids}}


def predict(w: dict[str, Any], seeds: list[int], fit: dict[str, Any],
            comps: list[dict[str, Any]] | None = None,
            verl_filter_at: str = "sample") -> dict[str, Any]:
    """Per comparison of ``comps`` (default ``peers_compare.headline()``; the A/A one aside):
    the median over the seeds of its simulated trained tok/s ratio (useful tok/s when ``w``
    has a share ``no_gradient`` of prompts without gradient) and of the groups the two runs
    train in a different step; the median run's and the median seed's simulated seconds
    (every run of the grid, the A/A pair included; no warm-up run, no evaluation, no engine
    start)."""
    comps = peers.headline() if comps is None else comps
    compared = [c for c in comps if not c["aa"]]
    names = [_name(c) for c in compared]
    ratios: dict[str, list[float]] = {n: [] for n in names}
    diffs: dict[str, list[int]] = {n: [] for n in names}
    walls: list[float] = []
    grid_s: list[float] = []
    for seed in seeds:
        wl = sim_workload(seed, w)
        rate = w.get("no_gradient", 0.0)
        unit_filter = UnitFilter(seed, rate, len(wl)) if rate > 0 else None
        memo: dict[tuple[Any, ...], dict[str, Any]] = {}
        for c in comps:
            for x in (c["a"], c["b"]):
                if x not in memo:
                    memo[x] = simulate(fit, wl, w, *x, filtering=unit_filter,
                                       verl_filter_at=verl_filter_at)
                    walls.append(memo[x]["wall_s"])
        for name, c in zip(names, compared):
            a, b = memo[c["a"]], memo[c["b"]]
            ratios[name].append(a["steady"] / b["steady"])
            pa, pb = a["placed"], b["placed"]
            diffs[name].append(sum(pa.get(u) != pb.get(u) for u in set(pa) | set(pb)))
        grid_s.append(sum(memo[c["a"]]["wall_s"] + memo[c["b"]]["wall_s"] for c in comps))
    return {"ratios": {k: median(v) for k, v in ratios.items()},
            "diff": {k: median(v) for k, v in diffs.items()},
            "run_s": median(walls), "grid_s_per_seed": median(grid_s)}


SHORT = ("RO vs shipped, eta 1", "RO vs shipped, eta 2", "RO vs nemo_in_order whole batch",
         "RO vs verl_drop", "RO eta 1 vs eta 0", "RO whole batch vs nemo_in_order whole batch")
# the filtering workload's comparisons (peers_compare.filtering_headline(), the A/A one aside)
FILTER_SHORT = ("RO vs shipped (no filter)", "RO vs nemo_in_order whole batch (no filter)",
                "RO vs verl_drop")


def render(rows: list[dict[str, Any]], seeds: int, short: tuple[str, ...] = SHORT) -> str:
    """The table of docs/peers.md, "The workload" (or "The filtering workload": ``short``
    ``FILTER_SHORT``): per candidate, each comparison's predicted ratio (groups in a
    different step, per pair), a run's and the headline grid's seconds."""
    share = any(r.get("no_gradient") for r in rows)
    lines = ["| workload | groups x size | median / sigma | steps | "
             + ("no-gradient share | " if share else "") + " | ".join(short)
             + f" | a run, s | headline grid ({seeds} pairs per row), min |",
             "|---" * (len(short) + 6 + share) + "|"]
    for r in rows:
        cells = [f"{r['ratios'][k]:.3f} ({r['diff'][k]:g})" for k in r["ratios"]]
        grid_min = (seeds * r["grid_s_per_seed"] + r["run_s"]) / 60  # + the warm-up run
        lines.append(f"| {r['name']} | {r['batch_size']} x {r['group_size']} | "
                     f"{r['median']:g} / {r['sigma']:g} | {r['steps']} | "
                     + (f"{r.get('no_gradient', 0):g} | " if share else "") + " | ".join(cells)
                     + f" | {r['run_s']:.1f} | {grid_min:.0f} |")
    return "\n".join(lines)


def separation(rows_by_scale: dict[float, list[dict[str, Any]]],
               short: tuple[str, ...] = SHORT) -> list[tuple[str, float, str]]:
    """Per candidate, the smallest predicted separation over every comparison and every
    training-cost scale: min |ratio - 1|, and where it falls (comparison, scale). The choice
    criterion of docs/peers.md: a workload is as separating as its least separated headline
    comparison under the cost model's uncertainty, whichever rule is ahead."""
    out = []
    names = [r["name"] for r in next(iter(rows_by_scale.values()))]
    for i, name in enumerate(names):
        worst = min(((abs(r[i]["ratios"][k] - 1), f"{name_} at training x {scale:g}")
                     for scale, r in rows_by_scale.items()
                     for k, name_ in zip(r[i]["ratios"], short)), key=lambda x: x[0])
        out.append((name, *worst))
    return out


def scale_list(text: str) -> list[float]:
    """Comma-separated numbers in (0, 100], at least one."""
    one = float_in(0.0, 100.0, lo_open=True)
    xs = [one(x.strip()) for x in text.split(",") if x.strip()]
    if not xs:
        raise argparse.ArgumentTypeError("names no value (comma-separated numbers)")
    return xs


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="workload_predict.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-scales", type=scale_list, default=[1.0, 0.5, 0.3],
                        help="the fitted training cost (fixed and per token) times each of "
                             "these, comma-separated, each in (0, 100] (default 1,0.5,0.3: the "
                             "fit's r2 is 0.06, and a 32x2 run on this engine trained faster "
                             "than the fit says)")
    parser.add_argument("--seeds", type=int_list(0, 2**32 - 1), default=[0, 1, 2, 3, 4],
                        help="the workloads' seeds, comma-separated (medians over them; "
                             "default 0-4)")
    parser.add_argument("--filtering", action="store_true",
                        help="predict the filtering workload's comparisons on the candidates "
                             "with groups without gradient (FILTER_CANDIDATES)")
    parser.add_argument("--verl-filter-at", choices=("sample", "finish"), default="sample",
                        help="when the simulated verl_drop filters a group without gradient "
                             "and refills its prompt: at the trainer's next sample (verl's "
                             "own, default) or when the group finishes (what the runtime's "
                             "driver filter does to the real-engine bench's verl_drop row)")
    args = parser.parse_args(argv)
    seeds, scales = args.seeds, args.train_scales
    candidates, comps, short = ((FILTER_CANDIDATES, peers.filtering_headline(), FILTER_SHORT)
                                if args.filtering else (CANDIDATES, peers.headline(), SHORT))
    base = json.loads((ROOT / "docs/results/calibration.json").read_text())["fit"]
    by_scale: dict[float, list[dict[str, Any]]] = {}
    for scale in scales:
        fit = {**base, **{part: {**base[part], **{k: base[part][k] * scale
                                                  for k in ("fixed_s", "per_token_s")}}
                          for part in ("train", "train_contended") if base.get(part)}}
        rows = by_scale[scale] = []
        for name, w in candidates.items():
            rows.append({"name": name, **w, **predict(w, seeds, fit, comps,
                                                       args.verl_filter_at)})
        print(f"Training cost x {scale:g}:\n\n" + render(rows, len(seeds), short) + "\n",
              flush=True)
    print("| workload | smallest separation | where |\n|---|---|---|")
    for name, sep, where in separation(by_scale, short):
        print(f"| {name} | {sep:.3f} | {where} |")


MT = peers.SETTINGS["rollout.max_tokens"]
CANDIDATES = {
    "bench (the first)": {**peers.WORKLOADS["bench"], "steps": 10, "max_tokens": MT},
    "heavier tail": {"batch_size": 4, "group_size": 4, "median": 12, "sigma": 1.5,
                     "max_tokens": MT, "steps": 10},
    "8 groups, heavier tail": {"batch_size": 8, "group_size": 4, "median": 12, "sigma": 1.5,
                               "max_tokens": MT, "steps": 8},
    "8 groups of 8 (slots > 64)": {"batch_size": 8, "group_size": 8, "median": 12,
                                   "sigma": 1.5, "max_tokens": MT, "steps": 6},
    "16 groups of 4, median 8": {"batch_size": 16, "group_size": 4, "median": 8, "sigma": 1.5,
                                 "max_tokens": MT, "steps": 6},
    "16 groups of 4, median 8, sigma 2": {"batch_size": 16, "group_size": 4, "median": 8,
                                          "sigma": 2.0, "max_tokens": MT, "steps": 6},
    "16 groups of 4, median 12": {"batch_size": 16, "group_size": 4, "median": 12,
                                  "sigma": 1.5, "max_tokens": MT, "steps": 5},
    "separating: 12 groups of 4, median 8": {**peers.WORKLOADS["separating"], "max_tokens": MT},
    "32 groups of 2, median 8": {"batch_size": 32, "group_size": 2, "median": 8, "sigma": 1.5,
                                 "max_tokens": MT, "steps": 6},
    "8 groups, sigma 2": {"batch_size": 8, "group_size": 4, "median": 12, "sigma": 2.0,
                          "max_tokens": MT, "steps": 8},
    "4 groups, median 8, sigma 2": {"batch_size": 4, "group_size": 4, "median": 8, "sigma": 2.0,
                                    "max_tokens": MT, "steps": 12},
    "8 groups, median 20, sigma 1.2": {"batch_size": 8, "group_size": 4, "median": 20,
                                       "sigma": 1.2, "max_tokens": MT, "steps": 6},
}

# The filtering workload's candidates: shapes of CANDIDATES that this engine runs in a grid of
# about 15 minutes, each with a share 0.2 and 0.4 of prompts without gradient (docs/sim/
# filtering.md's rates), the length independent of it (a prompt's share is the prompt's, the
# lengths are drawn per answer: docs/sim/filtering.md's untilted setting)
FILTER_CANDIDATES = {
    f"{name}, share {rate:g}": {**w, "no_gradient": rate}
    for name, w in (("separating: 12 x 4, median 8", {**peers.WORKLOADS["separating"],
                                                       "max_tokens": MT}),
                    ("8 x 4, median 12, sigma 1.5", CANDIDATES["8 groups, heavier tail"]),
                    ("4 x 4, median 12, sigma 1", CANDIDATES["bench (the first)"]),
                    ("16 x 4, median 8", CANDIDATES["16 groups of 4, median 8"]))
    for rate in (0.2, 0.4)}

if __name__ == "__main__":
    main()
