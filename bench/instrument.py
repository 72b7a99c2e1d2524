"""The instrument: how ``bench/peers_compare.py`` and ``bench/calibrate.py`` (and any later A/B
on the real engine) compare two configurations, and how they say whether a difference is real.

Design (issue 37, item 1)
-------------------------
* **Pairs.** A comparison of A against B is a set of *pairs*: one run of A and one run of B
  with the same seed, hence the same workload (the same prompts, the same answer-length caps),
  run one right after the other on the same warm engine. Pair ``i`` runs ``(A, B)`` when
  ``i + j`` is even and ``(B, A)`` when odd (``j`` the comparison's index in the grid:
  ``order``), so drift in the host's load and the engine's warm-up falls on A as often as on B;
  ``--order random`` draws each pair's order instead from a seeded generator whose seed is
  written into the results. Every pair's ratio is A's figure over B's. ``--order crossover``
  runs each pair twice, in both orders (``A B B A`` or ``B A A B``, the first as
  ``alternate``): its ratio is the geometric mean of the two runs' ratios (``pair_ratio``), so
  an effect of a run's place (the run before it, the second of two runs of one seed being
  faster or slower, a drift linear in time) cancels inside each pair instead of only across
  pairs: with ``alternate`` the order of comparison ``j``'s pairs is tied to the seed's parity,
  so an order effect and a difference between odd and even seeds' workloads are
  indistinguishable, and both widen the interval. It costs twice the runs.
* **Warm, shared engine; a discarded warm-up.** One engine serves every run of a grid (the
  engine's start-up and first-request compilation are not anyone's cost); before the first
  pair, one run of the grid's baseline is made and thrown away (``warmup_run``).
* **Steady state.** A run's throughput is taken over its own steady-state window
  (``steady_rate``): the tokens the steps after the first ``warmup_steps`` trained, over the
  time between the end of step ``warmup_steps`` and the end of the last step, both from the
  run's ``metrics.jsonl`` rows (``time_s``, ``tokens_trained``): not from the process's or the
  run's start (model load, first compilation, the empty pipeline).
* **The A/A floor.** Every grid holds an A/A comparison (its baseline against itself, the same
  harness, the same alternation), and its row is printed first: what the instrument calls a
  difference between two identical configurations is the noise floor of every other row.
* **The ratio and its interval.** A row's ratio is the median of its pairs' ratios; its interval
  is, by default, the exact distribution-free interval of the median from order statistics
  (``sign_interval``: ``[x_(k), x_(n+1-k)]`` with the largest ``k`` whose coverage ``1 - 2
  P(Bin(n, 1/2) <= k - 1)`` is at least the level; it needs only that the pairs' ratios are
  independent with median 1 when nothing differs). A row is *resolved* only when its interval
  excludes 1. The sign interval is discrete: its coverage jumps between the levels ``k``
  allows (with 12 pairs ``k = 3`` covers 96.1 %, ``k = 4`` 85.4 %), so at 90 % it is often
  wider than a 90 % interval needs to be. ``--interval wilcoxon`` (``wilcoxon_interval``)
  takes the pairs' *log* ratios instead: its ratio is their Hodges-Lehmann estimate (the
  median of the ``M = n(n+1)/2`` Walsh averages ``(y_i + y_j) / 2``, ``i <= j``, exp'd back;
  ``hl`` in every summary), its interval the exact signed-rank interval ``[W_(c),
  W_(M+1-c)]`` of the sorted Walsh averages with the largest ``c`` whose coverage ``1 - 2
  P(T+ <= c - 1)`` is at least the level, ``T+`` the signed-rank statistic under the null,
  whose distribution over the ``2^n`` equally likely sign patterns is counted exactly
  (``signed_rank_counts``); its steps are finer (with 12 pairs 90.8 %). As a test of "no
  difference" it needs the log ratios symmetric about 0 when A and B are the same, and that
  is what pairing with alternated or crossed-over order gives: the labels A and B are then
  exchangeable within a pair, so each pair's log ratio is as likely ``y`` as ``-y``. As an
  interval for a ratio other than 1 it assumes more: that the log ratios are symmetric about
  their centre (the interval is then for that centre); the sign interval needs no symmetry.
  The percentile bootstrap of the median (``bootstrap_interval``, resampling pairs,
  seeded) is kept as ``--interval bootstrap`` for comparison: with few pairs it is
  anti-conservative (with 4 pairs its interval is the range of the middle order statistics, and
  identical configurations are called resolved far more often than the nominal rate).
  The level is 90 % (``LEVEL``): the sign and the signed-rank interval need at least 5 pairs
  for it (``min_pairs``: with 4 the widest interval of either, the range, covers 87.5 %); with
  fewer the row is printed *unresolved* whatever its ratios.
* **The method checked.** ``false_positive_rate`` estimates how often an A/A comparison of ``n``
  pairs is called resolved, by simulation from the grid's own measured A/A pair ratios: the
  ratios are first divided by their median (an A/A comparison's true ratio is 1; in logs,
  the log ratios shifted so that their median is 0), then ``n`` are drawn with replacement,
  the interval computed and its verdict counted, ``trials`` times (seeded). The null is the
  same for every method; for the signed-rank interval it is the measured A/A distribution,
  not a symmetrised one, so its rate also shows what the measured asymmetry of the A/A
  ratios costs it. The grid prints this rate for every method next to the nominal
  ``1 - LEVEL``.
* **Decisions.** Per pair, ``placement_diff`` counts the units the two runs trained in a
  different step (or only one of them trained), from each run's ``events.jsonl`` (the
  ``consume`` lines: a unit's step is the index of the batch it was consumed in). A row whose
  every pair made identical decisions is printed ``same decisions`` instead of a ratio: its
  ratio would measure the host, not the rules (the A/A row always prints its ratio).
* **Placement of the work on the cores** (``place``, ``--pin``): the vLLM engine's process
  (``EngineCore``, the driver's child process) on one core, the driver and trainer (this
  process, every thread) on the others, torch at one thread. Off by default: on a quiet host
  the issue's measurement found it changed neither the throughput nor the A/A spread (a loaded
  host is another matter, and pinning then takes a core from whoever else runs); the A/A row is
  how its effect is read, so a grid with ``--pin`` and one without show it. Hosts with fewer
  than two usable cores refuse ``--pin``.

Everything here is pure (no engine) except ``place``; the statistics are checked against hand
computations in ``tests/runtime/test_bench_instrument.py`` (the signed-rank interval's in
``tests/runtime/test_instrument_wilcoxon.py``).
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
from pathlib import Path
from statistics import median
from typing import Any, Callable, Iterable, Sequence

LEVEL = 0.90  # the intervals' nominal coverage; an A/A row is called resolved at most 10 %
METHODS = ("sign", "bootstrap", "wilcoxon")
ORDERS = ("alternate", "random", "crossover")
BOOTSTRAP_RESAMPLES = 2000


class WindowError(ValueError):
    """A run's metrics rows hold no steady-state window (too few steps, or no time passed)."""


