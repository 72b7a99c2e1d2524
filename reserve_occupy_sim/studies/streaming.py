"""Streaming training: every policy as its framework ships it, on the trainer its framework has.

``python -m reserve_occupy_sim.studies.streaming`` (``make sim-streaming``) runs the rows of
``FRAMEWORKS`` on the shipped setting (synthetic workload seeds 0, 1, 2; the ``qwen3-8b-h20``
preset; 40 batches of 16 groups) at eta 1, 2, 3 and prints one row per (eta, framework), the
mean over seeds of:

* steady-state effective throughput (``metrics.steady_throughput``);
* its ratio to NeMo-RL in_order *as NeMo-RL ships it* on the same seed (``REFERENCE``: the
  streaming trainer, in-flight refit);
* its fraction of the clairvoyant upper bound for its trainer (``bound.clairvoyant_bound`` on
  the row's cost model: the whole-batch bound for a whole-batch trainer, the restated one for a
  streaming trainer);
* the largest staleness trained (over seeds) and the length ratio (mean trained ÷ mean
  settled-admitted response length, ``runtime/lengthbias.py``).

A row is a framework's *shipped* setting, and where what ships is uncertain both settings are
rows (the page, docs/sim/streaming.md, says which and why):

* trainer: ``full`` trains a step once its batch is whole; ``stream`` is the chunked trainer of
  ``cost.TrainCost`` with ``CHUNK_GROUPS`` (NeMo-RL's ``min_groups_for_streaming_train``) and,
  for PSRL, ``chunk_share = PSRL_SHARE``;
* engine: ``re-prefill`` (running contexts are re-prefilled on new weights: partial rollout as
  verl, ROLL, AReaL and PSRL do it, and this simulator's default) or ``in-flight`` (the KV cache
  is kept: NeMo-RL's ``recompute_kv_cache_after_weight_updates = False``).

It also runs a chunk-size sweep (``CHUNK_SWEEP``) at eta 1 for the two streaming policies the
targets compare, computes the bound per (seed, eta, trainer, engine) with its best constructed
schedule, checks the simulator targets (``targets``), and with ``regimes=True`` compares
Reserve–Occupy streaming with NeMo-RL in_order as shipped in every cell of the regime map
(``regimes.Sweep``). It writes ``streaming.json`` to ``results_dir``, ``sim_streaming.png`` to
``img_dir``, and the tables into docs/sim/streaming.md between its generated markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from reserve_occupy.config import MAX_STALENESS

from runtime import atomic_io, inputs

from .bound import clairvoyant_bound
from ..model.core import SimulationStalled
from ..model.cost import CostModel, preset
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, generate

CHUNK_GROUPS = 1  # the streaming setting: NeMo-RL's smallest min_groups_for_streaming_train
CHUNK_SWEEP = (1, 2, 4, 8, 16)
PSRL_SHARE = 0.2  # recompute scope: the old-log-prob forward, 2N of the preset's 10N FLOP/token
REFERENCE = "NeMo in_order stream"
TARGET_FULL = 1.08  # RO streaming >= 1.08x NeMo in_order full-batch at eta = 1
TARGET_SHIPPED = 0.99  # ... >= 0.99x NeMo in_order as shipped, every regime-map cell
TARGET_CEILING = 0.97  # ... >= 0.97x the unbounded ceiling on the same trainer at eta = 2
PAGE = Path("docs/sim/streaming.md")


@dataclass(frozen=True)
class Framework:
    key: str  # row name
    policy: str
    trainer: str  # "full" | "stream"
    engine: str  # "re-prefill" | "in-flight"
    options: tuple[tuple[str, object], ...] = ()
    share: float = 1.0  # chunk_share of the streaming trainer
    what: str = ""


FRAMEWORKS: tuple[Framework, ...] = (
    Framework("NeMo in_order full", "nemo_in_order", "full", "in-flight",
              what="NeMo-RL's exemplar config: min_groups_for_streaming_train = "
                   "num_prompts_per_step (the legacy full-batch semantics)"),
    Framework(REFERENCE, "nemo_in_order", "stream", "in-flight",
              what="NeMo-RL streaming: chunks of >= min_groups_for_streaming_train groups"),
    Framework("NeMo weight_fifo full", "nemo_weight_fifo", "full", "in-flight"),
    Framework("NeMo weight_fifo stream", "nemo_weight_fifo", "stream", "in-flight"),
    Framework("RO full", "reserve_occupy", "full", "re-prefill",
              what="Reserve–Occupy, source protocol, whole-batch consume"),
    Framework("RO stream", "reserve_occupy", "stream", "re-prefill", (("streaming", True),),
              what="Reserve–Occupy with Config.streaming"),
    Framework("RO stream in-flight", "reserve_occupy", "stream", "in-flight",
              (("streaming", True),), what="the same on an engine that refits in flight"),
    Framework("PSRL fine-grain", "psrl_fine_grain", "stream", "re-prefill", share=PSRL_SHARE,
              what="Reserve–Occupy buffers; per chunk only the log-prob forward"),
    Framework("unbounded full", "unbounded", "full", "re-prefill"),
    Framework("unbounded stream", "unbounded", "stream", "re-prefill",
              what="the ceiling on the streaming trainer"),
    Framework("unbounded stream in-flight", "unbounded", "stream", "in-flight",
              what="the ceiling on the streaming trainer and the in-flight engine"),
    Framework("AReaL", "areal", "full", "re-prefill",
              what="prepare_batch: the trainer takes a whole batch"),
)


def framework_cost(cost: CostModel, trainer: str, engine: str, share: float = 1.0,
                   chunk: int = CHUNK_GROUPS) -> CostModel:
    """The cost model with a row's trainer and engine settings."""
    train = dataclasses.replace(cost.train, chunk_groups=chunk if trainer == "stream" else 0,
                                chunk_share=share)
    rollout = dataclasses.replace(cost.rollout, reprefill_on_update=engine == "re-prefill")
    return dataclasses.replace(cost, train=train, rollout=rollout,
                               name=f"{cost.name} {trainer} {engine}")


