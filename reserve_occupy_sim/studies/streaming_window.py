"""The streaming regime map's window edges: RO stream in-flight and the bounded rows that drop
nothing (``FREE_ROWS``: NeMo in_order and weight_fifo streamed, window FIFO) run again over more
batches, in the same cells, seeds and code path as the map (``streaming_compute._map_run`` on
the map's ``Sweep``, only ``batches`` longer; a filtered cell over ``FILTERED_MEASURE`` as in
the map): a cell where RO is below 0.99 × one of those rows over the map's 60 batches (min over
seeds) at every length of ``LENGTHS``, every other cell at the longest, so that a cell the
60-batch window favoured is judged over the same run as one it did not (``--misses-only``: the
first alone).

Why. The map takes a row's steady throughput from the publish of batch 12 to that of batch 60
(``metrics.steady_throughput``: a fifth left out as warm-up). With no reward filtering these
rules train the same groups in every steady batch (each trains in admission order), so a ratio
between two of them is the ratio of their two spans, and a span is the difference of two
publish times: it moves with whatever lag one rule has on the other at the two edges. At
η = 3–4 that lag wanders by hundreds of seconds (the unexplained cell, η 3, training × 1, 80
concurrency, seed 2: Reserve–Occupy publishes 64 s *before* weight_fifo at batch 12, still in
the start-up transient, 233 s after it at batch 15 and 398 s at batch 60; over 48 steady batches
of about 350 s that alone is 2.7 %, the whole miss). The lag does not grow with the run (398 s
at batch 60, 360 s at 180, 558 s at 360), so a longer window divides it away: the ratio there is
0.973 / 0.998 / 0.999 over 60 / 180 / 360 batches. Counting the generated but untrained tokens
at the two edges does not remove it (0.980 on that seed): both rules have the same work in
flight there (3.26 and 3.25 M tokens at batch 60); one is late with it. At η 1–2 the window
holds fewer batches in flight and the lag moves less (the map's two misses at η 2 are 0.989).
What is left over 360 batches is not an edge: at 80 concurrency with a fast trainer, η 2–4,
Reserve–Occupy stays 0.3–0.6 % behind in_order and weight_fifo (lowest η 4, training × 1:
0.993 over 60 batches, 0.991 over 360), within the 0.99 target.

``python -m reserve_occupy_sim.studies.streaming_window [--jobs N]`` reads the stored map
(docs/results/streaming.json), runs the above, writes it into the map as ``regimes.window``
and rewrites the blocks that read it (``streaming-window-edges``, and the map's peers and
losses: ``streaming_render.loss_cause`` classifies a miss at 60 batches that the longest stored
run does not have as *window edge*, and ``regimes_losses`` counts the target again judged over
the longest run where a cell has one, the map's 60 batches where not). The peers that drop
work are not run again (their misses have causes of their own). Every cell's evidence stores
the map's Reserve–Occupy figures it was run beside (``map_ro``); a cell whose stored map
figures changed since (the map rerun) is ignored until this runs again. On the shared host
(two worker processes, ``--jobs 2``) the stored evidence took 626 s: 14 cells at 180 and 360
batches, 130 at 360.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from runtime import atomic_io, inputs

from .streaming_compute import (
    FRAMEWORKS,
    IN_ORDER_AS_SHIPPED,
    MAP_RO,
    TARGET_SHIPPED,
    _cell_key,
    _map_run,
)

LENGTHS = (180, 360)  # batches; the longest: 288 steady batches against the map's 48
FREE_ROWS = (IN_ORDER_AS_SHIPPED, "NeMo weight_fifo stream", "window FIFO")


def _map_min(c: dict, key: str) -> float:
    """RO stream in-flight ÷ ``key`` in the stored cell, min over seeds (nan: not run)."""
    if key == IN_ORDER_AS_SHIPPED:
        return c["ratios"][MAP_RO]["min"]
    p = c.get("peers", {}).get(key)
    return p["min"] if p is not None else float("nan")


def map_ro(c: dict) -> list:
    """The map's RO stream in-flight steady throughput per seed in cell ``c`` (the guard)."""
    return [r["steady"] if r else None for r in c.get("ro_in_flight", [])]


