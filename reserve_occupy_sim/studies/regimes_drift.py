"""Why the trainer-bound filtered cells of the same-prompts evidence (``regimes_stretch``, block
``exp6_same_prompts``) read higher at 180 batches than at 60: the two trainer-bound cells of
that block and their unfiltered twins, Reserve–Occupy ÷ NeMo-RL in_order as shipped, both under
the regime map's measure (``FILTERED_MEASURE``, ``RunSpec.gradient_batches``), at 60, 180 and 360
batches, over 16 workload seeds (the map runs seeds 0–2).

What it found: no length effect. Trainer-bound, in_order's trainer trains the same tokens per
second at every length (its start-up transient is over inside the warm-up left out), and
Reserve–Occupy's steady throughput does not move either; in_order's effective throughput is
that token rate times the share of its trained tokens whose group has a gradient, and that share
is a draw: which groups of its steady window the filter made no-gradient (``filtering.py``: a
fresh draw per position, each pass over the workload). Reserve–Occupy, trainer-bound, filters
those groups and trains only groups with a gradient at the trainer's pace, so the draw enters
the ratio on in_order's side alone. Over seeds 0–2 the 60-batch window happened to give in_order
a share above the workload's expected one (``expected_share``), so the ratio read low there and
rose with the length; over 16 seeds the mean does not move from 60 to 360 batches.

``python -m reserve_occupy_sim.studies.regimes_drift`` (about 130 s of CPU) writes
``docs/results/regimes_trainer_drift.json`` and the block ``exp6_trainer_drift`` of
docs/sim/regimes.md (``table``). Runs are made as ``regimes_compute.run_cell`` makes them (the
same workload and filter seeds, ``scaled`` cost, ``RunSpec``), so seeds 0–2 at 60 and 180 batches
give the figures of ``exp6_same_prompts``.
"""

from __future__ import annotations

import numpy as np

from ..model.core import Simulator
from ..model.cost import CostModel, preset
from ..model.filtering import RewardFilter
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, Workload, generate
from .regimes_compute import classify, scaled
from .regimes_stretch import CELLS as STRETCH_CELLS

# (eta, training x, concurrency, share at the cap, no-gradient rate): the trainer-bound cells of
# regimes_stretch.CELLS; each also runs without filtering (its twin, the control)
CELLS = ((1, 4.0, 40, 0.03, 0.2), (3, 4.0, 40, 0.03, 0.4))
assert all(c in STRETCH_CELLS for c in CELLS)
LENGTHS = (60, 180, 360)
SEEDS = 16
MAP_SEEDS = 3  # the regime map's seeds: 0 .. MAP_SEEDS - 1
RULES = ("reserve_occupy", "nemo_in_order")
RESULTS = "regimes_trainer_drift.json"


def expected_share(workload: Workload, filt: RewardFilter | None) -> float:
    """The share of trained tokens whose group has a gradient that a rule training every group
    in workload order gets, in expectation over the filter's draws: ``sum((1 - p_g) T_g) /
    sum(T_g)``, ``T_g`` the group's trajectory tokens (prompt + response, each sample) and
    ``p_g`` its no-gradient probability (``RewardFilter.probabilities``); 1 without filtering."""
    tokens = np.array([sum(g.prompt_len + n for n in g.response_lens) for g in workload.groups],
                      dtype=np.float64)
    if filt is None:
        return 1.0
    p = filt.probabilities(workload)
    return float(((1.0 - p) * tokens).sum() / tokens.sum())


def window(sim: Simulator, warmup: int) -> dict:
    """The steady window of a run (batches ``warmup + 1 ..``, as ``metrics.steady_throughput``
    takes it): trained tokens per second and the share of them whose group has a gradient (their
    product is the steady throughput), the mean response length trained (``answer``), and the
    share of the time the trainer trained, in the window (``busy``) and in the warm-up before it
    (``warm_busy``)."""
    batches = sim.ledger.batches[: sim.n_batches]
    cut = warmup if 0 < warmup < len(batches) else 0
    start = batches[cut - 1].t_published if cut else 0.0
    chosen = batches[cut:]
    span = chosen[-1].t_published - start
    tokens = sum(b.tokens for b in chosen)
    lengths = {r.tid: r.length for r in sim.ledger.requests}

    def busy(part: list) -> float:
        return sum(b.t_trained - b.t_consume for b in part)
    return {"tok_s": tokens / span, "share": sum(b.useful_tokens for b in chosen) / tokens,
            "answer": float(np.mean([lengths[t] for b in chosen for t in b.tids])),
            "busy": busy(chosen) / span,
            "warm_busy": busy(batches[:cut]) / start if cut else float("nan")}