def _run(fw: Framework, eta: int, workload, cost: CostModel, batches: int, batch_size: int,
         chunk: int = CHUNK_GROUPS) -> dict:
    c = framework_cost(cost, fw.trainer, fw.engine, fw.share, chunk)
    try:
        r, _ = simulate(RunSpec(fw.policy, eta, batches, batch_size, options=fw.options),
                        workload, c)
    except SimulationStalled as exc:
        return {"stalled": str(exc).split(";")[0]}
    return {"steady": r.steady_throughput, "max_staleness": r.max_staleness,
            "length_ratio": r.length_ratio, "trainer_idle": r.trainer_idle,
            "policy_eta": r.eta}


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else float("nan")


def run(cost: CostModel | None = None, seeds=(0, 1, 2), etas=(1, 2, 3), batches: int = 40,
        batch_size: int = 16, groups: int = 1024, chunk_sweep=CHUNK_SWEEP,
        say=print) -> dict:
    """Every (seed, eta, framework), the bounds and the sweep; the JSON-ready payload."""
    cost = cost or preset("qwen3-8b-h20")
    start = time.perf_counter()
    runs, bounds, sweep = [], [], []
    modes = sorted({(fw.trainer, fw.engine, fw.share) for fw in FRAMEWORKS
                    if fw.policy not in ("unbounded", "areal", "psrl_fine_grain")})
    for seed in seeds:
        workload = generate(seed, MathReasoningShape(groups=groups))
        for eta in etas:
            for trainer, engine, share in modes:
                b = clairvoyant_bound(workload, framework_cost(cost, trainer, engine, share),
                                      eta=eta, batch_size=batch_size, batches=batches)
                bounds.append({"seed": seed, "eta": eta, "trainer": trainer, "engine": engine,
                               "upper": b.upper_tok_s, "schedule": b.schedule_tok_s,
                               "schedule_policy": b.schedule_policy, "notes": b.notes,
                               "terms": {"trainer": b.trainer_tok_s, "rollout": b.rollout_tok_s,
                                         "window": b.window_tok_s,
                                         "inflight": b.inflight_tok_s}})
            for fw in FRAMEWORKS:
                runs.append({"seed": seed, "eta": eta, "framework": fw.key,
                             **_run(fw, eta, workload, cost, batches, batch_size)})
            if eta == min(etas):
                for fw in FRAMEWORKS:
                    if fw.key not in (REFERENCE, "RO stream", "RO stream in-flight"):
                        continue
                    for chunk in chunk_sweep:
                        sweep.append({"seed": seed, "eta": eta, "framework": fw.key,
                                      "chunk_groups": chunk,
                                      **_run(fw, eta, workload, cost, batches, batch_size,
                                             chunk)})
        say(f"seed {seed} done ({time.perf_counter() - start:.0f} s)")
    payload = {"setting": {"cost": cost.name, "seeds": list(seeds), "etas": list(etas),
                           "batches": batches, "batch_size": batch_size, "groups": groups,
                           "chunk_groups": CHUNK_GROUPS, "chunk_overhead_s":
                               cost.train.chunk_overhead_s, "psrl_chunk_share": PSRL_SHARE},
               "frameworks": [dataclasses.asdict(fw) for fw in FRAMEWORKS],
               "runs": runs, "bounds": bounds, "sweep": sweep}
    payload["rows"] = rows(payload)
    payload["targets"] = targets(payload)
    payload["seconds"] = time.perf_counter() - start
    return payload