def _cell_runs(args: tuple) -> dict:
    """One cell's runs: RO stream in-flight and each free row at each of ``lengths``."""
    from ..model.filtering import RewardFilter
    from ..model.workload import MathReasoningShape, generate
    from .regimes import Cell, Sweep, scaled
    from ..model.cost import preset

    c, lengths, sweep_d, cost_name = args
    sweep = Sweep(**{k: tuple(v) if isinstance(v, list) else v for k, v in sweep_d.items()})
    cost = scaled(preset(cost_name), c["train_mult"], c["concurrency"])
    cell = Cell(c["slice"], c["eta"], c["train_mult"], c["concurrency"], c["truncated"],
                c["filter_rate"])
    fws = {fw.key: fw for fw in FRAMEWORKS}
    rows = (MAP_RO,) + tuple(k for k in FREE_ROWS if _map_min(c, k) == _map_min(c, k))
    runs: dict[str, dict[str, list]] = {}
    for n in lengths:
        long_sweep = dataclasses.replace(sweep, batches=n)
        got: dict[str, list] = {k: [] for k in rows}
        for seed in range(sweep.seeds):
            wl = generate(seed, MathReasoningShape(groups=sweep.groups, truncated=cell.truncated))
            filt = RewardFilter(cell.filter_rate, seed=seed) if cell.filter_rate > 0 else None
            for k in rows:
                r = _map_run(fws[k], cell.eta, cost, long_sweep, wl, filt)
                got[k].append(r.steady_throughput if r is not None else None)
        runs[str(n)] = got
    return {"cell": list(_cell_key(c)), "map_ro": map_ro(c), "runs": runs}


def run_window(reg: dict, cost_name: str = "qwen3-8b-h20", lengths=LENGTHS, jobs: int = 1,
               say=print, select=None, every: bool = True) -> dict:
    """The evidence of ``reg`` (a stored regime map with peers): each cell where RO stream
    in-flight is below ``TARGET_SHIPPED`` × a free row at the map's length (min over seeds) run
    again at every length of ``lengths``, and with ``every`` each other cell at the longest,
    so that a cell the map's window favoured is judged over the same run as one it did not; in
    the cells ``select(cell)`` accepts (default: all)."""
    start = time.perf_counter()
    todo = []
    for c in reg["cells"]:
        if not c.get("peers") or (select is not None and not select(c)):
            continue
        if any(_map_min(c, k) < TARGET_SHIPPED for k in FREE_ROWS):
            todo.append((c, sorted(lengths), reg["sweep"], cost_name))
        elif every:
            todo.append((c, [max(lengths)], reg["sweep"], cost_name))
    if jobs > 1 and len(todo) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            cells = list(pool.map(_cell_runs, todo))
    else:
        cells = [_cell_runs(t) for t in todo]
    seconds = time.perf_counter() - start
    missed = sum(1 for t in todo if len(t[1]) == len(set(lengths)))
    say(f"window edges: {missed} cells below at {reg['sweep']['batches']} batches run at "
        f"{', '.join(map(str, sorted(lengths)))}, {len(todo) - missed} others at "
        f"{max(lengths)}, in {seconds:.0f} s")
    return {"lengths": sorted(lengths), "rows": list(FREE_ROWS), "every": every,
            "batches": reg["sweep"]["batches"], "seconds": seconds, "cells": cells}


def evidence(reg: dict) -> dict[tuple, dict]:
    """The stored window evidence of each cell whose map figures it was run beside are still
    the map's (``map_ro``), by cell key: {length: {row: [ratio per seed]}}."""
    win = reg.get("window")
    if not win:
        return {}
    cells = {_cell_key(c): c for c in reg["cells"]}
    out = {}
    for e in win["cells"]:
        c = cells.get(tuple(e["cell"]))
        if c is None or e["map_ro"] != map_ro(c):
            continue
        ratios = {}
        for n, got in e["runs"].items():
            ro = got[MAP_RO]
            # a row with a stalled run on some seed (RO's or its own) is left out: its min over
            # seeds would be over fewer seeds than the map's
            ratios[int(n)] = {k: [a / b for a, b in zip(ro, v)] for k, v in got.items()
                              if k != MAP_RO and all(ro) and all(v)}
        out[tuple(e["cell"])] = ratios
    return out


def long_min(ev: dict | None, key: str) -> tuple[int, float] | None:
    """(the longest length, RO ÷ ``key`` min over seeds there) of a cell's evidence, or None."""
    if not ev:
        return None
    n = max(ev)
    vals = ev[n].get(key)
    return (n, float(min(vals))) if vals else None