# ---------------------------------------------------------------------------- the order -----

def order(pair: int, comparison: int = 0, mode: str = "alternate",
          rng: random.Random | None = None) -> tuple[str, str]:
    """Which of ``"a"``/``"b"`` runs first in pair ``pair`` of comparison ``comparison``:
    alternating (``(a, b)`` when ``pair + comparison`` is even), or drawn from ``rng``
    (``mode == "random"``; the caller seeds it and records the seed). ``crossover`` starts as
    ``alternate`` does (``run_pairs`` then runs the two again in the other order)."""
    if mode in ("alternate", "crossover"):
        return ("a", "b") if (pair + comparison) % 2 == 0 else ("b", "a")
    if mode == "random":
        if rng is None:
            raise ValueError("a random order needs its seeded generator")
        return ("a", "b") if rng.random() < 0.5 else ("b", "a")
    raise ValueError(f"order mode {mode!r}: one of {', '.join(ORDERS)}")


# ------------------------------------------------------------------------- the window -------

def steady_rate(rows: Sequence[dict[str, Any]], warmup_steps: int,
                key: str = "tokens_trained") -> float:
    """``key`` per second over the steps after the first ``warmup_steps``: (``key`` at the last
    row - at the ``warmup_steps``-th row) / (``time_s`` there - ``time_s`` here), the rows a
    run's ``metrics.jsonl`` (one per step, in ``step`` order whatever their numbering;
    cumulative ``key``; ``time_s`` from the run's start). ``warmup_steps`` 0: from the run's
    start (0 tokens at time 0)."""
    if warmup_steps < 0:
        raise WindowError(f"warmup_steps must be >= 0 (got {warmup_steps})")
    by_step = sorted(rows, key=lambda r: r["step"])
    if len(by_step) <= warmup_steps:
        raise WindowError(f"no step after the {warmup_steps} warm-up steps "
                          f"({len(by_step)} rows)")
    if warmup_steps == 0:
        t0, x0 = 0.0, 0.0
    else:
        base = by_step[warmup_steps - 1]
        t0, x0 = float(base["time_s"]), float(base[key])
    last = by_step[-1]
    dt = float(last["time_s"]) - t0
    if not dt > 0:
        raise WindowError(f"the window after step {warmup_steps} lasted {dt} s")
    return (float(last[key]) - x0) / dt