def _bound_of(payload: dict, seed: int, eta: int, fw: dict) -> dict | None:
    engine = fw["engine"]
    for b in payload["bounds"]:
        if (b["seed"], b["eta"], b["trainer"]) == (seed, eta, fw["trainer"]) \
                and b["engine"] == engine:
            return b
    for b in payload["bounds"]:  # the upper bound does not depend on the engine setting
        if (b["seed"], b["eta"], b["trainer"]) == (seed, eta, fw["trainer"]):
            return b
    return None


def rows(payload: dict) -> list[dict]:
    """One row per (eta, framework): means over seeds (see the module docstring)."""
    fws = {fw["key"]: fw for fw in payload["frameworks"]}
    by = {(r["seed"], r["eta"], r["framework"]): r for r in payload["runs"]}
    out = []
    for eta in payload["setting"]["etas"]:
        for key, fw in fws.items():
            mine = [by[(s, eta, key)] for s in payload["setting"]["seeds"]]
            ok = [(s, r) for s, r in zip(payload["setting"]["seeds"], mine) if "steady" in r]
            ratio = [r["steady"] / by[(s, eta, REFERENCE)]["steady"] for s, r in ok
                     if "steady" in by[(s, eta, REFERENCE)]]
            frac = [r["steady"] / _bound_of(payload, s, eta, fw)["upper"] for s, r in ok]
            out.append({"eta": eta, "framework": key, "trainer": fw["trainer"],
                        "engine": fw["engine"], "stalled": len(mine) - len(ok),
                        "steady": _mean(r["steady"] for _, r in ok),
                        "vs_reference": _mean(ratio), "vs_reference_min":
                            float(min(ratio)) if ratio else float("nan"),
                        "of_bound": _mean(frac),
                        "max_staleness": max((r["max_staleness"] for _, r in ok), default=0),
                        "length_ratio": _mean(r["length_ratio"] for _, r in ok)})
    return out


def _ratio(payload: dict, eta: int, a: str, b: str) -> list[float]:
    by = {(r["seed"], r["eta"], r["framework"]): r for r in payload["runs"]}
    return [by[(s, eta, a)]["steady"] / by[(s, eta, b)]["steady"]
            for s in payload["setting"]["seeds"]
            if "steady" in by[(s, eta, a)] and "steady" in by[(s, eta, b)]]