def table(payload: dict) -> str:
    """The block ``streaming-window-edges``: every cell and free row where RO stream in-flight
    is below 0.99 × the row at the map's length (min over seeds) or at the longest stored run,
    RO ÷ the row, min (mean) over seeds, at each length; and the count over the longest run."""
    from .report import markdown

    reg = payload.get("regimes", {})
    win = reg.get("window")
    if not win:
        return "The window edges have not been run (`python -m reserve_occupy_sim.studies." \
               "streaming_window`)."
    ev = evidence(reg)
    lengths = [reg["sweep"]["batches"]] + [n for n in win["lengths"]]
    cells = [c for c in reg["cells"] if c.get("peers")]
    rows, free_ok, lowest = [], 0, []
    for c in sorted(cells, key=_cell_key):
        e = ev.get(_cell_key(c))
        ok = True
        for k in FREE_ROWS:
            m60 = _map_min(c, k)
            lm = long_min(e, k)
            judged = lm[1] if lm is not None else m60
            if judged == judged:  # nan: the row did not run in the cell, or every run stalled
                lowest.append((judged, c, k))
                ok = ok and judged >= TARGET_SHIPPED
            if not (m60 < TARGET_SHIPPED or (lm is not None and lm[1] < TARGET_SHIPPED)):
                continue
            cols = []
            for n in lengths:
                if n == reg["sweep"]["batches"]:
                    mn, mean = m60, (c["ratios"][MAP_RO]["mean"] if k == IN_ORDER_AS_SHIPPED
                                     else c["peers"][k]["mean"])
                    cols.append(f"{mn:.3f} ({mean:.3f})")
                elif e and n in e and e[n].get(k):
                    v = e[n][k]
                    cols.append(f"{min(v):.3f} ({sum(v) / len(v):.3f})")
                else:
                    cols.append("—")
            rows.append([f"{c['eta']}, {c['train_mult']:g}, {c['concurrency']}, "
                         f"{c['truncated'] * 100:g} %, {c['filter_rate'] * 100:g} %", k] + cols)
        free_ok += ok
    low = min(lowest, key=lambda t: t[0]) if lowest else None
    text = markdown(["cell (η, training ×, concurrency, at the cap, filtered)", "row"]
                    + [f"RO stream in-flight ÷ it, {n} batches: min (mean)" for n in lengths],
                    rows)
    where = ("every cell run again" if len(ev) == len(cells) else
             f"in the {len(ev)} cells run again, over the map's {reg['sweep']['batches']} in "
             f"the others")
    text += (f"\n\nJudged over the longest run stored ({max(win['lengths'])} batches; {where})"
             f", RO stream in-flight ≥ {TARGET_SHIPPED} × every bounded row that drops "
             f"nothing ({', '.join(win['rows'])}) in **{free_ok} of {len(cells)}** cells (min "
             f"over seeds)")
    if low is not None:
        v, c, k = low
        text += (f"; lowest {v:.3f} ({k}, η {c['eta']}, training × {c['train_mult']:g}, "
                 f"{c['concurrency']} concurrency, {c['truncated'] * 100:g} % at the cap, "
                 f"{c['filter_rate'] * 100:g} % filtered)")
    return text + "."


def main(argv: list[str] | None = None) -> int:
    from . import pages

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results-dir", default=str(pages.RESULTS),
                        help="where streaming.json is read and written (default docs/results)")
    parser.add_argument("--jobs", type=int, default=1, help="cells run at once (1)")
    parser.add_argument("--misses-only", action="store_true",
                        help="run only the cells below 0.99 at the map's length (not every "
                             "other cell at the longest)")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)),
                        help="the run lengths, batches, comma-separated (%(default)s)")
    args = parser.parse_args(argv)
    try:
        lengths = inputs.int_list("--lengths", args.lengths, lo=2)
        inputs.int_in("--jobs", args.jobs, 1, 64)
        path = Path(args.results_dir) / "streaming.json"
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            reg = payload["regimes"]
            reg["cells"], reg["sweep"]  # noqa: B018 (the map's keys, read below)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise inputs.InputError(f"{path}: no stored streaming regime map ({exc})") from exc
    except inputs.InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reg["window"] = run_window(reg, payload["setting"]["cost"], lengths, jobs=args.jobs,
                               every=not args.misses_only)
    atomic_io.write_text(path, json.dumps(payload, indent=1) + "\n")
    print(table(payload))
    for page in pages.update(pages.fed_by("streaming.json"), Path(args.results_dir)):
        print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
