"""The regime map: where Reserve–Occupy gains over NeMo-RL in_order, weight_fifo and verl drop.

What decides the regime is swept around the shipped setting (Qwen3-8B on H20, 2 x 40 concurrency,
the synthetic math workload, no filtering), in three two-dimensional slices, each at eta 1..4:

* ``hardware``: a multiplier on the training cost (trainer speed relative to rollout) x the
  engines' concurrency per instance;
* ``workload``: tail heaviness (share of responses that run to the length cap) x the reward
  filter rate;
* ``filter``: the training-cost multiplier x the reward filter rate.

Every cell runs each policy on ``seeds`` workloads (workload and filter seed ``s``) for
``batches`` batches and compares *steady-state* effective throughput (``metrics.steady_throughput``:
the first fifth of the batches is left out as start-up transient). A cell reports Reserve–Occupy's
ratio to each baseline (mean, min, max over seeds) and the regime its Reserve–Occupy runs are in.

Each cell also runs Reserve–Occupy with both oversampling modes of the source (``OVERSAMPLING``):
batch-level with capacity B + 4 (spec §6.6) and group-level with group size + 2 candidates
(spec §6.5). For those a cell reports what turning the mode on does: tok/s and batches/s ÷
plain Reserve–Occupy, the L2 waste, and the length ratio (mean trained ÷ mean admitted
response length) relative to plain Reserve–Occupy's. A mode that is ahead of plain
Reserve–Occupy in tok/s or batches/s while that relative length ratio is below ``SHORT_BIAS``
is labelled "short answers": it gains only by training shorter answers.

Each cell also runs two references that do not depend on its eta, once per point of the map
(``REFERENCES``): the unbounded policy and AReaL at eta = 1 (which trains staleness up to 2).
``targets_table`` checks four targets at every point: Reserve–Occupy >= 1.10x in_order at
eta = 1, >= 0.95x unbounded at eta = 2, faster than AReaL at AReaL's achieved maximum staleness,
and never below a bounded baseline.

Regimes are defined from what the simulator measures over the run (``core.Simulator.gate_time``):

* ``trainer-bound``: the trainer waited for data less than ``TRAINER_IDLE_MAX`` of the wall time,
  so it, not rollout, sets the pace;
* otherwise ``slot-bound`` if admission was held by the staleness window (an engine slot free,
  nothing queued, yet Reserve–Occupy's ``reserve`` refused: no legal EMPTY slot) at least as long
  as it waited for the engines (every engine slot busy);
* otherwise ``engine-bound``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..model.core import SimulationStalled
from ..model.cost import CostModel
from ..model.filtering import RewardFilter
from ..model.metrics import SHORT_BIAS, RunResult
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, generate

TRAINER_IDLE_MAX = 0.10
REGIMES = ("slot-bound", "engine-bound", "trainer-bound")
BASELINES = ("nemo_in_order", "nemo_weight_fifo", "verl_drop")
IN_ORDER_DROP = "nemo_in_order/drop"  # the what-if: filtering routed through the drop path
CAPACITY_EXTRA = 4  # batch-level oversampling: capacity = batch size + this
CANDIDATES_EXTRA = 2  # group-level oversampling: candidates = group size + this
OVERSAMPLING = ("reserve_occupy/capacity+4", "reserve_occupy/candidates+2")
OVERSAMPLING_LABELS = {"reserve_occupy/capacity+4": "RO C=B+4",
                       "reserve_occupy/candidates+2": "RO cand=G+2"}
# References that run at a fixed eta whatever the cell's (cached once per point and seed):
# label -> that eta. The unbounded ceiling ignores eta; AReaL runs at eta = 1.
REFERENCES = {"unbounded": 1, "areal/eta1": 1}
TARGET_IN_ORDER = 1.10  # RO >= 1.10x in_order at eta = 1
TARGET_UNBOUNDED = 0.95  # ... and >= 0.95x unbounded at eta = 2
# Two ratios closer than this are a tie (identical schedules give 1 up to float summation
# order, and the JSON keeps 5 significant digits): "never below" allows a tie, "faster" does not.
TIE = 5e-4


def classify(trainer_idle: float, slot_held: float, engine_full: float) -> str:
    """The regime of a run from three fractions of its wall time (see the module docstring)."""
    for name, value in (("trainer_idle", trainer_idle), ("slot_held", slot_held),
                        ("engine_full", engine_full)):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not 0.0 <= value <= 1.0 + 1e-9):
            raise ValueError(f"classify: {name} must be a fraction in [0, 1], got {value!r}")
    if trainer_idle < TRAINER_IDLE_MAX:
        return "trainer-bound"
    return "slot-bound" if slot_held >= engine_full else "engine-bound"


def classify_run(result: RunResult) -> str:
    gate = result.admission
    return classify(result.trainer_idle, gate.get("policy_held", 0.0),
                    gate.get("engine_full", 0.0))


@dataclass(frozen=True)
class Cell:
    """One point of the map."""

    slice: str
    eta: int
    train_mult: float = 1.0
    concurrency: int = 40
    truncated: float = 0.03
    filter_rate: float = 0.0

    def key(self) -> tuple:
        return (self.eta, self.train_mult, self.concurrency, self.truncated, self.filter_rate)


@dataclass(frozen=True)
class Sweep:
    etas: tuple[int, ...] = (1, 2, 3, 4)
    train_mults: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    concurrencies: tuple[int, ...] = (8, 16, 40, 80)
    truncations: tuple[float, ...] = (0.005, 0.03, 0.10)
    filter_rates: tuple[float, ...] = (0.0, 0.2, 0.4)
    seeds: int = 3
    batches: int = 60
    groups: int = 1024
    batch_size: int = 16

    def cells(self) -> list[Cell]:
        out: list[Cell] = []
        for eta in self.etas:
            out += [Cell("hardware", eta, train_mult=m, concurrency=c)
                    for m in self.train_mults for c in self.concurrencies]
            out += [Cell("workload", eta, truncated=t, filter_rate=f)
                    for t in self.truncations for f in self.filter_rates]
            out += [Cell("filter", eta, train_mult=m, filter_rate=f)
                    for m in self.train_mults for f in self.filter_rates]
        return out


TINY = Sweep(etas=(1, 3), train_mults=(0.5, 2.0), concurrencies=(8, 40), truncations=(0.03,),
             filter_rates=(0.0, 0.3), seeds=1, batches=12, groups=128, batch_size=4)


def scaled(cost: CostModel, train_mult: float, concurrency: int) -> CostModel:
    """The cost model with training ``train_mult`` times as slow and the given concurrency (the
    weight sync is unchanged)."""
    t = cost.train
    train = dataclasses.replace(t, fixed_s=t.fixed_s * train_mult,
                                per_token_s=t.per_token_s * train_mult,
                                per_token_sq_s=t.per_token_sq_s * train_mult)
    return dataclasses.replace(cost, train=train, concurrency=concurrency,
                               name=f"{cost.name} train x{train_mult:g} conc {concurrency}")


def _summary(values: list[float]) -> dict:
    return {"mean": float(np.mean(values)), "min": float(min(values)),
            "max": float(max(values))} if values else {}


def _policies(cell: Cell, sweep: Sweep, group_size: int) -> list[tuple[str, tuple, int | None]]:
    """(label, policy options, candidates) of every run a cell makes."""
    out: list[tuple[str, tuple, int | None]] = [("reserve_occupy", (), None)]
    out += [(b, (), None) for b in BASELINES]
    if cell.filter_rate > 0:
        out.append((IN_ORDER_DROP, (("on_no_gradient", "drop"),), None))
    out.append((OVERSAMPLING[0], (("capacity", sweep.batch_size + CAPACITY_EXTRA),), None))
    out.append((OVERSAMPLING[1], (), group_size + CANDIDATES_EXTRA))
    out += [(label, (), None) for label in REFERENCES]
    return out


def _steady_batch_s(r: RunResult) -> float:
    """Mean publish-to-publish seconds after the warm-up (what batches/s compares)."""
    tail = r.batch_seconds[r.warmup_batches:] or r.batch_seconds
    return float(np.mean(tail))


def _oversampling(ro: list[dict], rs: list[dict]) -> dict:
    """What turning an oversampling mode on does, over the seeds (plain RO on the same seed).

    ``length_vs_plain`` is the mode's length ratio ÷ plain Reserve–Occupy's: with reward
    filtering toward long groups plain RO already trains shorter answers than it admits, and only
    what the mode adds to that is the mode's bias (without filtering plain RO's ratio is 1)."""
    pairs = [(a, b) for a, b in zip(ro, rs) if "steady" in b and "steady" in a]
    gain = _summary([b["steady"] / a["steady"] for a, b in pairs])
    pace = _summary([a["batch_s"] / b["batch_s"] for a, b in pairs])
    relative = _summary([b["length_ratio"] / a["length_ratio"] for a, b in pairs])
    out = {"gain": gain, "pace": pace,
           "length_ratio": _summary([b["length_ratio"] for _, b in pairs]),
           "length_vs_plain": relative,
           "l2": _summary([b["l2"] for _, b in pairs]),
           "length_ks": _summary([b["length_ks"] for _, b in pairs])}
    ahead = gain.get("mean", 0.0) > 1.0 or pace.get("mean", 0.0) > 1.0
    out["short_answers"] = bool(ahead and relative.get("mean", 1.0) < SHORT_BIAS)
    return out


def run_cell(cell: Cell, cost: CostModel, sweep: Sweep,
             cache: dict, step: Callable[[], None] | None = None) -> dict:
    """Run every policy of one cell over the seeds; ``cache`` shares runs between slices."""
    c = scaled(cost, cell.train_mult, cell.concurrency)
    runs: dict[str, list[dict]] = {}
    for seed in range(sweep.seeds):
        shape = MathReasoningShape(groups=sweep.groups, truncated=cell.truncated)
        workload = generate(seed, shape)
        filt = RewardFilter(cell.filter_rate, seed=seed) if cell.filter_rate > 0 else None
        for label, options, candidates in _policies(cell, sweep, workload.group_size):
            eta = cell.eta
            key = (cell.key(), seed, label)
            if label in REFERENCES:  # the same run at every eta of this point
                eta, key = REFERENCES[label], (cell.key()[1:], seed, label)
            if key not in cache:
                spec = RunSpec(label.split("/")[0], eta, sweep.batches, sweep.batch_size,
                               options=options, filtering=filt, candidates=candidates)
                try:
                    r, _ = simulate(spec, workload, c)
                    total = (r.tokens_trained + r.waste_l2_tokens + r.waste_l3_tokens
                             + r.waste_filtered_tokens)
                    cache[key] = {"throughput": r.throughput, "steady": r.steady_throughput,
                                  "batch_s": _steady_batch_s(r),
                                  "trainer_idle": r.trainer_idle,
                                  "rollout_idle": r.rollout_idle, "admission": r.admission,
                                  "regime": classify_run(r),
                                  "l2": r.waste_l2_tokens / total if total else 0.0,
                                  "length_ratio": r.length_ratio, "length_ks": r.length_ks,
                                  "max_staleness": r.max_staleness}
                except SimulationStalled as exc:
                    cache[key] = {"stalled": str(exc).split(";")[0]}
            runs.setdefault(label, []).append(cache[key])
            if step is not None:
                step()
    ro = runs["reserve_occupy"]
    ratios = {}
    for label, rs in runs.items():
        if label == "reserve_occupy":
            continue
        vals = [a["steady"] / b["steady"] for a, b in zip(ro, rs) if "steady" in b]
        ratios[label] = {**_summary(vals), "stalled": sum(1 for b in rs if "stalled" in b)}
    oversampling = {label: _oversampling(ro, runs[label]) for label in OVERSAMPLING}
    mean = {k: float(np.mean([r[k] for r in ro])) for k in ("trainer_idle", "rollout_idle")}
    gate = {k: float(np.mean([r["admission"][k] for r in ro]))
            for k in ("paused", "engine_full", "policy_held")}
    regimes = [r["regime"] for r in ro]
    return {**dataclasses.asdict(cell), "ratios": ratios,
            "ro_steady": _summary([r["steady"] for r in ro]),
            "ro_trainer_idle": mean["trainer_idle"], "ro_rollout_idle": mean["rollout_idle"],
            "ro_admission": gate,
            "regime": classify(mean["trainer_idle"], gate["policy_held"], gate["engine_full"]),
            "regime_per_seed": regimes, "oversampling": oversampling,
            "runs": runs}


def run_sweep(cost: CostModel, sweep: Sweep = Sweep(), progress: bool = True,
              cells: Iterable[Cell] | None = None) -> dict:
    cells = list(cells if cells is not None else sweep.cells())
    unique = {c.key() for c in cells}
    per_cell = sweep.seeds * (len(BASELINES) + 1 + len(OVERSAMPLING) + len(REFERENCES))
    total = sum(per_cell + (sweep.seeds if k[-1] > 0 else 0) for k in unique)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="run", leave=False, dynamic_ncols=True,
                   desc="regime map")
    cache: dict = {}
    seen: set = set()
    start = time.perf_counter()
    out = []
    try:
        for cell in cells:
            first = cell.key() not in seen
            seen.add(cell.key())
            out.append(run_cell(cell, cost, sweep, cache,
                                step=(lambda: bar.update(1)) if bar is not None and first
                                else None))
    finally:
        if bar is not None:
            bar.close()
    return {"sweep": dataclasses.asdict(sweep), "cost": cost.name,
            "definitions": {"trainer_idle_max": TRAINER_IDLE_MAX,
                            "ratio": "steady-state effective throughput of Reserve–Occupy / "
                                     "the baseline's, same workload seed",
                            "oversampling": f"{OVERSAMPLING[0]}: capacity = batch size + "
                                            f"{CAPACITY_EXTRA}; {OVERSAMPLING[1]}: candidates = "
                                            f"group size + {CANDIDATES_EXTRA}; gain and pace: "
                                            "tok/s and batches/s of the mode / plain "
                                            "Reserve–Occupy's, same seed; length_vs_plain: its "
                                            "length ratio / plain Reserve–Occupy's; "
                                            "short_answers: ahead in either with length_vs_plain "
                                            f"< {SHORT_BIAS}",
                            "warmup": "first fifth of the batches left out"},
            "seconds": time.perf_counter() - start, "cells": out}


def compact(obj, digits: int = 5):
    """The result with floats rounded to ``digits`` significant digits (smaller JSON)."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: compact(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [compact(v, digits) for v in obj]
    return obj


