"""The frontier table: policies, oversampling modes and extension prototypes x eta, side by side.

``python -m reserve_occupy_sim.studies.frontier`` (``make sim-frontier``) runs every variant of
``VARIANTS`` on the shipped setting (synthetic workload seeds 0, 1, 2; the ``qwen3-8b-h20`` preset;
40 batches of 16 groups) at eta 1, 2, 3 and prints one row per (eta, variant), averaged over seeds:

* steady-state effective throughput (``metrics.steady_throughput``) and its ratio to NeMo-RL
  in_order on the same seed;
* steady-state seconds per batch ÷ in_order's: the same comparison with the length of what trains
  taken out (a variant that trains longer or shorter answers moves tok/s but not this);
* the fraction of the clairvoyant bound (``bound.clairvoyant_bound``, when that module exists);
* L2 and L3 waste as shares of all trajectory tokens;
* length bias (``runtime/lengthbias.py``): mean trained ÷ mean admitted response length and the
  KS distance; a variant ahead of in_order in tok/s or in batches/s whose length ratio is below
  ``SHORT_BIAS`` is labelled "short answers": what it gains, it gains by training shorter
  answers;
* the largest staleness trained (over seeds).

It writes ``frontier.json`` (every run) to ``results_dir`` and ``sim_frontier.png`` to ``img_dir``.
The whole run takes about a minute on two cores; ``tiny=True`` is the seconds-long smoke version.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime import inputs
from runtime import atomic_io

from ..model.cost import CostModel, preset
from ..model.metrics import SHORT_BIAS, RunResult
from . import pages
from .report import markdown
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, generate

BASELINE = "in_order"


@dataclass(frozen=True)
class Variant:
    key: str  # row name
    policy: str
    options: tuple[tuple[str, object], ...] = ()
    candidates: int | None = None  # group-level oversampling
    what: str = ""


VARIANTS: tuple[Variant, ...] = (
    Variant("in_order", "nemo_in_order", what="NeMo-RL in_order"),
    Variant("unbounded", "unbounded", what="no staleness bound (not bounded)"),
    Variant("areal", "areal", what="AReaL (count bound; not per-trajectory)"),
    Variant("RO", "reserve_occupy", what="Reserve–Occupy, source protocol"),
    Variant("clairvoyant", "clairvoyant",
            what="EDF schedule knowing every length (bound.py's reference; not realisable)"),
    Variant("clairvoyant longest-first", "clairvoyant", (("start", "longest"),),
            what="+ each admission burst queued longest first (bound.py's best at eta 0-1)"),
    Variant("RO C=20", "reserve_occupy", (("capacity", 20),),
            what="batch-level oversampling (7.6), capacity 20"),
    Variant("RO C=20 progress-close", "reserve_occupy",
            (("capacity", 20), ("progress_close", True)),
            what="+ abort the reservations that decoded least"),
    Variant("RO C=20 idle-surplus", "reserve_occupy",
            (("capacity", 20), ("idle_surplus", True)),
            what="+ surplus only into free engine slots"),
    Variant("RO cand=10", "reserve_occupy", candidates=10,
            what="group-level oversampling (7.5): first 8 of 10"),
    Variant("in_order cand=10", "nemo_in_order", candidates=10,
            what="in_order, first 8 of 10"),
    Variant("RO head-priority", "reserve_occupy", (("head_priority", True),),
            what="head buffer's groups first in the engine queue"),
    Variant("RO lookahead=16", "reserve_occupy", (("lookahead", 16),),
            what="longest earlier-epoch prompt of the next 16 first"),
    Variant("RO lookahead=64", "reserve_occupy", (("lookahead", 64),),
            what="longest earlier-epoch prompt of the next 64 first"),
)


def _bound(workload, cost, eta: int, batch_size: int, batches: int):
    """The clairvoyant bound's (upper, schedule) tok/s, or None where bound.py is absent."""
    try:
        from .bound import clairvoyant_bound
    except ImportError:
        return None
    b = clairvoyant_bound(workload, cost, eta=eta, batch_size=batch_size, batches=batches)
    return b.upper_tok_s, b.schedule_tok_s, b.notes


