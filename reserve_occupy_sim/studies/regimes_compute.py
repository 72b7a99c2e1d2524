"""The regime map's runs: every cell's policies simulated, their ratios, regimes and targets.

What the map is, its slices, references and targets, and how a regime is decided:
``reserve_occupy_sim.studies.regimes`` (the module that imports both halves); the Markdown
tables drawn from these results: ``regimes_render``.
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
from ..model.runner import FILTERED_MEASURE, RunSpec, simulate
from ..model.workload import MathReasoningShape, generate


TRAINER_IDLE_MAX = 0.10
REGIMES = ("slot-bound", "engine-bound", "trainer-bound")
BASELINES = ("nemo_in_order", "nemo_weight_fifo", "verl_drop")
# Issue 38's peers as they ship in late 2026 (``reserve_occupy_peers.PEERS_2026``), each on the
# map's whole-batch trainer and re-prefill engine as Reserve–Occupy is here. Columns of their own:
# the targets, tables and maps of the earlier baselines do not read them (so they cannot move).
PEERS = ("nemo_windowed", "nemo_ready_first", "verl_wait", "prime_rl", "tinker", "window_fifo")
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
# How a cell with reward filtering measures every run, as the streaming map does
# (``model.runner.FILTERED_MEASURE``, ``RunSpec.gradient_batches``): each rule runs until it
# has trained ``batches`` batches' worth of groups that carry a gradient, the warm-up being the
# batches that trained the first fifth of them, so every rule covers the same prompts. A rule
# that filters its no-gradient groups (Reserve–Occupy and its oversampling modes, verl drop and
# wait, tinker, window FIFO, in_order through the drop path, the references: ``Policy.filters``)
# trains ``batch_size`` of them per batch, and its run is the plain ``batches``-batch run, bit
# for bit; one that trains them at zero advantage (NeMo-RL's in_order, weight_fifo, windowed,
# ready_first; prime-rl) takes about ``batches / (1 - rate)`` batches. A filtered cell stores
# ``measure`` and each such run the ``batches`` it took; one without ``measure`` was measured over
# ``batches`` batches of every rule (``remeasure_filtered`` runs it again). Cells without
# filtering are measured as before (every group has a gradient).
MEASURE_DEFINITION = (f"{FILTERED_MEASURE}: with reward filtering every run trains the batches' "
                      "worth of groups with a gradient (the warm-up: the batches that trained "
                      "the first fifth of them); a rule that trains its no-gradient groups "
                      "takes more batches, over the same prompts")
WARMUP_DEFINITION = ("first fifth of the batches left out (with reward filtering: the batches "
                     "that trained the first fifth of the groups with a gradient)")


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
    out += [(b, (), None) for b in BASELINES + PEERS]
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
                               options=options, filtering=filt, candidates=candidates,
                               gradient_batches=filt is not None)
                cache[key] = _one_run(spec, workload, c)
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
    measure = {"measure": FILTERED_MEASURE} if cell.filter_rate > 0 else {}
    return {**dataclasses.asdict(cell), "ratios": ratios,
            "ro_steady": _summary([r["steady"] for r in ro]),
            "ro_trainer_idle": mean["trainer_idle"], "ro_rollout_idle": mean["rollout_idle"],
            "ro_admission": gate,
            "regime": classify(mean["trainer_idle"], gate["policy_held"], gate["engine_full"]),
            "regime_per_seed": regimes, "oversampling": oversampling,
            "runs": runs, **measure}


def run_sweep(cost: CostModel, sweep: Sweep = Sweep(), progress: bool = True,
              cells: Iterable[Cell] | None = None) -> dict:
    cells = list(cells if cells is not None else sweep.cells())
    unique = {c.key() for c in cells}
    per_cell = sweep.seeds * (len(BASELINES) + len(PEERS) + 1 + len(OVERSAMPLING)
                              + len(REFERENCES))
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
                            "warmup": WARMUP_DEFINITION, "measure": MEASURE_DEFINITION},
            "seconds": time.perf_counter() - start, "cells": out}


class StoredFigureMoved(ValueError):
    """A stored run, recomputed, is not what the results file holds: adding to it would mix
    two simulators."""


def add_peers(result: dict, cost: CostModel, peers=PEERS, select=None,
              say: Callable[[str], None] | None = None) -> list[tuple]:
    """Into a stored, compacted ``run_sweep`` result, run only the ``peers`` its cells lack (in
    the distinct cells ``select(cell)`` accepts; default every one), in place; returns the cell
    keys that got them.

    Each cell's Reserve–Occupy run is made again per seed for the ratios, and must compact to
    the stored run exactly (``StoredFigureMoved`` otherwise): so the stored figures are the ones
    this simulator makes, and none of them is rewritten. A peer's ratio and runs are what
    ``run_sweep`` with that peer in ``_policies`` writes for the cell (the same runs, summaries
    and compaction; tests/sim/test_regimes_peers.py).

    A filtered cell stored before ``FILTERED_MEASURE`` (no ``measure``) is first run again whole,
    every column (``remeasure_filtered``); its keys are among those returned."""
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise ValueError(f"not a peer of the regime map: {', '.join(unknown)} "
                         f"(choose from {', '.join(PEERS)})")
    sweep = _stored_sweep(result)
    done = remeasure_filtered(result, cost, select=select, say=say)
    by_key = _by_key(result)
    start = time.perf_counter()
    for key, same in by_key.items():
        first = same[0]
        cell = Cell(first["slice"], first["eta"], first["train_mult"], first["concurrency"],
                    first["truncated"], first["filter_rate"])
        want = [p for p in peers if p not in first["ratios"]]
        if not want or (select is not None and not select(cell)):
            continue
        c = scaled(cost, cell.train_mult, cell.concurrency)
        ro: list[dict] = []
        runs: dict[str, list[dict]] = {p: [] for p in want}
        for seed in range(sweep.seeds):
            workload = generate(seed, MathReasoningShape(groups=sweep.groups,
                                                         truncated=cell.truncated))
            filt = RewardFilter(cell.filter_rate, seed=seed) if cell.filter_rate > 0 else None
            for label in ("reserve_occupy", *want):
                spec = RunSpec(label, cell.eta, sweep.batches, sweep.batch_size, filtering=filt,
                               gradient_batches=filt is not None)
                out = _one_run(spec, workload, c)
                if label == "reserve_occupy":
                    if compact(out) != first["runs"]["reserve_occupy"][seed]:
                        raise StoredFigureMoved(
                            f"cell {key}, seed {seed}: Reserve–Occupy recomputed is "
                            f"{compact(out)}, the results file has "
                            f"{first['runs']['reserve_occupy'][seed]}")
                    ro.append(out)
                else:
                    runs[label].append(out)
        for p in want:
            vals = [a["steady"] / b["steady"] for a, b in zip(ro, runs[p]) if "steady" in b]
            ratio = compact({**_summary(vals), "stalled": sum(1 for b in runs[p]
                                                              if "stalled" in b)})
            for cc in same:
                cc["ratios"][p] = ratio
                cc["runs"][p] = compact(runs[p])
        done.append(key)
        if say is not None:
            say(f"cell {key}: {', '.join(want)} ({time.perf_counter() - start:.0f} s)")
    return done


def _stored_sweep(result: dict) -> Sweep:
    return Sweep(**{k: tuple(v) if isinstance(v, list) else v
                    for k, v in result["sweep"].items()})


def _by_key(result: dict) -> dict[tuple, list[dict]]:
    """The stored cells by ``Cell.key`` (slices share cells: a key's cells hold the same runs)."""
    by_key: dict[tuple, list[dict]] = {}
    for c in result["cells"]:
        by_key.setdefault((c["eta"], *_point(c)), []).append(c)
    return by_key


def unmeasured(result: dict) -> list[tuple]:
    """The keys of the stored filtered cells measured before ``FILTERED_MEASURE``."""
    return [k for k, same in _by_key(result).items()
            if same[0]["filter_rate"] > 0 and same[0].get("measure") != FILTERED_MEASURE]


def _filtering_labels(cell: Cell, sweep: Sweep, group_size: int) -> set[str]:
    """The labels of a cell whose rule filters its no-gradient groups (``Policy.filters``)."""
    from reserve_occupy_peers import make_policy

    return {label for label, options, _ in _policies(cell, sweep, group_size)
            if make_policy(label.split("/")[0], REFERENCES.get(label, cell.eta),
                           **dict(options)).filters}


def remeasure_filtered(result: dict, cost: CostModel, select=None,
                       say: Callable[[str], None] | None = None) -> list[tuple]:
    """Into a stored, compacted ``run_sweep`` result, in place: every filtered cell measured
    before ``FILTERED_MEASURE`` (no ``measure``; in the distinct cells ``select(cell)`` accepts)
    run again whole, every column, as ``run_sweep`` runs it now; returns their keys.

    A rule that filters its no-gradient groups makes its plain run under the new measure, so each
    of its runs must compact to the stored one exactly (``StoredFigureMoved`` otherwise, and
    nothing is written into that cell): only the columns of the rules that train their
    no-gradient groups (in_order, weight_fifo, windowed, ready_first, prime-rl) can move. The
    stored ``definitions`` take the new measure's; ``seconds`` stays that of the run that made
    the map. A cell rerun is what ``run_sweep`` writes for it
    (tests/sim/test_regimes_same_stretch.py)."""
    sweep = _stored_sweep(result)
    todo = set(unmeasured(result))
    cache: dict = {}  # the references, shared by the etas of a point
    done = []
    start = time.perf_counter()
    for key, same in _by_key(result).items():
        first = same[0]
        cell = Cell(first["slice"], *key)
        if key not in todo or (select is not None and not select(cell)):
            continue
        entry = compact(run_cell(cell, cost, sweep, cache))
        group_size = MathReasoningShape(groups=sweep.groups,
                                        truncated=cell.truncated).group_size
        for label in sorted(_filtering_labels(cell, sweep, group_size) & set(first["runs"])):
            new = [{k: v for k, v in r.items() if k != "batches"} for r in entry["runs"][label]]
            if new != first["runs"][label]:
                raise StoredFigureMoved(
                    f"cell {key}: {label} filters, so its run is the plain one, but recomputed "
                    f"it is {new}, the results file has {first['runs'][label]}")
        for cc in same:
            slice_name = cc["slice"]
            cc.clear()
            cc.update(entry, slice=slice_name)
        done.append(key)
        if say is not None:
            say(f"cell {key}: measured again over {FILTERED_MEASURE} "
                f"({time.perf_counter() - start:.0f} s)")
    if done:
        result.setdefault("definitions", {}).update(warmup=WARMUP_DEFINITION,
                                                   measure=MEASURE_DEFINITION)
    return done


def _one_run(spec: RunSpec, workload, cost: CostModel) -> dict:
    """What ``run_cell`` keeps of one run (its cache entry); with ``spec.gradient_batches`` the
    batches it took, too."""
    try:
        r, _ = simulate(spec, workload, cost)
    except SimulationStalled as exc:
        return {"stalled": str(exc).split(";")[0]}
    total = r.tokens_trained + r.waste_l2_tokens + r.waste_l3_tokens + r.waste_filtered_tokens
    out = {"throughput": r.throughput, "steady": r.steady_throughput,
           "batch_s": _steady_batch_s(r), "trainer_idle": r.trainer_idle,
           "rollout_idle": r.rollout_idle, "admission": r.admission,
           "regime": classify_run(r), "l2": r.waste_l2_tokens / total if total else 0.0,
           "length_ratio": r.length_ratio, "length_ks": r.length_ks,
           "max_staleness": r.max_staleness}
    if spec.gradient_batches:
        out["batches"] = r.batches
    return out


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
