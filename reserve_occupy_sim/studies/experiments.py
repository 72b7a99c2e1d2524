"""The source's experiments (section 9 and 10 of the blog), reproduced on our model, plus the
robustness runs that explain where our numbers differ.

1. Correctness: Reserve–Occupy at eta 0..5, 100 batches each; every batch must hold
   ``batch_size * group_size`` trajectories and no staleness may exceed eta.
2. Throughput: every policy at eta 1, 2, 3 for 10 batches (the source's setting), then the same
   over 8 workload seeds (spread of the ratios) and over 100 batches (steady state), and NeMo-RL
   weight_fifo with ``min_groups_for_streaming_train = batch_size`` (it can wedge).
3. Reserve–Occupy against the unbounded-staleness ceiling at each eta (100 batches).
4. Reward filtering across every policy, and 5. the timeout of spec §6.2 (``scenarios.py``).
6. The regime map (``regimes.py``), with Reserve–Occupy's two oversampling modes in every cell.

Experiment 2 also runs at eta 4 and 5, which the source did not measure.

``run_all`` writes JSON to ``results_dir`` and PNGs to ``img_dir`` and returns the Markdown
tables it printed.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np
from runtime import atomic_io
from reserve_occupy_peers import POLICIES

from . import plots
from ..model.core import SimulationStalled
from ..model.cost import CostModel
from ..model.metrics import RunResult
from . import pages
from .report import comparison, markdown, merge_tables
from ..model.runner import RunSpec, run_grid, simulate
from ..model.workload import Workload, generate

# The source's reported numbers (its section 10): tokens/s, and the
# speed-up of Reserve–Occupy over each baseline ("1.11-1.14x" is a range over eta 1..3).
SOURCE_THROUGHPUT = {"reserve_occupy": {1: 1929, 2: 2007, 3: 2056},
                     "verl_drop": {1: 1438}, "trl": {1: 1612}, "roll": {1: 1512}}
SOURCE_SPEEDUP = {"nemo_in_order": "1.11–1.14", "nemo_weight_fifo": "1.06–1.17",
                  "verl_drop": {1: "1.34", 2: "1.10", 3: "1.05"}, "trl": "1.20–1.36",
                  "roll": "1.28–1.33"}
EXP2_POLICIES = ("reserve_occupy", "nemo_in_order", "nemo_weight_fifo", "verl_drop", "trl",
                 "roll", "areal", "synchronous", "unbounded")


def _dump(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_io.write_text(path, json.dumps(payload, indent=1, sort_keys=False) + "\n")


def _context(workload: Workload, cost: CostModel) -> dict:
    return {"workload": workload.name, "workload_stats": workload.stats(), "cost": cost.to_json()}


def exp1(workload: Workload, cost: CostModel, batches: int = 100, etas=range(6),
         progress: bool = True) -> tuple[list[RunResult], float, str]:
    start = time.perf_counter()
    results = run_grid([RunSpec("reserve_occupy", e, batches) for e in etas], workload, cost,
                       show_progress=progress)
    elapsed = time.perf_counter() - start
    rows = []
    for r in results:
        width = max(len(c) for c in r.staleness_counts)
        hist = np.sum([c + [0] * (width - len(c)) for c in r.staleness_counts], axis=0).tolist()
        rows.append([r.eta, r.batches, f"{min(r.batch_sizes)}–{max(r.batch_sizes)}",
                     r.max_staleness, "yes" if r.max_staleness <= r.eta else "NO",
                     " / ".join(str(int(h)) for h in hist[: r.eta + 1]), round(r.throughput)])
    table = markdown(["η", "batches", "trajectories per batch", "max staleness", "≤ η",
                      "trajectories at staleness 0 / 1 / …", "tok/s"], rows)
    return results, elapsed, table


def exp2(workload: Workload, cost: CostModel, batches: int = 10, etas=(1, 2, 3),
         policies=EXP2_POLICIES, progress: bool = True) -> tuple[list[RunResult], str]:
    specs = [RunSpec(p, e, batches) for e in etas for p in policies]
    results = run_grid(specs, workload, cost, show_progress=progress)
    return results, comparison(results)


def source_table(results: list[RunResult]) -> str:
    """Ours beside the source's: throughput of Reserve–Occupy and its speed-ups."""
    ro = {r.grid_eta: r for r in results if r.policy == "reserve_occupy"}
    rows = []
    for name in ("reserve_occupy",) + tuple(SOURCE_SPEEDUP):
        label = POLICIES[name].label
        for eta in sorted(ro):
            r = next((x for x in results if x.policy == name and x.grid_eta == eta), None)
            if r is None:
                continue
            src_thr = SOURCE_THROUGHPUT.get(name, {}).get(eta, "")
            src_up = SOURCE_SPEEDUP.get(name, "")
            if isinstance(src_up, dict):
                src_up = src_up.get(eta, "")
            ours_up = ("" if name == "reserve_occupy" else
                       f"{ro[eta].throughput / r.throughput:.2f}")
            rows.append([eta, label, src_thr, round(r.throughput), src_up, ours_up])
    return markdown(["η", "policy", "source tok/s", "our tok/s", "source RO ÷ it",
                     "our RO ÷ it"], rows)