def targets(payload: dict) -> list[dict]:
    """The simulator targets on the shipped setting (min over seeds; met or not)."""
    out = []

    def add(name: str, values: list[float], goal: float | None) -> None:
        low = float(min(values)) if values else float("nan")
        out.append({"target": name, "mean": _mean(values), "min": low, "goal": goal,
                    "met": None if goal is None else bool(values) and low >= goal})

    etas = payload["setting"]["etas"]
    if 1 in etas:
        add("RO stream ÷ NeMo in_order full, eta 1", _ratio(payload, 1, "RO stream",
                                                             "NeMo in_order full"), TARGET_FULL)
        add("RO stream in-flight ÷ NeMo in_order full, eta 1",
            _ratio(payload, 1, "RO stream in-flight", "NeMo in_order full"), TARGET_FULL)
    for eta in etas:
        add(f"RO stream ÷ NeMo in_order as shipped, eta {eta}",
            _ratio(payload, eta, "RO stream", REFERENCE), TARGET_SHIPPED)
        add(f"RO stream in-flight ÷ NeMo in_order as shipped, eta {eta}",
            _ratio(payload, eta, "RO stream in-flight", REFERENCE), TARGET_SHIPPED)
    for ro, ceiling in (("RO stream", "unbounded stream"),
                        ("RO stream in-flight", "unbounded stream in-flight")):
        if 2 in etas:
            add(f"{ro} ÷ {ceiling}, eta 2", _ratio(payload, 2, ro, ceiling), TARGET_CEILING)
        if 1 in etas:
            add(f"{ro} ÷ {ceiling}, eta 1 (the gap)", _ratio(payload, 1, ro, ceiling), None)
    return out


# --------------------------------------------------------------------------- tables ---------

def _f(x: float, fmt: str = ".3f") -> str:
    return "—" if x != x else format(x, fmt)


