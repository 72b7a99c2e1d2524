"""The regime map's Markdown tables (docs/sim/regimes.md, the ``exp6_*`` blocks of ``pages``),
drawn from the results of ``regimes_compute.run_sweep``; nothing here runs the simulator.
"""

from __future__ import annotations

import numpy as np

from .regimes_compute import (
    BASELINES,
    IN_ORDER_DROP,
    OVERSAMPLING,
    OVERSAMPLING_LABELS,
    PEERS,
    REGIMES,
    TARGET_IN_ORDER,
    TARGET_UNBOUNDED,
    TIE,
    _ok,
    _unique,
    targets,
    targets_summary,
)


def _range(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{np.mean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def _by_rate_and_regime(cells: list[dict]):
    """The cells grouped for the summary tables: (no-gradient rate, regime, cells), rates
    ascending, regimes in REGIMES order, empty groups left out."""
    for rate in sorted({c["filter_rate"] for c in cells}):
        for regime in REGIMES:
            mine = [c for c in cells if c["filter_rate"] == rate and c["regime"] == regime]
            if mine:
                yield rate, regime, mine


def summary_table(result: dict) -> str:
    """One row per (filter rate, regime): how many cells, and Reserve–Occupy's ratio to each
    baseline over them (mean of the cell means [lowest, highest cell mean])."""
    from .report import markdown

    labels = list(BASELINES) + [IN_ORDER_DROP]
    rows = []
    for rate, regime, mine in _by_rate_and_regime(_unique(result)):
        row = [f"{rate:g}", regime, len(mine)]
        for label in labels:
            vals = [c["ratios"][label]["mean"] for c in mine
                    if "mean" in c["ratios"].get(label, {})]
            row.append(_range(vals) if label != IN_ORDER_DROP or rate > 0 else "")
        rows.append(row)
    return markdown(["no-gradient rate", "regime (of RO's runs)", "cells", "RO ÷ in_order",
                     "RO ÷ weight_fifo", "RO ÷ verl drop", "RO ÷ in_order, drop path"], rows)


def peers_table(result: dict) -> str:
    """The ``exp6_peers`` block: one row per (filter rate, regime) as ``summary_table``, with
    Reserve–Occupy's ratio to each of issue 38's peers (``PEERS``) over the cells where it ran,
    then per peer the cells where Reserve–Occupy is below it (a tie within TIE is not below),
    its length ratio (mean trained ÷ mean admitted length; below 1: shorter answers trained)
    and its largest trained staleness."""
    from reserve_occupy_peers import POLICIES

    from .report import markdown

    cells = [c for c in _unique(result) if any(p in c["ratios"] for p in PEERS)]
    if not cells:
        return "No peer of issue 38 has run in the map yet (`python -m runtime simulate " \
               "regimes --add-peers`)."
    rows = []
    for rate, regime, mine in _by_rate_and_regime(cells):
        row = [f"{rate:g}", regime, len(mine)]
        for p in PEERS:
            row.append(_range([c["ratios"][p]["mean"] for c in mine
                               if "mean" in c["ratios"].get(p, {})]))
        rows.append(row)
    table = markdown(["no-gradient rate", "regime (of RO's runs)", "cells"]
                     + [f"RO ÷ {p}" for p in PEERS], rows)
    per = []
    for p in PEERS:
        have = [c for c in cells if "mean" in c["ratios"].get(p, {})]  # a seed finished
        if not have:
            continue
        below = [c for c in have if not _ok(c["ratios"][p]["mean"], 1.0)]
        runs = [r for c in have for r in c["runs"][p] if "steady" in r]
        stalled = sum(c["ratios"][p].get("stalled", 0) for c in cells if p in c["ratios"])
        # its length ratio ÷ Reserve–Occupy's in the same cell: reward filtering skewed to long
        # groups lowers both, and only what the rule adds to that is its own bias
        rel = [np.mean([r["length_ratio"] for r in c["runs"][p] if "steady" in r])
               / np.mean([r["length_ratio"] for r in c["runs"]["reserve_occupy"]
                          if "steady" in r])
               for c in have if any("steady" in r for r in c["runs"][p])]
        per.append([p, "yes" if POLICIES[p].bounded else "no", len(have),
                    f"{min(c['ratios'][p]['mean'] for c in have):.3f}", len(below), stalled,
                    f"{np.mean(rel):.3f} [{min(rel):.3f}]" if rel else "-",
                    max((r["max_staleness"] for r in runs), default="-")])
    return table + "\n\n" + markdown(
        ["peer", "bounded", "cells run (a seed finished)", "lowest RO ÷ it (cell mean)",
         "cells RO below it",
         "stalled runs", "its length ratio ÷ RO's: mean [min]", "its max staleness"], per)


def _over(c: dict, label: str) -> str:
    """One cell's oversampling entry: tok/s ÷ RO / batches/s ÷ RO / length ratio."""
    o = c.get("oversampling", {}).get(label, {})
    if "mean" not in o.get("gain", {}):
        return "stalled" if c["ratios"].get(label, {}).get("stalled") else ""
    text = (f"{o['gain']['mean']:.2f} / {o['pace']['mean']:.2f} / "
            f"{o['length_vs_plain']['mean']:.2f}")
    return text + (" short" if o["short_answers"] else "")


def oversampling_table(result: dict) -> str:
    """One row per (filter rate, regime): what each oversampling mode does to Reserve–Occupy
    (mean of the cell means [lowest, highest]), its L2 waste and length ratio, and in how many
    cells it is ahead in tok/s or batches/s only by training shorter answers."""
    from .report import markdown

    cells = [c for c in _unique(result) if "oversampling" in c]
    rows = []
    for rate, regime, mine in _by_rate_and_regime(cells):
        row = [f"{rate:g}", regime, len(mine)]
        for label in OVERSAMPLING:
            os_ = [c["oversampling"][label] for c in mine
                   if "mean" in c["oversampling"][label]["gain"]]
            row += [_range([o["gain"]["mean"] for o in os_]),
                    _range([o["pace"]["mean"] for o in os_]),
                    f"{np.mean([o['l2']['mean'] for o in os_]):.0%}" if os_ else "-",
                    _range([o["length_vs_plain"]["mean"] for o in os_]),
                    sum(o["short_answers"] for o in os_)]
        rows.append(row)
    headers = ["no-gradient rate", "regime (of RO's runs)", "cells"]
    for label in OVERSAMPLING:
        name = OVERSAMPLING_LABELS[label]
        headers += [f"{name}: tok/s ÷ RO", "batches/s ÷ RO", "L2 waste", "length ratio ÷ RO's",
                    "cells short answers"]
    return markdown(headers, rows)


def cell_table(result: dict) -> str:
    """Every distinct cell: its parameters, regime, the fractions it was classified from, and
    the ratios (mean over seeds)."""
    from .report import markdown

    rows = []
    for c in sorted(_unique(result), key=lambda c: (c["filter_rate"], c["truncated"], c["eta"],
                                                     c["train_mult"], c["concurrency"])):
        def ratio(label: str, c: dict = c) -> str:
            r = c["ratios"].get(label, {})
            if "mean" not in r:
                return "stalled" if r.get("stalled") else ""
            return f"{r['mean']:.2f}"
        gate = c["ro_admission"]
        rows.append([c["eta"], f"{c['train_mult']:g}", c["concurrency"], f"{c['truncated']:g}",
                     f"{c['filter_rate']:g}", c["regime"], f"{c['ro_trainer_idle']:.2f}",
                     f"{gate['policy_held']:.2f}", f"{gate['engine_full']:.2f}",
                     round(c["ro_steady"]["mean"]), ratio("nemo_in_order"),
                     ratio("nemo_weight_fifo"), ratio("verl_drop"), ratio(IN_ORDER_DROP),
                     ratio("unbounded"), ratio("areal/eta1"),
                     _over(c, OVERSAMPLING[0]), _over(c, OVERSAMPLING[1])])
    over = "tok/s ÷ RO / batches/s ÷ RO / length ratio ÷ RO's"
    return markdown(["η", "train ×", "conc.", "at cap", "no-grad", "regime", "trainer idle",
                     "slot-held", "engines full", "RO tok/s", "÷ in_order", "÷ weight_fifo",
                     "÷ verl", "÷ in_order drop", "÷ unbounded", "÷ AReaL η = 1",
                     f"{OVERSAMPLING_LABELS[OVERSAMPLING[0]]}: {over}",
                     f"{OVERSAMPLING_LABELS[OVERSAMPLING[1]]}: {over}"], rows)


def keep_rows(new: str, old: str | None, redone) -> str:
    """``cell_table`` text ``new`` with the row of every cell not in ``redone`` (cell keys) as it
    stands in ``old`` (the table drawn before): a stored map's cells rerun in place
    (``remeasure_filtered``) move their rows only. The others were drawn from the unrounded
    runs, and the stored JSON keeps 5 significant digits, so drawing them again from it could
    move a last digit that no figure moved."""
    def key(line: str) -> tuple:
        return tuple(x.strip() for x in line.strip().strip("|").split("|")[:5])
    rerun = {(str(e), f"{m:g}", str(c), f"{t:g}", f"{f:g}") for e, m, c, t, f in redone}
    before = {key(line): line for line in (old or "").splitlines()[2:]}
    lines = new.splitlines()
    return "\n".join(lines[:2] + [line if key(line) in rerun else before.get(key(line), line)
                                  for line in lines[2:]]) + ("\n" if new.endswith("\n") else "")


def _met(value: float | None, target: float, strict: bool = False) -> str:
    """The value to three decimals, ✗ when it misses the target."""
    if value is None:
        return "–"
    return f"{value:.3f}{'' if _ok(value, target, strict) else ' ✗'}"


def targets_table(result: dict) -> str:
    """One row per point: the four targets (✗: missed)."""
    from .report import markdown

    rows = []
    for t in targets(result):
        at = t["lowest_at"]
        rows.append([f"{t['train_mult']:g}", t["concurrency"], f"{t['truncated']:g}",
                     f"{t['filter_rate']:g}",
                     _met(t["vs_in_order_eta1"], TARGET_IN_ORDER),
                     _met(t["vs_unbounded_eta2"], TARGET_UNBOUNDED),
                     t["areal_eta1_staleness"] if t["areal_eta1_staleness"] is not None
                     else "–",
                     _met(t["vs_areal_at_its_staleness"], 1.0, strict=True),
                     (_met(t["lowest_vs_bounded"], 1.0) + f" (η = {at[0]}, {at[1]})")
                     if t["lowest_vs_bounded"] is not None else "–"])
    return markdown(["train ×", "conc.", "at cap", "no-grad",
                     f"RO ÷ in_order, η = 1 (≥ {TARGET_IN_ORDER:g})",
                     f"RO ÷ unbounded, η = 2 (≥ {TARGET_UNBOUNDED:g})",
                     "AReaL η = 1: max staleness s", "RO at η = s ÷ AReaL η = 1 (> 1)",
                     "lowest RO ÷ bounded baseline (≥ 1)"], rows) + (
        f"\n\nA ratio within {TIE:g} of 1 is a tie: it meets \"never below\", not \"faster\".")


_TARGETS = (("in_order_eta1", "≥ 1.10× in_order at η = 1"),
            ("unbounded_eta2", "≥ 0.95× unbounded at η = 2"),
            ("areal", "faster than AReaL at AReaL's achieved maximum staleness s "
                      "(RO at η = s ÷ AReaL at η = 1)"),
            ("never_below", "never below a bounded baseline (in_order, weight_fifo, verl drop, "
                            "at any η)"))


def targets_count_table(payload: dict) -> str:
    """How many points of the regime map meet each of the four targets (``targets_summary``): the
    ``exp6_targets`` block of docs/ (``pages``)."""
    from .report import markdown

    got = targets_summary(payload)
    return markdown(["target", "points met", "points"],
                    [[what, got[key][0], got[key][1]] for key, what in _TARGETS])