def one_run(rule: str, eta: int, batches: int, workload: Workload, filt: RewardFilter | None,
            cost: CostModel, batch_size: int = 16) -> dict:
    """One run under the map's measure, what this study keeps of it."""
    r, sim = simulate(RunSpec(rule, eta, batches, batch_size, filtering=filt,
                              gradient_batches=filt is not None), workload, cost)
    return {"steady": r.steady_throughput, "batches": r.batches, "warmup": r.warmup_batches,
            "trainer_idle": r.trainer_idle, "policy_held": r.admission.get("policy_held", 0.0),
            "engine_full": r.admission.get("engine_full", 0.0), **window(sim, r.warmup_batches)}


def run(cost: CostModel, cells=CELLS, lengths=LENGTHS, seeds: int = SEEDS, groups: int = 1024,
        batch_size: int = 16) -> dict:
    """Every cell and its unfiltered twin, at every length and seed: each rule's run
    (``one_run``) and the seed's ``expected_share``."""
    out = []
    for eta, mult, conc, truncated, rate in cells:
        for r in (rate, 0.0):
            c = scaled(cost, mult, conc)
            entry: dict = {"cell": [eta, mult, conc, truncated, r], "expected_share": [],
                           "runs": {str(n): {rule: [] for rule in RULES} for n in lengths}}
            for seed in range(seeds):
                wl = generate(seed, MathReasoningShape(groups=groups, truncated=truncated))
                filt = RewardFilter(r, seed=seed) if r > 0 else None
                entry["expected_share"].append(expected_share(wl, filt))
                for n in lengths:
                    for rule in RULES:
                        entry["runs"][str(n)][rule].append(
                            one_run(rule, eta, n, wl, filt, c, batch_size))
            out.append(entry)
    return {"cost": cost.name, "seeds": seeds, "map_seeds": MAP_SEEDS, "lengths": list(lengths),
            "cells": out}


def summary(entry: dict, n: str, first: str, seeds: slice = slice(None)) -> dict:
    """Over the chosen seeds at length ``n``: RO ÷ in_order (mean, its standard error), the
    change of each seed's ratio from length ``first`` (paired: mean and standard error),
    in_order's trained tokens/s and useful share of its window, the expected share,
    Reserve–Occupy's steady throughput, the ratio in_order's expected share would give, each
    rule's mean answer trained and trainer busy share (``window``), and the seed-to-seed spread
    (relative standard deviation) of RO's, in_order's and the ratio."""
    runs, base = entry["runs"][n], entry["runs"][first]

    def ratios(rs: dict) -> np.ndarray:
        return np.array([a["steady"] / b["steady"]
                         for a, b in zip(rs["reserve_occupy"], rs["nemo_in_order"])])[seeds]
    ratio, change = ratios(runs), ratios(runs) / ratios(base) - 1.0
    io = runs["nemo_in_order"][seeds]
    ro = runs["reserve_occupy"][seeds]
    expected = np.array(entry["expected_share"])[seeds]

    def se(x: np.ndarray) -> float:
        return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0

    def spread(x) -> float:  # relative standard deviation over the seeds
        x = np.asarray(x, dtype=np.float64)
        return float(x.std(ddof=1) / x.mean()) if len(x) > 1 else 0.0
    return {"ratio": float(ratio.mean()), "ratio_se": se(ratio),
            "change": float(change.mean()), "change_se": se(change),
            "io_tok_s": float(np.mean([r["tok_s"] for r in io])),
            "io_share": float(np.mean([r["share"] for r in io])),
            "expected_share": float(expected.mean()),
            "ro_steady": float(np.mean([r["steady"] for r in ro])),
            "at_expected": float(np.mean([a["steady"] / (b["tok_s"] * e)
                                          for a, b, e in zip(ro, io, expected)])),
            "answer": {"ro": float(np.mean([r["answer"] for r in ro])),
                       "io": float(np.mean([r["answer"] for r in io]))},
            "busy": {"ro": float(np.mean([r["busy"] for r in ro])),
                     "io": float(np.mean([r["busy"] for r in io]))},
            "warm_busy": {"ro": float(np.mean([r["warm_busy"] for r in ro])),
                          "io": float(np.mean([r["warm_busy"] for r in io]))},
            "spread": {"ro": spread([r["steady"] for r in ro]),
                       "io": spread([r["steady"] for r in io]), "ratio": spread(ratio)},
            "io_batches": [int(min(r["batches"] for r in io)), int(max(r["batches"] for r in io))]}


