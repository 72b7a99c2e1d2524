"""The streaming study's runs: every framework's row simulated as it ships, the bounds, the
chunk-size sweep, the targets and the regime map (``run``, ``run_regimes``).

What the rows are and why: ``reserve_occupy_sim.studies.streaming`` (the command, which imports
both halves); the tables, the page and the figure drawn from these results: ``streaming_render``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from .bound import clairvoyant_bound
from ..model.core import SimulationStalled
from ..model.cost import CostModel, preset
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, generate


CHUNK_GROUPS = 1  # the streaming setting: NeMo-RL's smallest min_groups_for_streaming_train
CHUNK_SWEEP = (1, 2, 4, 8, 16)
PSRL_SHARE = 0.2  # recompute scope: the old-log-prob forward, 2N of the preset's 10N FLOP/token
IN_ORDER_AS_SHIPPED = "NeMo in_order stream"  # the row every ratio is to
REFERENCE = IN_ORDER_AS_SHIPPED  # its old name (not the policy runtime.peers called REFERENCE)
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

def run_regimes(cost: CostModel | None = None, sweep=None, say=print) -> dict:
    """Reserve–Occupy streaming (re-prefill and in-flight) ÷ NeMo-RL in_order as shipped in
    every cell of the regime map (``regimes.Sweep``: its cells, seeds and batches)."""
    from ..model.filtering import RewardFilter
    from .regimes import Sweep, scaled

    cost = cost or preset("qwen3-8b-h20")
    sweep = sweep or Sweep()
    fws = {fw.key: fw for fw in FRAMEWORKS}
    keys = (IN_ORDER_AS_SHIPPED, "RO stream", "RO stream in-flight")
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
            vals = [a / b for a, b in zip(res[k], res[IN_ORDER_AS_SHIPPED]) if a and b]
            ratios[k] = {"mean": _mean(vals), "min": float(min(vals)) if vals else float("nan")}
        cells.append({**dataclasses.asdict(cell), "ratios": ratios})
    say(f"regime map: {len(cells)} cells in {time.perf_counter() - start:.0f} s")
    return {"sweep": dataclasses.asdict(sweep), "cells": cells}
