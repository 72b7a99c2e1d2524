"""Experiments 4 and 5: reward filtering across every policy, and Reserve–Occupy's timeout
(spec §6.2).

4. Filtering: at the shipped setting, every policy at eta 1..3 with a share of groups that carry no
   gradient (``filtering.RewardFilter``: rate 0.2 and 0.4 tilted toward long groups, and rate 0.2
   untilted and tilted toward short groups), over several seeds and 100 batches' worth of groups
   with a gradient. NeMo-RL runs as its code does (no-gradient groups trained) and, as a what-if,
   with the filter routed through its dropped-prompt path (``on_no_gradient="drop"``);
   weight_fifo can wedge that way, which is reported, not hidden. Every rule is measured over
   the same prompts (``FILTERED_MEASURE``, ``RunSpec.gradient_batches``): it runs until it has
   trained ``batches`` batches' worth of groups with a gradient, the warm-up being the batches
   that trained the first fifth of them. A rule that filters its no-gradient groups makes its
   plain ``batches``-batch run; one that trains them (NeMo-RL as shipped, TRL) takes more
   batches, and so covers the same stretch of the workload instead of a shorter one (over a
   plain count of batches it was measured over fewer prompts:
   tests/sim/test_filtering_same_prompts.py).
5. Timeout: Reserve–Occupy with ``stuck_timeout_s`` on the shipped workload and on a
   straggler-heavy one (10 % of responses run to the cap), against the same runs without it:
   throughput and time per batch on one side, the L2 waste and the shift toward short answers on
   the other.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..model.core import SimulationStalled
from ..model.cost import CostModel
from ..model.filtering import RewardFilter
from .report import markdown
from ..model.runner import FILTERED_MEASURE, RunSpec, simulate
from ..model.workload import MathReasoningShape, generate

# (label, policy, options) of experiment 4, Reserve–Occupy first
FILTER_POLICIES: tuple[tuple[str, str, tuple], ...] = (
    ("Reserve–Occupy", "reserve_occupy", ()),
    ("NeMo in_order", "nemo_in_order", ()),
    ("NeMo in_order, drop path (what-if)", "nemo_in_order", (("on_no_gradient", "drop"),)),
    ("NeMo weight_fifo", "nemo_weight_fifo", ()),
    ("NeMo weight_fifo, drop path (what-if)", "nemo_weight_fifo",
     (("on_no_gradient", "drop"),)),
    ("verl drop", "verl_drop", ()),
    ("TRL", "trl", ()),
    ("ROLL", "roll", ()),
    ("AReaL", "areal", ()),
    ("unbounded (no bound)", "unbounded", ()),
)
FILTER_SETTINGS: tuple[tuple[float, float], ...] = ((0.2, 1.0), (0.4, 1.0), (0.2, 0.0),
                                                    (0.2, -1.0))
# what experiment 4's results file states of its measure (``definitions``)
FILTERING_MEASURE_DEFINITION = (
    f"{FILTERED_MEASURE}: every run trains the batches' worth of groups with a gradient "
    "(``batches`` x batch size of them; the warm-up left out of steady: the batches that trained "
    "the first fifth); a rule that trains its no-gradient groups (NeMo-RL as shipped, TRL) takes "
    "more batches to do so ('batches' of each run), so every rule covers the same prompts")
TIMEOUTS: tuple[float | None, ...] = (None, 900.0, 600.0, 300.0, 120.0)
WORKLOADS = {"shipped (3 % at the cap)": 0.03, "straggler-heavy (10 % at the cap)": 0.10}


def _bar(total: int, progress: bool, desc: str):
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="run", leave=False, dynamic_ncols=True, desc=desc)


def filtering(cost: CostModel, etas=(1, 2, 3), settings=FILTER_SETTINGS, seeds: int = 3,
              batches: int = 100, groups: int = 1024, batch_size: int = 16,
              policies=FILTER_POLICIES, progress: bool = True) -> tuple[dict, str]:
    bar = _bar(len(etas) * len(settings) * seeds * len(policies), progress, "filtering")
    rows, cells = [], []
    try:
        for rate, skew in settings:
            for eta in etas:
                per: dict[str, list] = {label: [] for label, _, _ in policies}
                for seed in range(seeds):
                    workload = generate(seed, MathReasoningShape(groups=groups))
                    filt = RewardFilter(rate, skew, seed)
                    for label, name, options in policies:
                        spec = RunSpec(name, eta, batches, batch_size, options=options,
                                       filtering=filt, gradient_batches=rate > 0)
                        try:
                            r, _ = simulate(spec, workload, cost)
                            total = (r.tokens_trained + r.waste_l2_tokens + r.waste_l3_tokens
                                     + r.waste_filtered_tokens)
                            per[label].append({
                                "throughput": r.throughput, "steady": r.steady_throughput,
                                "filtered": r.waste_filtered_tokens / total,
                                "no_gradient": r.no_gradient_tokens / total,
                                "l2": r.waste_l2_tokens / total, "l3": r.waste_l3_tokens / total,
                                "trainer_idle": r.trainer_idle, "max_staleness": r.max_staleness,
                                "batches": r.batches, "settings": r.settings})
                        except SimulationStalled as exc:
                            per[label].append({"stalled": str(exc).split(";")[0]})
                        if bar is not None:
                            bar.update(1)
                ro = per[policies[0][0]]
                for label, _, _ in policies:
                    runs = per[label]
                    ok = [(a, b) for a, b in zip(ro, runs) if "steady" in b]
                    stalled = len(runs) - len(ok)
                    ratio = [a["steady"] / b["steady"] for a, b in ok]
                    cell = {"rate": rate, "skew": skew, "eta": eta, "policy": label,
                            "stalled": stalled, "runs": runs,
                            "ratio": ratio, **({"measure": FILTERED_MEASURE} if rate > 0 else {})}
                    cells.append(cell)
                    if not ok:
                        rows.append([rate, skew, eta, label, "-", "-", "-", "-", "-", "-",
                                     f"stalled ({stalled}/{len(runs)})"])
                        continue
                    def mean(k: str, ok: list = ok) -> float:
                        return float(np.mean([b[k] for _, b in ok]))

                    rows.append([rate, skew, eta, label, round(mean("steady")),
                                 f"{mean('batches'):.0f}",
                                 "" if label == policies[0][0] else
                                 f"{np.mean(ratio):.2f} [{min(ratio):.2f}, {max(ratio):.2f}]",
                                 f"{mean('filtered'):.1%}", f"{mean('no_gradient'):.1%}",
                                 f"{mean('l2') + mean('l3'):.1%}",
                                 f"stalled ({stalled}/{len(runs)})" if stalled else ""])
    finally:
        if bar is not None:
            bar.close()
    table = markdown(["filter rate", "skew", "η", "policy", "steady tok/s", "batches run",
                      f"RO ÷ it (mean [min, max], {seeds} seeds)", "filtered",
                      "trained w/o gradient", "L2+L3", "note"], rows)
    return {"seeds": seeds, "batches": batches,
            "definitions": {"measure": FILTERING_MEASURE_DEFINITION}, "cells": cells}, table


def timeout(cost: CostModel, etas=(1, 2, 3), timeouts=TIMEOUTS, workloads=WORKLOADS,
            seeds: int = 3, batches: int = 100, groups: int = 1024, batch_size: int = 16,
            progress: bool = True) -> tuple[dict, str]:
    bar = _bar(len(etas) * len(timeouts) * seeds * len(workloads), progress, "timeout")
    rows, cells = [], []
    try:
        for wname, truncated in workloads.items():
            for eta in etas:
                base: list = []
                for t in timeouts:
                    runs = []
                    for seed in range(seeds):
                        workload = generate(seed, MathReasoningShape(groups=groups,
                                                                     truncated=truncated))
                        options = () if t is None else (("stuck_timeout_s", t),)
                        r, _ = simulate(RunSpec("reserve_occupy", eta, batches, batch_size,
                                                options=options), workload, cost)
                        total = r.tokens_trained + r.waste_l2_tokens
                        runs.append({"throughput": r.throughput, "steady": r.steady_throughput,
                                     "seconds_per_batch": r.seconds_per_batch,
                                     "l2": r.waste_l2_tokens / total,
                                     "released": r.settings.get("released_groups", 0),
                                     "trained_len": r.trained_response_mean,
                                     "aborted_len": r.aborted_response_mean,
                                     "max_staleness": r.max_staleness})
                        if bar is not None:
                            bar.update(1)
                    if t is None:
                        base = runs
                    mean = lambda k, rs=runs: float(np.mean([x[k] for x in rs]))
                    rel = [a["steady"] / b["steady"] for a, b in zip(runs, base)]
                    spb = [a["seconds_per_batch"] / b["seconds_per_batch"]
                           for a, b in zip(runs, base)]
                    lens = [a["trained_len"] / b["trained_len"] for a, b in zip(runs, base)]
                    aborted = [x["aborted_len"] for x in runs if x["released"]]
                    cells.append({"workload": wname, "eta": eta, "timeout_s": t, "runs": runs})
                    rows.append([wname, eta, "off" if t is None else f"{t:.0f}",
                                 round(mean("steady")), f"{np.mean(rel):.2f}",
                                 f"{np.mean(spb):.2f}", f"{mean('l2'):.1%}",
                                 f"{mean('released') / batches:.2f}",
                                 f"{np.mean(lens):.2f}",
                                 f"{np.mean(aborted):.0f}" if aborted else "-",
                                 max(x["max_staleness"] for x in runs)])
    finally:
        if bar is not None:
            bar.close()
    table = markdown(["workload", "η", "timeout s", "steady tok/s", "÷ no timeout",
                      "s/batch ÷ no timeout", "L2 waste", "groups aborted per batch",
                      "trained response length ÷ no timeout", "aborted groups' response mean",
                      "max staleness"], rows)
    return {"seeds": seeds, "batches": batches, "cells": cells}, table


def run(cost: CostModel, which=(4, 5), progress: bool = True,
        say: Callable[[str], None] = print) -> dict:
    out: dict = {}
    if 4 in which:
        out["filtering"] = filtering(cost, progress=progress)
        say(f"\nExperiment 4: reward filtering (100 batches' worth of groups with a gradient, "
            f"3 seeds)\n{out['filtering'][1]}")
    if 5 in which:
        out["timeout"] = timeout(cost, progress=progress)
        say(f"\nExperiment 5: the timeout (100 batches, 3 seeds)\n{out['timeout'][1]}")
    return out
