"""Why the regime map's filtered cells measure every rule over the same prompts: a few filtered
cells of the map, Reserve–Occupy ÷ NeMo-RL as shipped (in_order, weight_fifo) and ÷ in_order
through the drop path (the what-if), under the old measure (every rule the same ``batches``) and
the new one (``regimes_compute.FILTERED_MEASURE``: ``batches`` batches' worth of groups with a
gradient, ``RunSpec.gradient_batches``), at the map's 60 batches and at three times as many.

``python -m reserve_occupy_sim.studies.regimes_stretch`` (about 100 s of CPU) writes
``docs/results/regimes_same_prompts.json`` and the block ``exp6_same_prompts`` of
docs/sim/regimes.md (``table``). The cells' runs are made as ``regimes_compute.run_cell`` makes
them (the same workload and filter seeds, ``scaled`` cost, ``_one_run``), so the new measure at
60 batches is the stored map's figure.
"""

from __future__ import annotations

import numpy as np

from ..model.cost import CostModel, preset
from ..model.filtering import RewardFilter
from ..model.runner import RunSpec
from ..model.workload import MathReasoningShape, generate
from .regimes_compute import IN_ORDER_DROP, _one_run, classify, scaled

# (eta, training x, concurrency, share at the cap, no-gradient rate): rollout- and trainer-bound
CELLS = ((1, 1.0, 40, 0.005, 0.4), (1, 4.0, 40, 0.03, 0.4), (1, 2.0, 40, 0.03, 0.2),
         (3, 1.0, 40, 0.03, 0.4), (2, 1.0, 40, 0.10, 0.2), (4, 1.0, 40, 0.005, 0.4),
         (1, 4.0, 40, 0.03, 0.2), (3, 4.0, 40, 0.03, 0.4))
LENGTHS = (60, 180)
LABELS = (("nemo_in_order", ()), ("nemo_weight_fifo", ()),
          (IN_ORDER_DROP, (("on_no_gradient", "drop"),)))
MEASURES = {"old": False, "same prompts": True}  # RunSpec.gradient_batches
RESULTS = "regimes_same_prompts.json"


def run(cost: CostModel, cells=CELLS, lengths=LENGTHS, seeds: int = 3, groups: int = 1024,
        batch_size: int = 16) -> dict:
    """Every cell at every length under both measures: RO ÷ each of ``LABELS`` (mean and min
    over seeds), the batches each run of in_order took, and the regime of Reserve–Occupy's
    runs at the first length (as ``run_cell`` decides it)."""
    out = []
    for eta, mult, conc, truncated, rate in cells:
        c = scaled(cost, mult, conc)
        entry: dict = {"cell": [eta, mult, conc, truncated, rate], "ratios": {}, "batches": {}}
        for name, gradient in MEASURES.items():
            for n in lengths:
                ratios: dict[str, list[float]] = {label: [] for label, _ in LABELS}
                took, ro_runs = [], []
                for seed in range(seeds):
                    wl = generate(seed, MathReasoningShape(groups=groups, truncated=truncated))
                    filt = RewardFilter(rate, seed=seed)

                    def one(label: str, options: tuple = ()) -> dict:
                        return _one_run(RunSpec(label.split("/")[0], eta, n, batch_size,
                                                options=options, filtering=filt,
                                                gradient_batches=gradient), wl, c)
                    ro = one("reserve_occupy")
                    ro_runs.append(ro)
                    for label, options in LABELS:
                        r = one(label, options)
                        ratios[label].append(ro["steady"] / r["steady"])
                        if label == "nemo_in_order":
                            took.append(r.get("batches", n))
                entry["ratios"].setdefault(name, {})[str(n)] = {
                    label: {"mean": float(np.mean(v)), "min": float(min(v))}
                    for label, v in ratios.items()}
                entry["batches"].setdefault(name, {})[str(n)] = took
                if n == lengths[0] and not gradient:
                    entry["regime"] = classify(
                        float(np.mean([r["trainer_idle"] for r in ro_runs])),
                        float(np.mean([r["admission"]["policy_held"] for r in ro_runs])),
                        float(np.mean([r["admission"]["engine_full"] for r in ro_runs])))
        out.append(entry)
    return {"cost": cost.name, "seeds": seeds, "lengths": list(lengths), "cells": out}


def table(payload: dict) -> str:
    """The block ``exp6_same_prompts``: per cell, RO ÷ in_order (mean over seeds) at each length
    under each measure, ÷ weight_fifo at the first length under both, and ÷ the drop path at
    each length (one measure: it filters, so both give the same run)."""
    from .report import markdown

    short, long_ = (str(n) for n in payload["lengths"])
    rows = []
    for e in payload["cells"]:
        eta, mult, conc, truncated, rate = e["cell"]
        r = e["ratios"]

        def m(measure: str, n: str, label: str = "nemo_in_order") -> str:
            return f"{r[measure][n][label]['mean']:.4f}"
        drop = " / ".join(m("same prompts", n, IN_ORDER_DROP) for n in (short, long_))
        if any(m("old", n, IN_ORDER_DROP) != m("same prompts", n, IN_ORDER_DROP)
               for n in (short, long_)):
            drop += " (old: " + " / ".join(m("old", n, IN_ORDER_DROP)
                                          for n in (short, long_)) + ")"
        rows.append([f"{eta}, {mult:g}, {conc}, {truncated * 100:g} %, {rate * 100:g} %",
                     e["regime"][0].upper(), m("old", short), m("old", long_),
                     m("same prompts", short), m("same prompts", long_),
                     f"{m('old', short, 'nemo_weight_fifo')} → "
                     f"{m('same prompts', short, 'nemo_weight_fifo')}", drop,
                     f"{min(e['batches']['same prompts'][short])}–"
                     f"{max(e['batches']['same prompts'][short])}"])
    return markdown(["cell (η, training ×, concurrency, at the cap, no-gradient)", "regime",
                     f"÷ in_order, {short}, old", f"{long_}, old", f"{short}, same prompts",
                     f"{long_}, same prompts",
                     f"÷ weight_fifo, {short}: old → same prompts",
                     f"÷ in_order drop path, {short} / {long_}",
                     f"in_order's batches, same prompts, {short}"], rows)


def main(argv: list[str] | None = None) -> int:
    from . import pages

    return pages.study_main(argv, __doc__, RESULTS, lambda: run(preset("qwen3-8b-h20")), table)


if __name__ == "__main__":
    raise SystemExit(main())