def regime(entry: dict, n: str) -> str:
    """The regime of Reserve–Occupy's runs at length ``n`` over the map's seeds (as
    ``run_cell`` decides it)."""
    ro = entry["runs"][n]["reserve_occupy"][:MAP_SEEDS]
    return classify(*(float(np.mean([r[k] for r in ro]))
                      for k in ("trainer_idle", "policy_held", "engine_full")))


def _pct(x: float) -> float:
    """``x`` in percent to one decimal, without a negative zero."""
    return round(x * 100, 1) + 0.0


def table(payload: dict) -> str:
    """The block ``exp6_trainer_drift``: per cell and length, RO ÷ in_order over every seed
    (± standard error) and over the map's seeds, each one's paired change from the first length,
    in_order's trained tokens/s and useful share of its steady window against the expected share,
    Reserve–Occupy's steady throughput, the ratio at in_order's expected share, the answers
    each trained and how busy its trainer was, and the seed spread of RO's, in_order's and the
    ratio."""
    from .report import markdown

    lengths = [str(n) for n in payload["lengths"]]
    k = payload["seeds"]
    m = min(payload["map_seeds"], k)
    rows = []
    for e in payload["cells"]:
        eta, mult, conc, truncated, rate = e["cell"]
        for n in lengths:
            a, b = summary(e, n, lengths[0]), summary(e, n, lengths[0], slice(0, m))
            change = ("" if n == lengths[0] else
                      f"{_pct(a['change']):+.1f} ± {a['change_se'] * 100:.1f} / "
                      f"{_pct(b['change']):+.1f}")
            rows.append([f"{eta}, {mult:g}, {conc}, {truncated * 100:g} %, {rate * 100:g} %",
                         regime(e, n)[0].upper(), n,
                         f"{a['io_batches'][0]}–{a['io_batches'][1]}",
                         f"{a['ratio']:.4f} ± {a['ratio_se']:.4f}", f"{b['ratio']:.4f}", change,
                         f"{a['io_tok_s']:.1f}",
                         f"{a['io_share']:.4f} / {b['io_share']:.4f} "
                         f"({a['expected_share']:.4f} / {b['expected_share']:.4f})",
                         f"{a['ro_steady']:.1f}", f"{a['at_expected']:.4f}",
                         f"{a['answer']['ro']:.0f} / {a['answer']['io']:.0f}",
                         f"{a['busy']['ro'] * 100:.1f} / {a['busy']['io'] * 100:.1f} "
                         f"({a['warm_busy']['ro'] * 100:.1f} / {a['warm_busy']['io'] * 100:.1f})",
                         " / ".join(f"{a['spread'][k] * 100:.1f}"
                                    for k in ("ro", "io", "ratio"))])
    return markdown(["cell (η, training ×, concurrency, at the cap, no-gradient)", "regime",
                     "batches' worth", "in_order's batches",
                     f"RO ÷ in_order, {k} seeds (± s.e.)", f"seeds 0–{m - 1}",
                     f"change from {lengths[0]}, %: {k} seeds (± s.e.) / seeds 0–{m - 1}",
                     "in_order's trained tok/s",
                     f"in_order's gradient share of its window: {k} seeds / seeds 0–{m - 1} "
                     "(expected)",
                     "RO's steady tok/s", "RO ÷ in_order at the expected share",
                     "mean answer trained: RO / in_order",
                     "trainer busy, %, RO / in_order (in the warm-up)",
                     f"seed spread (s.d., %, {k} seeds): RO / in_order / ratio"], rows)


def main(argv: list[str] | None = None) -> int:
    from . import pages

    return pages.study_main(argv, __doc__, RESULTS, lambda: run(preset("qwen3-8b-h20")), table)


if __name__ == "__main__":
    raise SystemExit(main())