def _steady_batch_s(r: RunResult) -> float:
    return float(np.mean(r.batch_seconds[r.warmup_batches:]))


def run(cost: CostModel | None = None, seeds=(0, 1, 2), etas=(1, 2, 3), batches: int = 40,
        batch_size: int = 16, variants: tuple[Variant, ...] = VARIANTS, groups: int = 1024,
        say=print) -> dict:
    """Run every (seed, eta, variant); return the JSON-ready payload with the table in it."""
    cost = cost or preset("qwen3-8b-h20")
    start = time.perf_counter()
    runs: list[dict] = []
    bounds: dict[str, list] = {}
    for seed in seeds:
        workload = generate(seed, MathReasoningShape(groups=groups))
        for eta in etas:
            bounds[f"{seed}:{eta}"] = _bound(workload, cost, eta, batch_size, batches)
            for v in variants:
                spec = RunSpec(v.policy, eta, batches, batch_size, options=v.options,
                               candidates=v.candidates)
                r, _ = simulate(spec, workload, cost)
                out = r.to_json()
                out["policy_eta"] = out.pop("eta")
                for bulky in ("staleness_counts", "batch_sizes"):  # keep the JSON small
                    out.pop(bulky)
                runs.append({"seed": seed, "eta": eta, "variant": v.key,
                             "steady_batch_s": _steady_batch_s(r), **out})
    elapsed = time.perf_counter() - start
    table = _table(runs, bounds, seeds, etas, variants)
    if any(bounds.values()):
        lines = []
        for eta in etas:
            bs = [bounds[f"{s}:{eta}"] for s in seeds if bounds.get(f"{s}:{eta}")]
            lines.append(f"η = {eta}: clairvoyant bound {np.mean([b[0] for b in bs]):.0f} "
                         f"tok/s (upper), best constructed schedule "
                         f"{np.mean([b[1] for b in bs]):.0f} tok/s (mean over seeds)")
        table += "\n\n" + "\n".join(lines)
    say(f"frontier: {len(runs)} runs ({len(seeds)} seeds x {len(etas)} η x {len(variants)} "
        f"variants, {batches} batches of {batch_size}), {elapsed:.0f} s\n{table}")
    return {"cost": cost.to_json(), "seeds": list(seeds), "etas": list(etas),
            "batches": batches, "batch_size": batch_size, "seconds": elapsed,
            "variants": [{"key": v.key, "policy": v.policy, "options": dict(v.options),
                          "candidates": v.candidates, "what": v.what} for v in variants],
            "bounds": bounds, "runs": runs, "table": table}


def _rows(runs: list[dict], bounds: dict, seeds, etas, variants) -> list[dict]:
    by = {(x["seed"], x["eta"], x["variant"]): x for x in runs}
    out = []
    for eta in etas:
        for v in variants:
            mine = [by[(s, eta, v.key)] for s in seeds]
            base = [by.get((s, eta, BASELINE)) for s in seeds]
            thr = [m["steady_throughput"] for m in mine]
            ratio = [m["steady_throughput"] / b["steady_throughput"]
                     for m, b in zip(mine, base) if b and b["steady_throughput"]]
            pace = [b["steady_batch_s"] / m["steady_batch_s"]
                    for m, b in zip(mine, base) if b and m["steady_batch_s"]]
            frac = [m["steady_throughput"] / bounds[f"{s}:{eta}"][0]
                    for s, m in zip(seeds, mine) if bounds.get(f"{s}:{eta}")]
            total = [m["tokens_trained"] + m["waste_l2_tokens"] + m["waste_l3_tokens"]
                     + m["waste_filtered_tokens"] for m in mine]
            out.append({
                "eta": eta, "variant": v.key, "throughput": float(np.mean(thr)),
                "ratio": float(np.mean(ratio)) if ratio else None,
                "ratio_min": min(ratio) if ratio else None,
                "ratio_max": max(ratio) if ratio else None,
                "pace": float(np.mean(pace)) if pace else None,
                "bound_fraction": float(np.mean(frac)) if frac else None,
                "l2": float(np.mean([m["waste_l2_tokens"] / t for m, t in zip(mine, total)])),
                "l3": float(np.mean([m["waste_l3_tokens"] / t for m, t in zip(mine, total)])),
                "length_ratio": float(np.mean([m["length_ratio"] for m in mine])),
                "length_ks": float(np.mean([m["length_ks"] for m in mine])),
                "trained_len": float(np.mean([m["trained_response_mean"] for m in mine])),
                "max_staleness": max(m["max_staleness"] for m in mine),
                "bounded": all(m["bounded"] for m in mine),
            })
    return out


