"""The streaming study's runs: every framework's row simulated as it ships, the bounds, the
chunk-size sweep, the targets and the regime map (``run``, ``run_regimes``).

What the rows are and why: ``reserve_occupy_sim.studies.streaming`` (the command, which imports
both halves); the tables, the page and the figure drawn from these results: ``streaming_render``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from dataclasses import dataclass

import numpy as np

from .bound import clairvoyant_bound
from ..model.core import SimulationStalled
from ..model.cost import CostModel, preset
from ..model.runner import FILTERED_MEASURE, RunSpec, simulate
from ..model.workload import MathReasoningShape, generate
from runtime._moved import renamed


CHUNK_GROUPS = 1  # the streaming setting: NeMo-RL's smallest min_groups_for_streaming_train
CHUNK_SWEEP = (1, 2, 4, 8, 16)
PSRL_SHARE = 0.2  # recompute scope: the old-log-prob forward, 2N of the preset's 10N FLOP/token
IN_ORDER_AS_SHIPPED = "NeMo in_order stream"  # the row every ratio is to
TARGET_FULL = 1.08  # RO streaming >= 1.08x NeMo in_order full-batch at eta = 1
TARGET_SHIPPED = 0.99  # ... >= 0.99x NeMo in_order as shipped, every regime-map cell
TARGET_CEILING = 0.97  # ... >= 0.97x the unbounded ceiling on the same trainer at eta = 2


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
    Framework(IN_ORDER_AS_SHIPPED, "nemo_in_order", "stream", "in-flight",
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

# Issue 38's peers, as they ship in late 2026 (``reserve_occupy_peers.PEERS_2026``), and the two
# dropping rules the earlier rows lacked (verl V1's ``drop``, TRL's async trainer). Each runs on
# the trainer its framework has (streaming where the rule streams, ``Policy.streams``) and on the
# in-flight engine: the fastest engine setting, what vLLM allows any framework, and the engine of
# "RO stream in-flight", so that a ratio between them is the staleness rule's alone. After the
# earlier rows, so that every earlier table keeps its order.
PEER_FRAMEWORKS: tuple[Framework, ...] = (
    Framework("NeMo windowed stream", "nemo_windowed", "stream", "in-flight",
              what="NeMo-RL windowed sampler: ungated dispatch, groups outside the window "
                   "evicted or cancelled"),
    Framework("NeMo ready_first stream", "nemo_ready_first", "stream", "in-flight",
              what="NeMo-RL ready_first (AReaL's admission): counts bounded, not each age"),
    Framework("verl V1 drop", "verl_drop", "full", "in-flight",
              what="verl V1 max_off_policy_strategy drop (its default)"),
    Framework("verl V1 wait", "verl_wait", "full", "in-flight",
              what="verl V1 max_off_policy_strategy wait: dropless, head-of-line blocking"),
    Framework("prime-rl", "prime_rl", "full", "in-flight",
              what="max_off_policy_steps: stale episodes voided in flight and in the queue"),
    Framework("TRL async", "trl", "full", "in-flight",
              what="AsyncGRPOTrainer: samples older than max_staleness dropped at dequeue"),
    Framework("tinker", "tinker", "full", "in-flight",
              what="AsyncConfig: a group older than max_steps_off_policy discarded, requeued"),
    Framework("window FIFO", "window_fifo", "full", "in-flight",
              what="torchtitan RL windowed FIFO: slots charged at admission, nothing dropped"),
)
FRAMEWORKS = FRAMEWORKS + PEER_FRAMEWORKS
# The regime map's peers: RO stream in-flight is compared with each, besides the in_order row
# the map has always had (weight_fifo streamed is the other bounded rule of the earlier rows).
MAP_PEERS: tuple[str, ...] = ("NeMo weight_fifo stream",) + tuple(
    fw.key for fw in PEER_FRAMEWORKS)
MAP_RO = "RO stream in-flight"  # the Reserve–Occupy row the peers are compared with
# The rules that discard generated work for its age (each module's docstring: "Drops"): the
# windowed sampler evicts and cancels, verl drop evicts, prime-rl voids, TRL drops samples,
# tinker discards and requeues. ready_first, verl wait, window FIFO and the earlier NeMo
# samplers drop nothing.
DROPPING = frozenset({"nemo_windowed", "verl_drop", "prime_rl", "trl", "tinker"})


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
                    if fw.key not in (IN_ORDER_AS_SHIPPED, "RO stream", "RO stream in-flight"):
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


def add_frameworks(payload: dict, cost: CostModel | None = None, say=print) -> list[str]:
    """Run, into a stored ``run`` payload, only the rows of ``FRAMEWORKS`` it lacks, on its own
    setting (seeds, etas, batches, batch size, groups), and recompute its rows and targets.

    The stored runs are kept as they are, so no earlier figure can move; a new row's runs are
    the ones ``run`` would make (the same workload, cost and spec per seed and eta). The bounds
    are not rerun: every new row's trainer and engine already has one (refused otherwise).
    Returns the keys added."""
    cost = cost or preset("qwen3-8b-h20")
    st = payload["setting"]
    if st["cost"] != cost.name:
        raise ValueError(f"the stored results are for cost {st['cost']!r}, not {cost.name!r}")
    have = {fw["key"] for fw in payload["frameworks"]}
    new = [fw for fw in FRAMEWORKS if fw.key not in have]
    modes = {(b["trainer"], b["engine"]) for b in payload["bounds"]}
    for fw in new:
        if fw.policy not in ("unbounded", "areal", "psrl_fine_grain") \
                and (fw.trainer, fw.engine) not in modes:
            raise ValueError(f"{fw.key}: the stored results have no bound for its trainer "
                             f"{fw.trainer!r} and engine {fw.engine!r}: rerun the whole table")
    start = time.perf_counter()
    for seed in st["seeds"]:
        workload = generate(seed, MathReasoningShape(groups=st["groups"]))
        for eta in st["etas"]:
            for fw in new:
                payload["runs"].append({"seed": seed, "eta": eta, "framework": fw.key,
                                        **_run(fw, eta, workload, cost, st["batches"],
                                               st["batch_size"])})
        say(f"seed {seed}: {len(new)} rows added ({time.perf_counter() - start:.0f} s)")
    payload["frameworks"] += [dataclasses.asdict(fw) for fw in new]
    payload["rows"] = rows(payload)
    payload["targets"] = targets(payload)
    return [fw.key for fw in new]


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
            ratio = [r["steady"] / by[(s, eta, IN_ORDER_AS_SHIPPED)]["steady"] for s, r in ok
                     if "steady" in by[(s, eta, IN_ORDER_AS_SHIPPED)]]
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
            _ratio(payload, eta, "RO stream", IN_ORDER_AS_SHIPPED), TARGET_SHIPPED)
        add(f"RO stream in-flight ÷ NeMo in_order as shipped, eta {eta}",
            _ratio(payload, eta, "RO stream in-flight", IN_ORDER_AS_SHIPPED), TARGET_SHIPPED)
    for ro, ceiling in (("RO stream", "unbounded stream"),
                        ("RO stream in-flight", "unbounded stream in-flight")):
        if 2 in etas:
            add(f"{ro} ÷ {ceiling}, eta 2", _ratio(payload, 2, ro, ceiling), TARGET_CEILING)
        if 1 in etas:
            add(f"{ro} ÷ {ceiling}, eta 1 (the gap)", _ratio(payload, 1, ro, ceiling), None)
    return out


# --------------------------------------------------------------------------- the regime map ----

# How a filtered cell of the map measures every row: over the same stretch of the workload
# (``RunSpec.gradient_batches``: ``sweep.batches`` batches' worth of groups that carry a gradient,
# the warm-up its first fifth). A rule that filters its no-gradient groups (Reserve–Occupy, verl
# V1 drop and wait, tinker, window FIFO: ``Policy.filters``) trains 16 groups with a gradient per
# batch, so its run is the plain 60-batch run; a rule that trains them (NeMo-RL's samplers,
# prime-rl, TRL) takes more batches, about 60 / (1 - rate), and so covers the same prompts.
# Stored in a filtered cell as ``measure``, with the batches each row's runs took
# (``batches``); a cell without it was measured over 60 batches of every rule (``run_regimes``
# reruns it). Cells without filtering are measured as before (every group has a gradient).
# ``FILTERED_MEASURE`` is ``model.runner``'s (the regimes map stores the same).


def _map_run(fw: Framework, eta: int, cost: CostModel, sweep, workload, filt):
    """One run of the regime map (``None`` where it stalled); with reward filtering over
    ``FILTERED_MEASURE``."""
    fc = framework_cost(cost, fw.trainer, fw.engine, fw.share)
    try:
        r, _ = simulate(RunSpec(fw.policy, eta, sweep.batches, sweep.batch_size,
                                options=fw.options, filtering=filt,
                                gradient_batches=filt is not None), workload, fc)
    except SimulationStalled:
        return None
    return r


def _fate(r) -> dict | None:
    """What a peer's run of the map keeps: its throughput, what it trained and what it threw
    away (trajectories dropped at L3 or aborted at L2, and their share of generated tokens)."""
    if r is None:
        return None
    total = r.tokens_trained + r.waste_l2_tokens + r.waste_l3_tokens + r.waste_filtered_tokens
    return {"steady": r.steady_throughput, "length_ratio": r.length_ratio,
            "max_staleness": r.max_staleness,
            "dropped": r.fates.get("dropped", 0) + r.fates.get("aborted", 0),
            "waste": (r.waste_l2_tokens + r.waste_l3_tokens) / total if total else 0.0}


def _peer_summary(ro: list, runs: list) -> dict:
    """RO stream in-flight ÷ a peer over the seeds (min and mean; stalled runs left out), and the
    peer's fates (means over the runs that finished)."""
    vals = [a["steady"] / b["steady"] for a, b in zip(ro, runs) if a and b]
    done = [b for b in runs if b]
    return {"mean": _mean(vals), "min": float(min(vals)) if vals else float("nan"),
            "stalled": len(runs) - len(done),
            "steady": [b["steady"] if b else None for b in runs],
            "length_ratio": _mean(b["length_ratio"] for b in done),
            "max_staleness": max((b["max_staleness"] for b in done), default=0),
            "dropped": _mean(b["dropped"] for b in done),
            "waste": _mean(b["waste"] for b in done)}