def seed_spread(cost: CostModel, seeds: int = 8, batches: int = 10, etas=(1, 2, 3),
                policies=EXP2_POLICIES, progress: bool = True) -> tuple[dict, str]:
    """RO's speed-up over each policy across workload seeds: mean [min, max]."""
    ratios: dict[tuple[int, str], list[float]] = {}
    ro_thr: dict[int, list[float]] = {}
    for seed in range(seeds):
        res = run_grid([RunSpec(p, e, batches) for e in etas for p in policies],
                       generate(seed), cost, show_progress=progress)
        for eta in etas:
            ro = next(r for r in res if r.policy == "reserve_occupy" and r.grid_eta == eta)
            ro_thr.setdefault(eta, []).append(ro.throughput)
            for r in res:
                if r.grid_eta == eta:
                    ratios.setdefault((eta, r.policy), []).append(ro.throughput / r.throughput)
    rows = []
    for eta in etas:
        t = ro_thr[eta]
        rows.append([eta, "Reserve–Occupy tok/s",
                     f"{np.mean(t):.0f} [{min(t):.0f}, {max(t):.0f}]"])
        for p in policies:
            v = ratios.get((eta, p))
            if p == "reserve_occupy" or not v:
                continue
            rows.append([eta, f"RO ÷ {POLICIES[p].label}",
                         f"{np.mean(v):.2f} [{min(v):.2f}, {max(v):.2f}]"])
    payload = {"seeds": seeds, "batches": batches,
               "ro_throughput": {str(k): v for k, v in ro_thr.items()},
               "speedup": {f"{e}:{p}": v for (e, p), v in ratios.items()}}
    return payload, markdown(["η", "quantity", f"mean [min, max] over {seeds} seeds"], rows)


def wedge(workload: Workload, cost: CostModel, batches: int = 10, etas=(1, 2, 3)) -> tuple[
        list[dict], str]:
    """weight_fifo with min_groups_for_streaming_train = batch size: does it finish?"""
    out, rows = [], []
    for eta in etas:
        spec = RunSpec("nemo_weight_fifo", eta, batches,
                       options=(("min_groups_for_streaming_train", 16),))
        try:
            r, _ = simulate(spec, workload, cost)
            out.append({"eta": eta, "stalled": False, "throughput": r.throughput})
            rows.append([eta, "finished", round(r.throughput)])
        except SimulationStalled as exc:
            out.append({"eta": eta, "stalled": True, "report": str(exc)})
            rows.append([eta, "stalled: " + str(exc).split(":")[0], "-"])
    return out, markdown(["η", "weight_fifo, min_groups_for_streaming_train=16", "tok/s"], rows)