def _table(runs, bounds, seeds, etas, variants) -> str:
    rows = []
    for x in _rows(runs, bounds, seeds, etas, variants):
        label = x["variant"]
        ahead = (x["ratio"] or 0) > 1.0 or (x["pace"] or 0) > 1.0
        if ahead and x["length_ratio"] < SHORT_BIAS:
            label += " (short answers)"
        if not x["bounded"]:
            label += " (not bounded)"
        ratio = ("-" if x["ratio"] is None else
                 f"{x['ratio']:.2f} [{x['ratio_min']:.2f}, {x['ratio_max']:.2f}]")
        rows.append([x["eta"], label, round(x["throughput"]), ratio,
                     "-" if x["pace"] is None else f"{x['pace']:.2f}",
                     "-" if x["bound_fraction"] is None else f"{x['bound_fraction']:.0%}",
                     f"{x['l2']:.1%}", f"{x['l3']:.1%}",
                     f"{x['length_ratio']:.2f} / {x['length_ks']:.2f}",
                     round(x["trained_len"]), x["max_staleness"]])
    return markdown(["η", "variant", "steady tok/s", "÷ in_order [min, max]",
                     "batches/s ÷ in_order", "of bound", "L2 waste", "L3 waste",
                     "length bias: ratio / KS", "trained response mean", "max staleness"],
                    rows)


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(payload["runs"], payload["bounds"], payload["seeds"], payload["etas"],
                 tuple(Variant(v["key"], v["policy"]) for v in payload["variants"]))
    keys = [v["key"] for v in payload["variants"]]
    etas = payload["etas"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(etas)
    for j, eta in enumerate(etas):
        vals = [next(x for x in rows if x["eta"] == eta and x["variant"] == k) for k in keys]
        xs = np.arange(len(keys)) + (j - (len(etas) - 1) / 2) * width
        bars = ax.bar(xs, [x["ratio"] or 0 for x in vals], width, label=f"η = {eta}")
        for b, x in zip(bars, vals):
            if x["length_ratio"] < SHORT_BIAS:
                b.set_hatch("//")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(keys)), keys, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("steady tok/s ÷ NeMo in_order")
    ax.set_ylim(0.6, max(1.35, ax.get_ylim()[1]))
    ax.set_title(f"Frontier: seeds {payload['seeds']}, {payload['batches']} batches "
                 "(hatched: trained responses ≥ 3 % shorter than admitted)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_io.savefig(fig, path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reserve_occupy_sim.studies.frontier",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--results-dir", default="docs/results")
    parser.add_argument("--img-dir", default="docs/img")
    parser.add_argument("--tiny", action="store_true",
                        help="seconds-long smoke run (1 seed, η = 1, 4 batches, 128 groups)")
    args = parser.parse_args(argv)
    name = "frontier_tiny" if args.tiny else "frontier"
    try:  # before the runs, not after them (docs/cli.md); the files too: not a link or a fifo
        results = inputs.output_dir(args.results_dir, "--results-dir", files=(f"{name}.json",))
        img = inputs.output_dir(args.img_dir, "--img-dir", files=(f"sim_{name}.png",))
    except inputs.InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.tiny:
        payload = run(seeds=(0,), etas=(1,), batches=4, batch_size=4, groups=128)
    else:
        payload = run()
    atomic_io.write_text(results / f"{name}.json", json.dumps(payload, indent=1) + "\n")
    plot(payload, img / f"sim_{name}.png")
    print(f"wrote {results / (name + '.json')} and {img / ('sim_' + name + '.png')}")
    for page in pages.update(pages.fed_by(f"{name}.json"), results):  # docs/results only
        print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.frontier")