def _cell_key(c: dict) -> tuple:
    return (c["eta"], c["train_mult"], c["concurrency"], c["truncated"], c["filter_rate"])


def _map_cell(cell, old: dict | None, want: list, cost: CostModel, sweep) -> dict:
    """One distinct cell of the regime map: its ratios (unless ``old``, the stored cell, has
    them) and RO stream in-flight ÷ each peer of ``want``."""
    from ..model.filtering import RewardFilter
    from .regimes import scaled

    fws = {fw.key: fw for fw in FRAMEWORKS}
    keys = (IN_ORDER_AS_SHIPPED, "RO stream", MAP_RO)
    c = scaled(cost, cell.train_mult, cell.concurrency)
    res: dict[str, list] = {k: [] for k in keys}
    ro: list = []
    mine: dict[str, list] = {k: [] for k in want}
    taken: dict[str, list] = {}  # filtered cells: the batches each row's runs took
    again = keys if old is None else (MAP_RO,) if want and "ro_in_flight" not in old else ()
    for seed in range(sweep.seeds):
        wl = generate(seed, MathReasoningShape(groups=sweep.groups, truncated=cell.truncated))
        filt = RewardFilter(cell.filter_rate, seed=seed) if cell.filter_rate > 0 else None
        for k in again:
            r = _map_run(fws[k], cell.eta, c, sweep, wl, filt)
            res[k].append(r.steady_throughput if r is not None else None)
            taken.setdefault(k, []).append(r.batches if r is not None else None)
            if k == MAP_RO:
                ro.append(_fate(r))
        for k in want:
            r = _map_run(fws[k], cell.eta, c, sweep, wl, filt)
            taken.setdefault(k, []).append(r.batches if r is not None else None)
            mine[k].append(_fate(r))
    if old is None:
        ratios = {}
        for k in keys[1:]:
            vals = [a / b for a, b in zip(res[k], res[IN_ORDER_AS_SHIPPED]) if a and b]
            ratios[k] = {"mean": _mean(vals), "min": float(min(vals)) if vals else float("nan")}
        entry = {**dataclasses.asdict(cell), "ratios": ratios}
        if cell.filter_rate > 0:
            entry["measure"] = FILTERED_MEASURE
    else:
        entry = copy.deepcopy(old)  # the stored cell is not changed in place
    if want:
        entry.setdefault("ro_in_flight", ro)
        entry.setdefault("peers", {}).update(
            {k: _peer_summary(entry["ro_in_flight"], mine[k]) for k in want})
    if cell.filter_rate > 0:
        entry.setdefault("batches", {}).update(taken)
    return entry