def table(payload: dict) -> str:
    lines = ["| η | framework | trainer | engine | tok/s | ÷ NeMo in_order as shipped "
             "| ÷ bound | max staleness | length ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        stalled = f" ({r['stalled']} stalled)" if r["stalled"] else ""
        lines.append(f"| {r['eta']} | {r['framework']}{stalled} | {r['trainer']} | "
                     f"{r['engine']} | {_f(r['steady'], '.0f')} | {_f(r['vs_reference'])} | "
                     f"{_f(r['of_bound'])} | {r['max_staleness']} | "
                     f"{_f(r['length_ratio'])} |")
    return "\n".join(lines)


def bound_table(payload: dict) -> str:
    lines = ["| η | trainer | engine | upper bound tok/s | binding terms | best schedule tok/s "
             "(÷ bound) | schedules that won |", "|---|---|---|---|---|---|---|"]
    keys = sorted({(b["eta"], b["trainer"], b["engine"]) for b in payload["bounds"]})
    for eta, trainer, engine in keys:
        bs = [b for b in payload["bounds"]
              if (b["eta"], b["trainer"], b["engine"]) == (eta, trainer, engine)]
        binding = sorted({b["notes"].split(" ", 2)[1] for b in bs})
        winners = sorted({b["schedule_policy"] for b in bs})
        up, sched = _mean(b["upper"] for b in bs), _mean(b["schedule"] for b in bs)
        frac = _mean(b["schedule"] / b["upper"] for b in bs)
        lines.append(f"| {eta} | {trainer} | {engine} | {up:.0f} | {'/'.join(binding)} | "
                     f"{sched:.0f} ({frac:.3f}) | {'; '.join(winners)} |")
    return "\n".join(lines)


def sweep_table(payload: dict) -> str:
    keys = sorted({r["framework"] for r in payload["sweep"]})
    chunks = sorted({r["chunk_groups"] for r in payload["sweep"]})
    lines = ["| chunk groups | " + " | ".join(f"{k} tok/s" for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for c in chunks:
        cells = []
        for k in keys:
            vals = [r["steady"] for r in payload["sweep"]
                    if r["framework"] == k and r["chunk_groups"] == c and "steady" in r]
            cells.append(_f(_mean(vals), ".0f"))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_table(payload: dict) -> str:
    lines = ["| target | mean | min over seeds | goal | met |", "|---|---|---|---|---|"]
    for t in payload["targets"]:
        goal = "—" if t["goal"] is None else f"≥ {t['goal']:.2f}"
        met = "—" if t["met"] is None else ("yes" if t["met"] else "no")
        lines.append(f"| {t['target']} | {_f(t['mean'])} | {_f(t['min'])} | {goal} | {met} |")
    return "\n".join(lines)


BLOCKS = {"streaming-table": table, "streaming-bound": bound_table,
          "streaming-sweep": sweep_table, "streaming-targets": targets_table}


# --------------------------------------------------------------------------- the regime map ----

def run_regimes(cost: CostModel | None = None, sweep=None, say=print) -> dict:
    """Reserve–Occupy streaming (re-prefill and in-flight) ÷ NeMo-RL in_order as shipped in
    every cell of the regime map (``regimes.Sweep``: its cells, seeds and batches)."""
    from ..model.filtering import RewardFilter
    from .regimes import Sweep, scaled

    cost = cost or preset("qwen3-8b-h20")
    sweep = sweep or Sweep()
    fws = {fw.key: fw for fw in FRAMEWORKS}
    keys = (REFERENCE, "RO stream", "RO stream in-flight")
    start = time.perf_counter()
    cells, seen = [], set()
    for cell in sweep.cells():
        if cell.key() in seen:
            continue
        seen.add(cell.key())
        c = scaled(cost, cell.train_mult, cell.concurrency)
        res: dict[str, list] = {k: [] for k in keys}
        for seed in range(sweep.seeds):
            wl = generate(seed, MathReasoningShape(groups=sweep.groups, truncated=cell.truncated))
            filt = RewardFilter(cell.filter_rate, seed=seed) if cell.filter_rate > 0 else None
            for k in keys:
                fw = fws[k]
                fc = framework_cost(c, fw.trainer, fw.engine, fw.share)
                try:
                    r, _ = simulate(RunSpec(fw.policy, cell.eta, sweep.batches, sweep.batch_size,
                                            options=fw.options, filtering=filt), wl, fc)
                    res[k].append(r.steady_throughput)
                except SimulationStalled:
                    res[k].append(None)
        ratios = {}
        for k in keys[1:]:
            vals = [a / b for a, b in zip(res[k], res[REFERENCE]) if a and b]
            ratios[k] = {"mean": _mean(vals), "min": float(min(vals)) if vals else float("nan")}
        cells.append({**dataclasses.asdict(cell), "ratios": ratios})
    say(f"regime map: {len(cells)} cells in {time.perf_counter() - start:.0f} s")
    return {"sweep": dataclasses.asdict(sweep), "cells": cells}


def regimes_block(payload: dict) -> str:
    """The regime-map table of a payload that has one (``--regimes``)."""
    return regimes_table(payload["regimes"])


def regimes_table(reg: dict) -> str:
    lines = ["| cells | RO stream ÷ in_order as shipped: min (mean) | cells ≥ 0.99 "
             "| RO stream in-flight ÷ in_order as shipped: min (mean) | cells ≥ 0.99 |",
             "|---|---|---|---|---|"]
    for eta in sorted({c["eta"] for c in reg["cells"]}):
        cs = [c for c in reg["cells"] if c["eta"] == eta]
        out = [f"η = {eta}: {len(cs)}"]
        for k in ("RO stream", "RO stream in-flight"):
            mins = [c["ratios"][k]["min"] for c in cs]
            means = [c["ratios"][k]["mean"] for c in cs]
            ok = sum(1 for m in mins if m >= TARGET_SHIPPED)
            out += [f"{min(mins):.3f} ({_mean(means):.3f})", f"{ok} of {len(cs)}"]
        lines.append("| " + " | ".join(out) + " |")
    worst = sorted(reg["cells"], key=lambda c: c["ratios"]["RO stream in-flight"]["min"])[:5]
    lines += ["", "| worst cells (in-flight) | η | train × | concurrency | truncated | filter "
              "| RO stream in-flight ÷ in_order (min) |", "|---|---|---|---|---|---|---|"]
    for c in worst:
        lines.append(f"| {c['slice']} | {c['eta']} | {c['train_mult']:g} | {c['concurrency']} | "
                     f"{c['truncated']:g} | {c['filter_rate']:g} | "
                     f"{c['ratios']['RO stream in-flight']['min']:.3f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- output ---------

def write_page(page: Path, blocks: dict[str, str]) -> None:
    """Replace each ``<!-- BEGIN generated:NAME -->`` .. ``END`` block of ``page``."""
    text = page.read_text()
    for name, body in blocks.items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        i, j = text.find(begin), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"{page}: no generated block {name!r}")
        text = text[: i + len(begin)] + "\n" + body + "\n" + text[j:]
    atomic_io.write_text(page, text)


def figure(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_ = [r for r in payload["rows"]]
    keys = [fw["key"] for fw in payload["frameworks"]]
    etas = payload["setting"]["etas"]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    width = 0.8 / len(keys)
    for i, k in enumerate(keys):
        vals = [next(r["steady"] for r in rows_ if r["eta"] == e and r["framework"] == k)
                for e in etas]
        ax.bar([e + (i - len(keys) / 2) * width for e in etas], vals, width, label=k)
    for e in etas:
        ups = [b["upper"] for b in payload["bounds"] if b["eta"] == e and b["trainer"] == "stream"]
        ax.hlines(_mean(ups), e - 0.42, e + 0.42, colors="k", linestyles="dashed")
    ax.set_xticks(etas, [f"η = {e}" for e in etas])
    ax.set_ylabel("steady-state effective tok/s")
    ax.set_title("Frameworks as shipped; dashed: clairvoyant upper bound, streaming trainer")
    ax.legend(fontsize=7, ncol=4, loc="lower right")
    fig.tight_layout()
    atomic_io.savefig(fig, path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reserve_occupy_sim.studies.streaming",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--eta", default="1,2,3")
    parser.add_argument("--batches", default="40")
    parser.add_argument("--results-dir", default="docs/results")
    parser.add_argument("--img-dir", default="docs/img")
    parser.add_argument("--page", default=str(PAGE), help="docs page to fill ('' : none)")
    parser.add_argument("--regimes", action="store_true",
                        help="also compare across the regime map (slow: see the page)")
    parser.add_argument("--tiny", action="store_true",
                        help="seconds: one seed, 12 batches of 4, eta 1,2; the tiny regime map; "
                             "writes under out/sim-tiny, never the docs")
    args = parser.parse_args(argv)
    try:
        seeds = tuple(inputs.int_list("--seeds", args.seeds))
        etas = tuple(inputs.int_list("--eta", args.eta))
        inputs.int_in("--eta", max(etas), 0, MAX_STALENESS)
        batches = inputs.one_int("--batches", args.batches, 2)
        if args.tiny:
            args.results_dir, args.img_dir, args.page = ("out/sim-tiny/results",
                                                         "out/sim-tiny/img", "")
        inputs.output_dir(args.results_dir, "--results-dir", files=("streaming.json",))
        inputs.output_dir(args.img_dir, "--img-dir", files=("sim_streaming.png",))
        if args.page:  # before the runs: a missing marker must not cost a 30-minute run
            inputs.output_file(args.page, "--page")  # rewritten in place: not a link
            text = inputs.text_file(args.page, "--page")
            names = list(BLOCKS) + (["streaming-regimes"] if args.regimes else [])
            for name in names:
                if f"<!-- BEGIN generated:{name} -->" not in text \
                        or f"<!-- END generated:{name} -->" not in text:
                    raise inputs.InputError(f"--page {args.page}: no generated block {name!r}")
    except inputs.InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kw = dict(seeds=(0,), etas=(1, 2), batches=12, batch_size=4, groups=128,
              chunk_sweep=(1, 2)) if args.tiny else dict(seeds=seeds, etas=etas, batches=batches)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    payload = run(say=say, **kw)
    blocks = {name: make(payload) for name, make in BLOCKS.items()}
    if args.regimes:
        from .regimes import TINY

        payload["regimes"] = run_regimes(sweep=TINY if args.tiny else None, say=say)
        blocks["streaming-regimes"] = regimes_table(payload["regimes"])
    results, img = Path(args.results_dir), Path(args.img_dir)
    results.mkdir(parents=True, exist_ok=True)
    img.mkdir(parents=True, exist_ok=True)
    atomic_io.write_text(results / "streaming.json", json.dumps(payload, indent=1) + "\n")
    figure(payload, img / "sim_streaming.png")
    for name, body in blocks.items():
        print(f"\n## {name}\n\n{body}")
    if args.page:
        write_page(Path(args.page), blocks)
        print(f"\nwrote {args.page}")
    print(f"wrote {results / 'streaming.json'} and {img / 'sim_streaming.png'}")
    return 0


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.streaming")