def exp3(workload: Workload, cost: CostModel, batches: int = 100, etas=range(6),
         progress: bool = True) -> tuple[list[RunResult], RunResult, str]:
    specs = [RunSpec("reserve_occupy", e, batches) for e in etas]
    specs.append(RunSpec("unbounded", 0, batches))
    results = run_grid(specs, workload, cost, show_progress=progress)
    ro, ceiling = results[:-1], results[-1]
    gen_rate = ceiling.decoded_tokens / ceiling.wall_s
    rows = [[r.eta, round(r.throughput), round(ceiling.throughput),
             f"{r.throughput / ceiling.throughput:.0%}", f"{r.rollout_idle:.0%}",
             f"{r.trainer_idle:.0%}", r.max_staleness] for r in ro]
    table = markdown(["η", "Reserve–Occupy tok/s", "unbounded tok/s", "RO / unbounded",
                      "RO rollout idle", "RO trainer idle", "RO max staleness"], rows)
    table += (f"\n\nUnbounded run: max staleness {ceiling.max_staleness}, rollout idle "
              f"{ceiling.rollout_idle:.0%}, trainer idle {ceiling.trainer_idle:.0%}, engines "
              f"decode {gen_rate:.0f} response tokens/s.")
    return ro, ceiling, table


EXP2_ETAS = (1, 2, 3, 4, 5)


def _filtering_map(result: dict, img_dir: Path) -> Path:
    """The regime map's filter slice (the only map that shows filtered cells)."""
    from . import heatmaps, regimes

    return heatmaps.regime_map(result, "filter", Path(img_dir) / "sim_regimes_filtering.png",
                               baselines=("nemo_in_order", "verl_drop", regimes.IN_ORDER_DROP))


def redraw_remeasured(result: dict, results_dir: str | Path, img_dir: str | Path,
                      redone: list[tuple]) -> list[Path]:
    """After ``regimes.remeasure_filtered`` ran the cells ``redone`` of a stored map again: its
    ``exp6_*`` sections of tables.md and the filter slice's map, drawn again from the stored
    map, and the pages that show them; the rows of ``exp6_cells`` of the cells not rerun are
    kept as drawn before (``regimes.keep_rows``). The hardware slice's two maps hold no filtered
    cell and are left as they are. Returns the pages rewritten."""
    from . import regimes

    path = Path(results_dir) / "tables.md"
    old = None
    if path.exists():
        for part in ("\n" + path.read_text()).split("\n## ")[1:]:
            name, _, body = part.partition("\n\n")
            if name.strip() == "exp6_cells":
                old = body.strip()
    merge_tables(path, {
        "exp6_regimes": regimes.summary_table(result),
        "exp6_oversampling": regimes.oversampling_table(result),
        "exp6_cells": regimes.keep_rows(regimes.cell_table(result), old, redone),
        "exp6_targets": regimes.targets_table(result)})
    _filtering_map(result, Path(img_dir))
    return pages.update(pages.fed_by("tables.md", "regimes.json"), Path(results_dir))