# -------------------------------------------------------------------- the statistics --------

def binom_cdf(k: int, n: int) -> float:
    """P(Bin(n, 1/2) <= k), exactly (as a float at the end)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2 ** n


def min_pairs(level: float = LEVEL) -> int:
    """The fewest pairs whose sign interval (the range, ``k = 1``) reaches ``level``; the
    signed-rank interval's too (its ``c = 1`` is the range as well, of the same coverage
    ``1 - 2 / 2^n``)."""
    n = 1
    while 1 - 2 * binom_cdf(0, n) < level:
        n += 1
    return n


def sign_interval(ratios: Sequence[float], level: float = LEVEL
                  ) -> tuple[float, float, float]:
    """The exact order-statistic interval of the median, ``(lo, hi, coverage)``:
    ``[x_(k), x_(n+1-k)]`` of the sorted ratios with the largest ``k`` whose coverage ``1 - 2
    P(Bin(n, 1/2) <= k - 1)`` is at least ``level``. Too few pairs for ``level``: ``(-inf,
    inf, coverage of the range)``, an interval that resolves nothing."""
    xs, n = sorted(ratios), len(ratios)
    best = 0
    for k in range(1, n // 2 + 1):
        if 1 - 2 * binom_cdf(k - 1, n) >= level:
            best = k
    if best == 0:
        return -math.inf, math.inf, (1 - 2 * binom_cdf(0, n)) if n else 0.0
    return xs[best - 1], xs[n - best], 1 - 2 * binom_cdf(best - 1, n)


def bootstrap_interval(ratios: Sequence[float], level: float = LEVEL,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
                       ) -> tuple[float, float]:
    """The percentile bootstrap interval of the median: ``resamples`` resamples of the pairs
    with replacement (``random.Random(seed)``), the median of each, and the ``(1 - level) / 2``
    and ``(1 + level) / 2`` quantiles of those medians (nearest rank, as ``_quantile``)."""
    if not ratios:
        return -math.inf, math.inf
    rng, n = random.Random(seed), len(ratios)
    meds = sorted(median(rng.choices(ratios, k=n)) for _ in range(resamples))
    return _quantile(meds, (1 - level) / 2), _quantile(meds, (1 + level) / 2)


@functools.lru_cache(maxsize=None)
def signed_rank_counts(n: int) -> tuple[int, ...]:
    """The exact null distribution of the signed-rank statistic ``T+`` (the sum of the ranks
    of the positive ones among ``n`` values symmetric about 0 and without ties): entry ``t``
    counts the sign patterns, of the ``2^n`` equally likely, whose ranks sum to ``t``, for
    ``t = 0 .. n(n+1)/2``. Counted by the standard recursion over the largest rank ``i``
    (positive or not): ``N_i(t) = N_{i-1}(t) + N_{i-1}(t - i)``. (Hand-rolled, in integers:
    the project does not depend on scipy, and scipy's ``wilcoxon`` gives a p-value, not the
    interval.)"""
    if n < 0:
        raise ValueError(f"signed_rank_counts needs n >= 0 (got {n})")
    counts = [1]
    for i in range(1, n + 1):
        grown = counts + [0] * i
        for t in range(i, len(grown)):
            grown[t] += counts[t - i]
        counts = grown
    return tuple(counts)


@functools.lru_cache(maxsize=None)
def signed_rank_c(n: int, level: float = LEVEL) -> tuple[int, float]:
    """``(c, coverage)``: the largest ``c`` whose signed-rank interval ``[W_(c), W_(M+1-c)]``
    covers at least ``level``, its coverage ``1 - 2 P(T+ <= c - 1)`` (exact, as a float at the
    end); ``(0, coverage of the range)`` when even ``c = 1`` (the range of the values, ``1 -
    2 / 2^n``) falls short."""
    counts, total = signed_rank_counts(n), 2 ** n
    best, cover, below = 0, 0.0, 0  # below: the patterns with T+ <= c - 1
    for c in range(1, len(counts) // 2 + 1):
        below += counts[c - 1]
        if 1 - 2 * below / total < level:
            break
        best, cover = c, 1 - 2 * below / total
    if best == 0:
        return 0, (1 - 2 / total) if n else 0.0
    return best, cover


def _logs(ratios: Sequence[float]) -> list[float]:
    """The log ratios; a ratio of 0 (a run that trained nothing in its window) is ``-inf``, a
    negative or non-finite one a ``ValueError`` naming it."""
    out = []
    for r in ratios:
        if not (math.isfinite(r) and r >= 0):
            raise ValueError(f"a pair's ratio must be a finite number >= 0 (got {r!r})")
        out.append(math.log(r) if r > 0 else -math.inf)
    return out


def walsh_averages(values: Sequence[float]) -> list[float]:
    """The ``n(n+1)/2`` Walsh averages ``(y_i + y_j) / 2``, ``i <= j``, sorted."""
    return sorted((values[i] + values[j]) / 2 for i in range(len(values))
                  for j in range(i, len(values)))


def _exp(y: float) -> float:
    return math.exp(y) if y > -math.inf else 0.0


def hodges_lehmann(ratios: Sequence[float]) -> float | None:
    """The Hodges-Lehmann estimate of the pairs' ratio: the median of the Walsh averages of
    the log ratios, exp'd back (None without ratios)."""
    if not ratios:
        return None
    return _exp(median(walsh_averages(_logs(ratios))))