# --------------------------------------------------------------------------- tables --------

def distinct_cells(result: dict) -> list[dict]:
    """The cells a sweep ran, each once (slices share cells; tables and counts use these)."""
    return _unique(result)


def _point(c: dict) -> tuple:
    """A cell's point of the map: every axis but eta (``Cell.key`` without its first field)."""
    return (c["train_mult"], c["concurrency"], c["truncated"], c["filter_rate"])


def _unique(result: dict) -> list[dict]:
    seen, out = set(), []
    for c in result["cells"]:
        key = (c["eta"], *_point(c))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


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


def targets(result: dict) -> list[dict]:
    """The four targets at every point of the map (a point: every axis but eta), from the
    cells' seed means. ``None`` where the point lacks the cell a target needs."""
    by_point: dict[tuple, dict[int, dict]] = {}
    for c in _unique(result):
        by_point.setdefault(_point(c), {})[c["eta"]] = c
    out = []
    for point, cells in sorted(by_point.items()):
        def ratio(eta: int, label: str) -> float | None:
            r = cells.get(eta, {}).get("ratios", {}).get(label, {})
            return r.get("mean")
        areal = next((c["runs"].get("areal/eta1") for c in cells.values()
                      if "areal/eta1" in c["runs"]), None)
        areal_stale = max((r.get("max_staleness", 0) for r in areal or [] if "steady" in r),
                          default=None)
        lowest = [(ratio(eta, b), eta, b) for eta in cells for b in BASELINES
                  if ratio(eta, b) is not None]
        low = min(lowest) if lowest else (None, None, None)
        out.append({"train_mult": point[0], "concurrency": point[1], "truncated": point[2],
                    "filter_rate": point[3],
                    "vs_in_order_eta1": ratio(1, "nemo_in_order"),
                    "vs_unbounded_eta2": ratio(2, "unbounded"),
                    "areal_eta1_staleness": areal_stale,
                    "vs_areal_at_its_staleness": (ratio(areal_stale, "areal/eta1")
                                                  if areal_stale is not None else None),
                    "lowest_vs_bounded": low[0], "lowest_at": (low[1], low[2])})
    return out


def _ok(value: float, target: float, strict: bool = False) -> bool:
    """``value`` meets ``target``: at least it (a tie within TIE counts), or with ``strict``
    above it by more than a tie."""
    return value > target + TIE if strict else value >= target - TIE


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


def targets_summary(result: dict) -> dict:
    """How many points meet each target, of how many that have the cells it needs."""
    ts = targets(result)

    def count(key: str, ok) -> tuple[int, int]:
        vals = [t[key] for t in ts if t[key] is not None]
        return sum(1 for v in vals if ok(v)), len(vals)
    return {"in_order_eta1": count("vs_in_order_eta1", lambda v: _ok(v, TARGET_IN_ORDER)),
            "unbounded_eta2": count("vs_unbounded_eta2", lambda v: _ok(v, TARGET_UNBOUNDED)),
            "areal": count("vs_areal_at_its_staleness", lambda v: _ok(v, 1.0, strict=True)),
            "never_below": count("lowest_vs_bounded", lambda v: _ok(v, 1.0))}


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