def run_all(workload: Workload, cost: CostModel, results_dir: str | Path, img_dir: str | Path,
            only=(1, 2, 3, 4, 5, 6), progress: bool = True, seeds: int | None = None,
            say: Callable[[str], None] = print, tiny: bool = False,
            regime_batches: int | None = None) -> dict[str, str]:
    results_dir, img_dir = Path(results_dir), Path(img_dir)
    tables: dict[str, str] = {}
    context = _context(workload, cost)
    if any(x in only for x in (1, 2, 3)):
        plots.workload_lengths(workload, img_dir / "sim_workload.png")
    if 1 in only:
        res, elapsed, table = exp1(workload, cost, progress=progress)
        say(f"\nExperiment 1: correctness (Reserve–Occupy, 100 batches per η; "
            f"{elapsed:.1f} s)\n{table}")
        tables["exp1"] = table
        _dump(results_dir / "exp1_correctness.json",
              {**context, "seconds": elapsed, "runs": [r.to_json() for r in res]})
        plots.staleness_composition(res, img_dir / "sim_exp1_staleness.png")
    if 2 in only:
        seeds2 = 8 if seeds is None else seeds
        res, table = exp2(workload, cost, etas=EXP2_ETAS, progress=progress)
        src = source_table(res)
        say(f"\nExperiment 2: throughput, 10 batches\n{table}\n\nBeside the source\n{src}")
        spread, spread_table = seed_spread(cost, seeds=seeds2, etas=EXP2_ETAS,
                                           progress=progress)
        say(f"\nExperiment 2 over {seeds2} workload seeds (10 batches)\n{spread_table}")
        long_res, long_table = exp2(workload, cost, batches=100, etas=EXP2_ETAS,
                                    progress=progress)
        say(f"\nExperiment 2 over 100 batches\n{long_table}")
        wedge_out, wedge_table = wedge(workload, cost)
        say(f"\nNeMo-RL weight_fifo with min_groups_for_streaming_train = 16\n{wedge_table}")
        tables.update(exp2=table, exp2_source=src, exp2_seeds=spread_table,
                      exp2_long=long_table, exp2_wedge=wedge_table)
        _dump(results_dir / "exp2_throughput.json",
              {**context, "source_throughput": SOURCE_THROUGHPUT,
               "source_speedup": SOURCE_SPEEDUP, "runs": [r.to_json() for r in res],
               "seed_spread": spread, "runs_100_batches": [r.to_json() for r in long_res],
               "weight_fifo_min16": wedge_out})
        plots.throughput_bars(res, img_dir / "sim_exp2_throughput.png",
                              "10 batches (the source's setting)")
        plots.throughput_bars(long_res, img_dir / "sim_exp2_throughput_100.png", "100 batches")
    if 3 in only:
        ro, ceiling, table = exp3(workload, cost, progress=progress)
        say(f"\nExperiment 3: Reserve–Occupy against the unbounded ceiling (100 batches)\n"
            f"{table}")
        tables["exp3"] = table
        _dump(results_dir / "exp3_ceiling.json",
              {**context, "reserve_occupy": [r.to_json() for r in ro],
               "unbounded": ceiling.to_json()})
        plots.ceiling_bars(ro, ceiling, img_dir / "sim_exp3_ceiling.png")
    if 4 in only or 5 in only:
        from . import heatmaps, scenarios

        out = scenarios.run(cost, which=tuple(x for x in (4, 5) if x in only),
                            progress=progress, say=say)
        if "filtering" in out:
            payload, tables["exp4_filtering"] = out["filtering"]
            _dump(results_dir / "exp4_filtering.json", {"cost": cost.to_json(), **payload})
        if "timeout" in out:
            payload, tables["exp5_timeout"] = out["timeout"]
            _dump(results_dir / "exp5_timeout.json", {"cost": cost.to_json(), **payload})
            heatmaps.timeout_lines(payload, img_dir / "sim_exp5_timeout.png")
    if 6 in only:
        from . import heatmaps, regimes

        sweep = regimes.TINY if tiny else regimes.Sweep()
        if regime_batches is not None or seeds is not None:
            sweep = dataclasses.replace(
                sweep, batches=regime_batches or sweep.batches, seeds=seeds or sweep.seeds)
        result = regimes.run_sweep(cost, sweep, progress=progress)
        summary, cells = regimes.summary_table(result), regimes.cell_table(result)
        over = regimes.oversampling_table(result)
        goals = regimes.targets_summary(result)
        # one table on stdout (scripts read its "cells" column); the oversampling table, one row
        # per (filter rate, regime) like it, goes to tables.md
        say(f"\nExperiment 6: the regime map ({len(regimes.distinct_cells(result))} cells, "
            f"{sweep.seeds} seeds, {sweep.batches} batches; {result['seconds']:.0f} s)\n{summary}"
            f"\nBoth oversampling modes in every cell: {results_dir / 'tables.md'} "
            f"(exp6_oversampling)\nThe four targets, points meeting each / points with the "
            f"cells it needs: " + ", ".join(f"{k} {a}/{n}" for k, (a, n) in goals.items())
            + f" (every point: {results_dir / 'tables.md'}, exp6_targets)")
        tables.update(exp6_regimes=summary, exp6_oversampling=over, exp6_cells=cells,
                      exp6_targets=regimes.targets_table(result))
        _dump(results_dir / "regimes.json", {"cost": cost.to_json(), **regimes.compact(result)})
        heatmaps.regime_map(result, "hardware", img_dir / "sim_regimes_hardware.png")
        _filtering_map(result, img_dir)
        heatmaps.regime_map(result, "hardware", img_dir / "sim_regimes_oversampling.png",
                            baselines=regimes.OVERSAMPLING)
    merge_tables(results_dir / "tables.md", tables)
    # the pages under docs/ that show these tables (only when results_dir is docs/results)
    pages.update(pages.fed_by("tables.md", "exp1_correctness.json", "exp2_throughput.json",
                              "exp4_filtering.json", "regimes.json"), results_dir)
    return tables