def _map_cell_args(args: tuple) -> dict:
    return _map_cell(*args)


def run_regimes(cost: CostModel | None = None, sweep=None, say=print, peers=(),
                base: dict | None = None, select=None, jobs: int = 1) -> dict:
    """Reserve–Occupy streaming (re-prefill and in-flight) ÷ NeMo-RL in_order as shipped in
    every cell of the regime map (``regimes.Sweep``: its cells, seeds and batches), and with
    ``peers`` (keys of ``MAP_PEERS``) RO stream in-flight ÷ each of those rows, in the cells
    ``select(cell)`` accepts (default: every one).

    ``base``, a stored result of this function on the same sweep, is kept as it is: its cells are
    not rerun, only the peers a cell lacks are (with RO stream in-flight again, since the stored
    cells keep only ratios), so no stored figure can move. The exception is a filtered cell
    measured over 60 batches of every rule, before ``FILTERED_MEASURE`` (no ``measure``): it is
    rerun whole, in the cells ``select`` accepts, with the peers it had and those asked for. The
    result is what a run without ``base`` gives for the same peers and cells
    (tests/sim/test_streaming_peers_map.py, tests/sim/test_streaming_same_stretch.py).
    ``jobs`` > 1 runs that many cells at once in worker processes (the same result)."""
    from .regimes import Sweep

    cost = cost or preset("qwen3-8b-h20")
    sweep = sweep or Sweep()
    unknown = [k for k in peers if k not in MAP_PEERS]
    if unknown:
        raise ValueError(f"not a peer of the regime map: {', '.join(unknown)} "
                         f"(choose from {', '.join(MAP_PEERS)})")
    stored: dict[tuple, dict] = {}
    if base is not None:
        if json.loads(json.dumps(base["sweep"])) != json.loads(json.dumps(
                dataclasses.asdict(sweep))):  # stored: lists; a Sweep: tuples
            raise ValueError("the stored regime map ran another sweep "
                             f"({base['sweep']}): rerun it whole")
        stored = {_cell_key(c): c for c in base["cells"]}
    start = time.perf_counter()
    todo, seen = [], set()
    for cell in sweep.cells():
        if cell.key() in seen:
            continue
        seen.add(cell.key())
        old = stored.get(cell.key())
        chosen = select is None or select(cell)
        if old is not None and chosen and cell.filter_rate > 0 \
                and old.get("measure") != FILTERED_MEASURE:  # measured the old way: rerun it
            had = old.get("peers", {})
            todo.append((cell, None, [k for k in MAP_PEERS if k in had or k in peers],
                         cost, sweep))
            continue
        want = [k for k in peers if chosen and k not in (old or {}).get("peers", {})]
        todo.append((cell, old, want, cost, sweep))
    run = [t for t in todo if t[1] is None or t[2]]
    if jobs > 1 and len(run) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = dict(zip((id(t) for t in run), pool.map(_map_cell_args, run)))
    else:
        done = {id(t): _map_cell(*t) for t in run}
    cells = [done.get(id(t), t[1]) for t in todo]
    added = sum(1 for t in run if t[2])
    redone = sum(1 for t in run if t[1] is None and t[0].key() in stored)
    say(f"regime map: {len(cells)} cells, peers run in {added}, "
        f"{redone} filtered cells measured again over {FILTERED_MEASURE}, "
        f"in {time.perf_counter() - start:.0f} s")
    out = {"sweep": dataclasses.asdict(sweep), "cells": cells}
    if base is not None and base.get("window"):
        # the window edges' runs (``streaming_window``) are kept; a cell whose stored figures
        # changed here is no longer read from them (each cell's evidence carries the figures
        # it was run beside: ``streaming_window.evidence``)
        out["window"] = copy.deepcopy(base["window"])
    return out


# ``REFERENCE``, the old name of ``IN_ORDER_AS_SHIPPED`` here (the word also named other
# things), kept for one release; it warns (``DeprecationWarning``)
__getattr__ = renamed(__name__, {"REFERENCE": "IN_ORDER_AS_SHIPPED"}, globals())