def wilcoxon_interval(ratios: Sequence[float], level: float = LEVEL
                      ) -> tuple[float, float, float]:
    """The exact signed-rank interval of the pairs' ratio, ``(lo, hi, coverage)``: ``[W_(c),
    W_(M+1-c)]`` of the ``M`` sorted Walsh averages of the log ratios, exp'd back, with
    ``c`` of ``signed_rank_c``. Too few pairs for ``level``: ``(-inf, inf, coverage of the
    range)``, an interval that resolves nothing."""
    n = len(ratios)
    c, cover = signed_rank_c(n, level)
    if c == 0:
        return -math.inf, math.inf, cover
    w = walsh_averages(_logs(ratios))
    return _exp(w[c - 1]), _exp(w[len(w) - c]), cover


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile: element ``ceil(q * n) - 1`` (at least 0)."""
    return sorted_xs[max(0, math.ceil(q * len(sorted_xs)) - 1)]


def interval(ratios: Sequence[float], method: str = "sign", level: float = LEVEL,
             seed: int = 0) -> tuple[float, float]:
    if method == "sign":
        lo, hi, _ = sign_interval(ratios, level)
        return lo, hi
    if method == "bootstrap":
        return bootstrap_interval(ratios, level, seed=seed)
    if method == "wilcoxon":
        lo, hi, _ = wilcoxon_interval(ratios, level)
        return lo, hi
    raise ValueError(f"interval method {method!r}: one of {', '.join(METHODS)}")


def resolved(lo: float, hi: float) -> bool:
    """An interval that excludes 1."""
    return lo > 1.0 or hi < 1.0


def summarize(ratios: Sequence[float], method: str = "sign", level: float = LEVEL,
              seed: int = 0) -> dict[str, Any]:
    """A row's ratio (the median of its pairs'), its Hodges-Lehmann estimate (``hl``: the
    estimate of ``method`` wilcoxon, whose interval is around it; ``estimate`` picks the one
    of the summary's method), its interval and verdict."""
    ratios = [float(r) for r in ratios]
    if not ratios:
        return {"pairs": 0, "ratios": [], "median": None, "hl": None, "lo": None, "hi": None,
                "resolved": False, "method": method, "level": level}
    lo, hi = interval(ratios, method, level, seed)
    return {"pairs": len(ratios), "ratios": ratios, "median": median(ratios),
            "hl": hodges_lehmann(ratios), "lo": lo if math.isfinite(lo) else None,
            "hi": hi if math.isfinite(hi) else None,
            "resolved": resolved(lo, hi), "method": method, "level": level}


def estimate(summary: dict[str, Any]) -> float | None:
    """The ratio a summary's interval is about: the Hodges-Lehmann estimate for the
    signed-rank interval, the median of the pairs' ratios for the others (and for a summary
    written before ``hl`` existed)."""
    if summary.get("method") == "wilcoxon":
        return summary.get("hl")
    return summary["median"]


def false_positive_rate(aa_ratios: Sequence[float], pairs: int, method: str = "sign",
                        level: float = LEVEL, trials: int = 2000, seed: int = 0) -> float:
    """How often an A/A comparison of ``pairs`` pairs is called resolved, by simulation from
    measured A/A pair ratios: divided by their median (the true A/A ratio is 1; the same null
    for every method, the signed-rank interval's included), ``pairs`` of
    them drawn with replacement per trial (``random.Random(seed)``), the interval of
    ``method`` computed, resolved verdicts counted over ``trials``."""
    if not aa_ratios or pairs < 1:
        raise ValueError("false_positive_rate needs measured A/A ratios and pairs >= 1")
    centre = median(aa_ratios)
    null = [r / centre for r in aa_ratios]
    rng = random.Random(seed)
    hits = 0
    for t in range(trials):
        draw = rng.choices(null, k=pairs)
        lo, hi = interval(draw, method, level, seed=seed * 1_000_003 + t)
        hits += resolved(lo, hi)
    return hits / trials


# ---------------------------------------------------------------------- the decisions -------

def placements(events: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Each trained unit's step: the index (from 1) of the ``consume`` that took it, from a
    run's ``events.jsonl`` records (trace format; the header and other lines are skipped)."""
    out: dict[str, int] = {}
    step = 0
    for record in events:
        if record.get("op") == "consume":
            step += 1
            for u in record["batch"]["units"]:
                out[str(u["unit"])] = step
    return out


def read_events(path: Path) -> list[dict[str, Any]]:
    """A run's ``events.jsonl`` as records (a torn last line is dropped)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def placement_diff(a: dict[str, int], b: dict[str, int]) -> int:
    """How many units the two runs trained in a different step, or only one of them trained."""
    return sum(1 for u in set(a) | set(b) if a.get(u) != b.get(u))


# ----------------------------------------------------------------------- the placement ------

def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in _tasks(pid):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        out += [int(c) for c in text.split()]
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def place(engine_pids: Sequence[int] | None = None) -> dict[str, Any]:
    """Pin the engine's process(es) (default: this process's child named ``EngineCore``, else
    every child; the multiprocessing resource tracker is another child) to
    the first usable core and every thread of this process (driver, trainer) to the others,
    torch at one thread. Returns what was done; raises ``OSError`` where the host has fewer
    than two usable cores or affinity cannot be set. Threads started later inherit their
    creator's affinity."""
    import torch

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise OSError(f"--pin needs two usable cores (this process may use {len(cores)})")
    engine_core, rest = {cores[0]}, set(cores[1:])
    if engine_pids is None:
        kids = _children(os.getpid())
        engine_pids = [k for k in kids if "EngineCore" in _cmdline(k)] or kids
    engines = list(engine_pids)
    if not engines:
        raise OSError("--pin found no engine process to place (vLLM's EngineCore is a child "
                      "of this process)")
    for pid in engines:
        for tid in _tasks(pid) or [pid]:
            os.sched_setaffinity(tid, engine_core)
    for tid in _tasks(os.getpid()):
        os.sched_setaffinity(tid, rest)
    torch.set_num_threads(1)
    return {"engine_pids": engines, "engine_cores": sorted(engine_core),
            "driver_cores": sorted(rest), "torch_threads": 1}


# ------------------------------------------------------------------------- the harness ------

def pair_ratio(pair: dict[str, Any], key: str = "rate") -> float | None:
    """A pair's ratio of ``key``: A's over B's; for a crossover pair (with ``a2``/``b2``, the
    runs of its second, reversed half) the geometric mean of the two halves' ratios,
    ``sqrt(a/b * a2/b2)``. None when a denominator is 0 or missing."""
    halves = [("a", "b")] + ([("a2", "b2")] if "a2" in pair else [])
    ratios = []
    for x, y in halves:
        num, den = pair[x].get(key), pair[y].get(key)
        if num is None or not den:
            return None
        ratios.append(num / den)
    return ratios[0] if len(ratios) == 1 else math.sqrt(ratios[0] * ratios[1])


async def run_pairs(comparisons: Sequence[tuple[Any, Any]], seeds: Sequence[int],
                    run: Callable[..., Any], mode: str = "alternate", order_seed: int = 0,
                    warmup: Any = None, on_run: Callable[[dict[str, Any]], None] | None = None
                    ) -> list[dict[str, Any]]:
    """Run every comparison ``(a, b)`` once per seed, as pairs: for seed ``i`` (pair ``i``),
    comparison ``j``'s two runs one after the other, in ``order(i, j, mode, rng)``; with
    ``mode == "crossover"`` then again in the other order (``a2``, ``b2``: four runs).
    ``await run(config, seed)`` returns a run's dict (with at least ``rate`` and
    ``placements``); ``warmup`` (a config, or None) is run first on ``seeds[0]`` and
    discarded. Returns one dict per pair: ``comparison``, ``pair``, ``seed``, ``first``,
    ``a``/``b`` (the two runs; ``a2``/``b2`` too for a crossover), ``ratio``
    (``pair_ratio``) and ``diff`` (``placement_diff`` of ``a`` and ``b``)."""
    if mode not in ORDERS:
        raise ValueError(f"order mode {mode!r}: one of {', '.join(ORDERS)}")
    rng = random.Random(order_seed)
    if warmup is not None:
        await run(warmup, seeds[0])
    out = []
    for i, seed in enumerate(seeds):
        for j, (a, b) in enumerate(comparisons):
            first, second = order(i, j, mode, rng)
            seq = [first, second] + ([second + "2", first + "2"] if mode == "crossover" else [])
            done: dict[str, dict[str, Any]] = {}
            for which in seq:
                done[which] = await run(a if which[0] == "a" else b, seed)
                if on_run is not None:
                    on_run(done[which])
            pair = {"comparison": j, "pair": i, "seed": seed, "first": first, **done}
            pair["ratio"] = pair_ratio(pair)
            pair["diff"] = placement_diff(done["a"]["placements"], done["b"]["placements"])
            out.append(pair)
    return out
