"""The simulator held to the engine: ``make calibrate``.

Runs the grid of ``bench/peers_compare.py`` (every ``staleness.policy`` x trainer streaming x
``rollout.refit`` x eta, per seed, on the real vLLM CPU engine, long-tail lengths) while timing
every engine request, fits the simulator's cost terms to what this machine measured, runs the
simulator with the fitted costs on the same workload (same rule, eta, streaming, refit, seed,
answer lengths, batch shape), and puts each row's measured ratio to the reference row next to
the simulated one.

What is measured, and where it comes from
-----------------------------------------
* Engine requests: ``Timed`` wraps the engine as ``LongTail`` does (it *is* the bench's
  ``LongTail``, plus a clock): per ``generate`` call its start and end (``time.monotonic``), its
  prompt tokens (with the kept tokens of a resumed segment) and the tokens it produced.
* Steps: the run's ``metrics.jsonl`` rows (``train_s``, ``sync_s``, ``stream_s``,
  ``tokens_trained``, ``time_s``), and ``driver_notes.jsonl`` (``run.trace``): each streamed
  chunk (``train_chunk``, with its units) and each unit's ``occupy`` time, which places the
  requests' clock on the run's (the median gap between a unit's last request returning and its
  ``occupy``).

The fit (``fit_costs``), one term of ``reserve_occupy_sim/model/cost.py`` each
------------------------------------------------------------------------
* decode time per token against concurrency, and prefill per token: every training request of
  every run, ``d = prefill_per_token_s * P + n * (step_s + per_request_s * k)``, where ``d`` is
  its time in the engine less any weight-sync pause it spanned, ``P`` its prompt tokens, ``n``
  the tokens it produced and ``k`` the mean number of requests in the engine over its life
  (itself included). Non-negative least squares; ``floor_s`` and ``per_ctx_token_s`` are 0 (the
  tiny model's contexts are under 128 tokens).
* train time per token: the whole-batch steps, ``train_s = fixed_s + per_token_s * tokens``
  (trajectory tokens: prompt and answer of the 16 samples; ``train_s`` includes the weight
  export, which the simulator's batch time must then hold too).
* the refit pause: ``sync_s``, the mean over the steps of each ``rollout.refit`` mode (``abort``
  waits for the running requests to return, ``keep`` does not).
* the chunk overhead: the streaming steps, ``stream_s = chunks * chunk_overhead_s + per_token_s
  * chunk tokens``; ``chunk_share`` is 1 (the runtime's ``accumulate`` runs forward and backward
  per chunk), the per-token cost the whole-batch one.
* the trainer's contention for the cores (``RolloutCost.train_slowdown``, which the simulator
  had not had): the decode fit again with the share ``phi`` of each request's time in the
  engine that overlapped training (a whole-batch step's ``train_s`` or a streamed chunk; a
  ``--raw`` file keeps each request's overlap as counted when its grid ran, the chunks only
  from 2026-12-07 11:00 UTC on), ``d = W / (1 - g * phi)`` with ``W`` the work alone above
  (``fit_decode_shared``): a request losing ``g`` s of decoding per second of training decodes
  at ``1 / (1 + s)`` of its speed, ``s = g / (1 - g)``. (Before 2026-12-07's shared fit it
  was ``d = W + g * train`` in the overlap seconds, a part of the time it explains, which
  credited training with every delay of a request that overlapped it; ``decode_additive``
  keeps it for the page.) This fit ties ``prefill_per_token_s`` to ``per_request_s`` (fresh
  prompts are all 4 tokens, so a free prefill term acts as a per-request constant).
* the engine's contention for the trainer (``TrainCost.rollout_slowdown``, the other direction
  of the same sharing): each step's share of its training time during which the engine had a
  request (``busy``, from the requests' timings; a streamed chunk's span is its note's end
  less the step's ``stream_s`` shared evenly over its chunks), and ``fit_train_contended``:
  the train and chunk costs above fitted again as work alone, stretched by ``1 + s * busy``
  (a busy flag); and shaped by the engine's load: each step's load profile (``load_profile``:
  the share of its training time at each number ``n`` of requests in the engine, at most its
  64), stretched by ``1 + s * sum(share * f(n))``, ``f`` each of the simulator's shapes
  (``TrainCost.rollout_load``: saturating ``min(1, n / N)``, hyperbolic ``n / (n + K)``), ``s``
  and the scale fitted jointly and the shape of the smaller residual kept
  (``fit_load_shapes``). A --raw file written before the profile was recorded holds no
  request times: its steps' busy shares are spread over the load the simulator's replay of
  the same run had during that kind of training (``replayed_load``; the page says which).

Each row is simulated with the cost model as it was (the first decode fit, no contention) and
revised (the second decode fit with ``train_slowdown``, and the trainer's work alone with
``rollout_slowdown`` as a busy flag, when the steps identify it), and for the instrument's
grids also revised with the term shaped by the load (``sim_load``) and without the term
(``sim_one_way``); docs/calibration.md says why. Out of sample (``--prior-fit``, which ``make
calibrate`` passes the committed results file it is about to replace): each run simulated
again, in each revised variant, with the terms another grid fitted; the same workload and the
same simulator, so the ratios differ from the grid's own only by what the terms learned from
its measurement, and the page shows how many of them hold within 5 % or the interval.

The simulator run of each row: one instance with ``(eta + 1) x batch_size x group_size``
sequence slots (the in-flight bound the runtime's rules keep: ``(eta + 1) x batch_size`` groups),
at most the engine's 64 (``max_num_seqs``), batches of the grid's shape (``--workload``: 4
groups of 4, or the separating workload's 12 of 4), ``reprefill_on_update`` for ``abort`` (the driver resumes a paused request with its
tokens as a new prompt) and not for ``keep``, the fitted sync of the row's refit mode, chunks of
one group with streaming; the workload is the run's: group ``i`` is unit ``g{i}``, its answer
lengths the caps ``LongTail`` gives that unit's candidates with the row's seed, its prompt the
prompt tokens the run's first request of that unit had. Throughputs count answer tokens, as the
runtime's do.

    python bench/calibrate.py --seeds 0 --etas 1,2 --steps 8 --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path
from statistics import fmean, median
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.cli import Parser, read_json  # noqa: E402
from bench.docblock import between, splice  # noqa: E402

import peers_compare as peers  # noqa: E402  (configures vLLM's env through refit_compare)
from refit_compare import _g  # noqa: E402

DOC = ROOT / "docs" / "calibration.md"
RESULTS = ROOT / "docs" / "results" / "calibration.json"
BEGIN, END = "<!-- begin: calibration (generated) -->", "<!-- end: calibration -->"
TARGET = 0.05  # every simulated ratio within 5 % of the measured one (issue 27 item 4)
SHAPE = peers.SHAPE  # (staleness.batch_size, group_size): the grid's unless --workload says
ENGINE_SEQS = 64  # peers_compare's engine: max_num_seqs (the simulator's concurrency is capped)


class FitError(ValueError):
    """A cost term cannot be fitted from these measurements; ``term`` names it."""

    def __init__(self, term: str, message: str) -> None:
        self.term = term
        super().__init__(f"cannot fit {term}: {message}")


class Call(NamedTuple):
    """One engine request (a segment of a candidate) as ``Timed`` saw it."""

    request_id: str
    t0: float
    t1: float
    prompt: int
    tokens: int

    @property
    def unit(self) -> str:
        return self.request_id.split("-c")[0]


class Timed(peers.LongTail):
    """The bench's long-tail engine, timing every training request it serves."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[Call] = []

    async def generate(self, request: Any) -> Any:
        t0 = time.monotonic()
        segment = await super().generate(request)
        if not request.request_id.startswith("eval"):
            self.calls.append(Call(request.request_id, t0, time.monotonic(),
                                   len(request.prompt_ids), len(segment.token_ids)))
        return segment


# ------------------------------------------------------------------------------ the fit -----

def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (an active set: the most negative coefficient
    is pinned at 0 and the rest refitted, until none is negative)."""
    free = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while free:
        sol, *_ = np.linalg.lstsq(x[:, free], y, rcond=None)
        if (sol >= 0).all():
            coef[free] = sol
            break
        free.pop(int(np.argmin(sol)))
    return coef


def _r2(x: np.ndarray, y: np.ndarray, coef: np.ndarray) -> float:
    resid = y - x @ coef
    total = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float((resid ** 2).sum()) / total if total > 0 else 0.0


def overlap(t0: float, t1: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(t1, b) - max(t0, a)) for a, b in spans)


def busy_spans(calls: list[Call]) -> list[tuple[float, float]]:
    """The union of the requests' times in the engine: when it had at least one."""
    out: list[list[float]] = []
    for a, b in sorted((c.t0, c.t1) for c in calls if c.t1 > c.t0):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def load_pieces(calls: list[Call], cap: int = ENGINE_SEQS) -> list[tuple[float, float, int]]:
    """The engine's load as a step function: ``(from, to, n)`` with ``n`` >= 1 the requests in
    the engine then, at most ``cap`` (the engine runs ``max_num_seqs``; the rest wait)."""
    edges = sorted([(c.t0, 1) for c in calls if c.t1 > c.t0]
                   + [(c.t1, -1) for c in calls if c.t1 > c.t0])
    out, n, t = [], 0, -math.inf
    for when, d in edges:
        if when > t and n > 0:
            out.append((t, when, min(n, cap)))
        n, t = n + d, when
    return out


def load_profile(spans: list[tuple[float, float]], pieces: list[tuple[float, float, int]],
                 total: float) -> list[list[float]]:
    """``[[n, share], ...]``: the share of ``total`` seconds that ``spans`` spent with ``n``
    requests running (``load_pieces``), ``n`` ascending; the shares sum to the busy share."""
    at: dict[int, float] = {}
    for a, b in spans:
        for p0, p1, n in pieces:
            o = min(b, p1) - max(a, p0)
            if o > 0:
                at[n] = at.get(n, 0.0) + o
    return [[n, at[n] / total] for n in sorted(at)] if total > 0 else []


def request_features(calls: list[Call], pauses: list[tuple[float, float]],
                     training: list[tuple[float, float]]) -> list[dict[str, float]]:
    """Per request that produced tokens: its time in the engine less the pauses it spanned
    (``d``), prompt tokens (``P``), tokens (``n``), the mean number of requests in the engine
    over its life (``k``, itself included) and its overlap with training steps (``train``).
    ``pauses`` and ``training`` are on the requests' clock."""
    edges = sorted([(c.t0, 1) for c in calls] + [(c.t1, -1) for c in calls])
    times = [t for t, _ in edges]
    levels = list(np.cumsum([d for _, d in edges]))  # requests in the engine after each edge
    out = []
    for c in calls:
        if c.tokens < 1 or c.t1 <= c.t0:
            continue
        i = int(np.searchsorted(times, c.t0, side="right"))
        area, t, level = 0.0, c.t0, levels[i - 1]
        while i < len(times) and times[i] < c.t1:
            area += level * (times[i] - t)
            t, level = times[i], levels[i]
            i += 1
        area += level * (c.t1 - t)
        out.append({"d": c.t1 - c.t0 - overlap(c.t0, c.t1, pauses), "P": c.prompt,
                    "n": c.tokens, "k": area / (c.t1 - c.t0),
                    "train": overlap(c.t0, c.t1, training)})
    return out


def fit_decode(rows: list[dict[str, float]], with_training: bool = False,
               tie_prefill: bool = False) -> dict[str, float]:
    """``d = prefill_per_token_s * P + n * (step_s + per_request_s * k)`` [+ ``trainer_overlap_s
    * train``] by non-negative least squares (``request_features`` rows). ``tie_prefill``:
    ``prefill_per_token_s = per_request_s`` (a prompt token costs the forward pass what one
    running request's token does), fitted as one coefficient of ``n * k + P``."""
    term = "decode time per token against concurrency"
    if len(rows) < 8:
        raise FitError(term, f"{len(rows)} requests (at least 8)")
    ks = [r["k"] for r in rows]
    if max(ks) - min(ks) < 1.0:
        raise FitError(term, f"the concurrency never varied (k in [{min(ks):.2f}, "
                             f"{max(ks):.2f}]): per-request and per-step costs are "
                             f"indistinguishable")
    cols = [([] if tie_prefill else [r["P"]]) + [r["n"], r["n"] * r["k"]
                                                  + (r["P"] if tie_prefill else 0.0)]
            + ([r["train"]] if with_training else []) for r in rows]
    x, y = np.array(cols, dtype=float), np.array([r["d"] for r in rows], dtype=float)
    if not np.isfinite(x).all() or not np.isfinite(y).all():
        raise FitError(term, "a timing is not finite")
    coef = nnls(x, y)
    r2 = _r2(x, y, coef)
    if tie_prefill:
        coef = np.concatenate([coef[1:2], coef])  # prefill_per_token_s = per_request_s
    if coef[1] + coef[2] * fmean(ks) <= 0:
        raise FitError(term, "the fitted time per token is 0")
    out = {"prefill_per_token_s": float(coef[0]), "step_s": float(coef[1]),
           "per_request_s": float(coef[2]), "r2": r2, "requests": len(rows),
           "k_min": min(ks), "k_max": max(ks)}
    if with_training:
        out["trainer_overlap_s"] = float(coef[3])
    return out


SHARE_GRID = np.round(np.arange(0.0, 0.99 + 1e-9, 0.005), 3)  # fit_decode_shared's search


def fit_decode_shared(rows: list[dict[str, float]]) -> dict[str, float]:
    """The decode fit with the trainer's contention for the cores, on the requests' timeline:
    a request that spent a share ``phi = train / d`` of its time in the engine beside training
    (``request_features``), decoding at ``1 - g`` of its speed then (``g`` s of decode lost per
    second of training), did its work alone ``W = prefill_per_token_s * P + n * (step_s +
    per_request_s * k)`` in ``d * (1 - g * phi)`` seconds:

        d = W / (1 - g * phi),   ``prefill_per_token_s = per_request_s`` (as ``fit_decode``'s
                                 ``tie_prefill``)

    linear in the two costs at each ``g``: non-negative least squares at each ``g`` of
    ``SHARE_GRID`` (0 to 0.99 by 0.005), the one of the smallest squared error kept;
    ``train_slowdown = g / (1 - g)``. The same processor sharing as ``fit_decode``'s
    ``with_training`` (``d = W + g * train``, exact when nothing else moves ``d``), but with the
    share ``phi`` as the regressor instead of the overlap seconds ``train = phi * d``, a part of
    the time ``d`` it explains: a request that spends longer in the engine for any other
    reason (its queue, the driver, the scheduler) also overlaps training longer, and that fit
    credits the training with it (docs/calibration.md: on the 10:56 grid it made decode with the
    trainer idle 2 to 5 times too fast at 2 to 16 running requests, and the simulated
    whole-batch rules' waits for their last groups 0.27-0.36 s where the runs waited
    0.62-0.63 s). The share is what the timeline gives and moves with ``d`` only
    through the duty cycle; without a spread of it the term is not identified, and this says
    so."""
    term = "decode time per token against concurrency and training"
    base = fit_decode(rows, tie_prefill=True)  # its checks (rows, the concurrency's spread)
    used = [r for r in rows if r["d"] > 0]
    phi = np.array([min(1.0, max(0.0, r["train"] / r["d"])) for r in used])
    if phi.max() - phi.min() < 0.25:
        raise FitError(term, f"the requests' share of time beside training hardly varied "
                             f"({phi.min():.2f}-{phi.max():.2f}): the slowdown is not "
                             f"identified")
    n = np.array([r["n"] for r in used], dtype=float)
    work = np.stack([n, n * np.array([r["k"] for r in used]) + np.array([r["P"] for r in used])],
                    axis=1)
    y = np.array([r["d"] for r in used], dtype=float)
    best = None
    for g in SHARE_GRID:
        x = work / (1.0 - g * phi)[:, None]
        coef = nnls(x, y)
        sse = float(np.sum((x @ coef - y) ** 2))
        if best is None or sse < best[0]:
            best = (sse, float(g), coef, x)
    sse, g, coef, x = best
    if coef[0] + coef[1] * fmean(r["k"] for r in used) <= 0:
        raise FitError(term, "the fitted time per token is 0")
    return {"prefill_per_token_s": float(coef[1]), "step_s": float(coef[0]),
            "per_request_s": float(coef[1]), "r2": _r2(x, y, coef), "requests": len(used),
            "k_min": base["k_min"], "k_max": base["k_max"], "trainer_overlap_s": g,
            "share_min": float(phi.min()), "share_max": float(phi.max()),
            "share_mean": float(phi.mean()), "at_limit": g == float(SHARE_GRID[-1])}


def fit_train(steps: list[tuple[float, ...]]) -> dict[str, float]:
    """``train_s = fixed_s + per_token_s * tokens`` over (tokens, train_s, ...) of whole-batch
    steps."""
    term = "train time per token"
    if len(steps) < 3:
        raise FitError(term, f"{len(steps)} whole-batch steps (at least 3)")
    tokens = [t[0] for t in steps]
    if max(tokens) <= min(tokens):
        raise FitError(term, "every step trained the same number of tokens")
    x = np.array([[1.0, t] for t in tokens])
    y = np.array([t[1] for t in steps], dtype=float)
    coef = nnls(x, y)
    return {"fixed_s": float(coef[0]), "per_token_s": float(coef[1]), "r2": _r2(x, y, coef),
            "steps": len(steps)}


def fit_chunk(steps: list[tuple[int, float, float]], per_token_s: float) -> dict[str, float]:
    """``stream_s = chunks * chunk_overhead_s + per_token_s * tokens`` over (chunks, tokens,
    stream_s) of streaming steps, ``per_token_s`` the whole-batch fit's."""
    used = [s[:3] for s in steps if s[0] > 0]
    if not used:
        raise FitError("the chunk overhead", "no streaming step trained a chunk")
    num = sum(n * (s - per_token_s * t) for n, t, s in used)
    den = sum(n * n for n, _, _ in used)
    return {"chunk_overhead_s": max(0.0, num / den), "chunk_share": 1.0, "steps": len(used),
            "chunks": sum(n for n, _, _ in used)}


SLOWDOWN_GRID = np.round(np.arange(0.0, 4.0 + 1e-9, 0.01), 2)  # rollout_slowdown's search
# the load's scale (``TrainCost.rollout_load_n``) searched for each shape: saturating at 1 is
# the busy flag; the engine runs at most ENGINE_SEQS requests
LOAD_GRIDS = {"saturating": (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0,
                             40.0, 48.0, 56.0, 64.0),
              "hyperbolic": (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0,
                             64.0, 96.0, 128.0)}


def fit_train_contended(whole: list[tuple[Any, ...]], streamed: list[tuple[Any, ...]],
                        shape: str | None = None) -> dict[str, Any]:
    """The trainer's work alone and how much the engine stretches it: over the whole-batch
    steps (tokens, train_s, busy[, load]) and the streaming steps (chunks, tokens, stream_s,
    busy[, load]), ``busy`` the share of the step's training time during which the engine
    had a request and ``load`` its profile (``load_profile``: the share at each number ``n`` of
    running requests),

        train_s  = (fixed_s + per_token_s * tokens) * (1 + rollout_slowdown * w)
        stream_s = (chunk_overhead_s * chunks + per_token_s * tokens)
                   * (1 + rollout_slowdown * w)

    with ``w`` the step's load-weighted busy share: ``busy`` itself for ``shape`` None (the
    busy flag), else the sum over its profile of ``share * f(n)``, ``f`` the simulator's
    ``load_share`` of that shape at a scale ``rollout_load_n`` of ``LOAD_GRIDS`` (the
    simulator's ``TrainCost``: training at ``1 / (1 + s * f(n))`` of its speed). Linear in the
    three costs for a given ``s`` and scale: non-negative least squares at each ``s`` of
    ``SLOWDOWN_GRID`` (0 to 4 by 0.01) and each scale, the pair of the smallest squared error
    kept. The share ``busy`` varies because eta 0's steps train with the engine idle (whole
    batch) or decoding the step's last groups (streaming), eta 1's with it mostly decoding,
    and the load because those last groups are few requests; without either spread the term is
    not identified, and this says so."""
    from reserve_occupy_sim.model.cost import LOAD_SHAPES, load_share

    term = "the engine's contention for the trainer" + (f" ({shape} in its load)"
                                                        if shape else "")
    if shape is not None and shape not in LOAD_SHAPES:
        raise FitError(term, f"unknown shape (choose from {', '.join(LOAD_SHAPES)})")
    used = [s for s in streamed if s[0] > 0]
    if len(whole) + len(used) < 8:
        raise FitError(term, f"{len(whole) + len(used)} steps (at least 8)")
    if any(len(s) < 3 for s in whole) or any(len(s) < 4 for s in used):
        raise FitError(term, "no step recorded the engine's busy share (a --raw file of an "
                             "earlier calibrate.py)")
    busy = [s[2] for s in whole] + [s[3] for s in used]
    if max(busy) - min(busy) < 0.25:
        raise FitError(term, f"the engine's busy share during training hardly varied ("
                             f"{min(busy):.2f}-{max(busy):.2f}): the slowdown is not "
                             f"identified")
    y = np.array([s[1] for s in whole] + [s[2] for s in used], dtype=float)
    base = np.array([[1.0, s[0], 0.0] for s in whole] + [[0.0, s[1], s[0]] for s in used],
                    dtype=float)
    extra: dict[str, Any] = {}
    if shape is None:
        weights = {1.0: np.array(busy, dtype=float)}
    else:
        if any(len(s) < 4 for s in whole) or any(len(s) < 5 for s in used):
            raise FitError(term, "no step recorded the engine's load (a --raw file of an "
                                 "earlier calibrate.py)")
        profiles = [s[3] for s in whole] + [s[4] for s in used]
        means = [sum(n * x for n, x in p) / sum(x for _, x in p) for p in profiles
                 if sum(x for _, x in p) > 0]
        if not means or max(means) - min(means) < 1.0:
            raise FitError(term, "the engine's load during training hardly varied (mean "
                                 "running requests while busy " + (
                                     f"{min(means):.1f}-{max(means):.1f}" if means else
                                     "never busy") + "): the shape is not identified")
        weights = {scale: np.array([sum(x * load_share(shape, scale, n) for n, x in p)
                                    for p in profiles]) for scale in LOAD_GRIDS[shape]}
        extra = {"load_mean_min": min(means), "load_mean_max": max(means)}
    best = None
    for scale, w in weights.items():
        for slow in SLOWDOWN_GRID:
            x = base * (1.0 + slow * w)[:, None]
            coef = nnls(x, y)
            sse = float(np.sum((x @ coef - y) ** 2))
            if best is None or sse < best[0]:
                best = (sse, float(slow), scale, coef, x)
    sse, slow, scale, coef, x = best
    return {"fixed_s": float(coef[0]), "per_token_s": float(coef[1]),
            "chunk_overhead_s": float(coef[2]), "rollout_slowdown": slow,
            "rollout_load": shape or "saturating", "rollout_load_n": float(scale),
            "sse": sse, "r2": _r2(x, y, coef), "steps": len(whole), "streamed_steps": len(used),
            "busy_min": min(busy), "busy_max": max(busy),
            "at_limit": slow == float(SLOWDOWN_GRID[-1]),
            "load_at_limit": shape is not None and scale == LOAD_GRIDS[shape][-1], **extra}


# ------------------------------------------------------------------------ from the runs -----

def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measure(calls: list[Call], rows: list[dict[str, Any]], notes: list[dict[str, Any]],
            shape: tuple[int, int] = SHAPE) -> dict[str, Any]:
    """What one run gives the fit: request features, whole-batch and streaming steps, syncs,
    and the prompt tokens of each unit (for the simulator's workload)."""
    last_end: dict[str, float] = {}
    prompts: dict[str, int] = {}
    unit_tokens: dict[str, int] = {}
    for c in calls:
        last_end[c.unit] = max(last_end.get(c.unit, -math.inf), c.t1)
        unit_tokens[c.unit] = unit_tokens.get(c.unit, 0) + c.tokens
        if c.request_id.endswith("-s0") and c.unit not in prompts:
            prompts[c.unit] = c.prompt
    gaps = [last_end[n["unit"]] - n["t"] for n in notes
            if n.get("event") == "occupy" and n.get("unit") in last_end]
    origin = median(gaps) if gaps else min((c.t0 for c in calls), default=0.0)
    prompt_mean = fmean(prompts.values()) if prompts else 0.0
    samples = shape[0] * shape[1]
    pauses, training, whole, streamed, syncs = [], [], [], [], []
    prev_t, prev_tokens = 0.0, 0
    chunks = [n for n in notes if n.get("event") == "train_chunk"]
    engine = busy_spans(calls)
    pieces = load_pieces(calls)
    for r in rows:
        end = r["time_s"]
        pauses.append((origin + end - r["sync_s"], origin + end))
        span = (origin + end - r["sync_s"] - r["train_s"], origin + end - r["sync_s"])
        training.append(span)
        syncs.append(r["sync_s"])
        tokens = r["tokens_trained"] - prev_tokens + samples * prompt_mean
        mine = [n for n in chunks if prev_t < n["t"] <= end]
        if mine or r.get("streamed_units"):
            chunk_tokens = sum(unit_tokens.get(u, 0) + shape[1] * prompts.get(u, prompt_mean)
                               for n in mine for u in n["units"])
            # each chunk's note is written when it ends; the step's stream_s shared evenly
            d = r["stream_s"] / len(mine) if mine else 0.0
            # a chunk is training too: the decode fit's overlap (``train_slowdown``) counts it
            training.extend((origin + n["t"] - d, origin + n["t"]) for n in mine if d > 0)
            busy = fmean(overlap(origin + n["t"] - d, origin + n["t"], engine) / d
                         for n in mine) if mine and d > 0 else 0.0
            load = load_profile([(origin + n["t"] - d, origin + n["t"]) for n in mine],
                                pieces, d * len(mine))
            streamed.append((len(mine), chunk_tokens, r["stream_s"], busy, load))
        else:
            busy = overlap(*span, engine) / r["train_s"] if r["train_s"] > 0 else 0.0
            whole.append((tokens, r["train_s"], busy, load_profile([span], pieces,
                                                                   r["train_s"])))
        prev_t, prev_tokens = end, r["tokens_trained"]
    return {"requests": request_features(calls, pauses, training), "whole": whole,
            "streamed": streamed, "syncs": syncs, "prompts": prompts,
            "prompt_mean": prompt_mean}


def fit_costs(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Every term, from the runs' ``measure``s (each with its ``refit``)."""
    requests = [q for m in measured for q in m["requests"]]
    decode = fit_decode(requests)
    try:
        diag, shared_why = fit_decode_shared(requests), ""
    except FitError as e:  # (no spread of the share: no slowdown the requests can show)
        diag = {**fit_decode(requests, tie_prefill=True), "trainer_overlap_s": 0.0}
        shared_why = str(e)
    # the fit of overlap seconds it replaces (its regressor a part of the time it explains),
    # kept beside it for the page
    additive = fit_decode(requests, with_training=True, tie_prefill=True)
    train = fit_train([s for m in measured for s in m["whole"]])
    sync: dict[str, float] = {}
    for mode in peers.REFITS:
        xs = [s for m in measured if m["refit"] == mode for s in m["syncs"]]
        if xs:
            sync[mode] = fmean(xs)
    if not sync:
        raise FitError("the refit pause", "no step synced weights")
    streamed = [s for m in measured for s in m["streamed"]]
    chunk = fit_chunk(streamed, train["per_token_s"]) if streamed else None
    try:
        contended: dict[str, Any] | None = fit_train_contended(
            [s for m in measured for s in m["whole"]], streamed)
    except FitError as e:  # the revised model then keeps the train fit above, unstretched
        contended, why = None, str(e)
    else:
        why = ""
    shaped, load, load_why = fit_load_shapes([s for m in measured for s in m["whole"]],
                                             streamed)
    g = diag["trainer_overlap_s"]
    if g >= 1.0:
        raise FitError("the trainer's contention", f"decode loses {g:.2f} s per second of "
                                                    f"training (must be < 1)")
    # decode at 1 / (1 + s) of its speed while training loses s / (1 + s) of each second
    return {"decode": decode, "train": train, "sync_s": sync, "chunk": chunk,
            "trainer_overlap_s": g, "train_slowdown": g / (1.0 - g),
            "decode_with_overlap": diag, "decode_additive": additive,
            "decode_shared_why": shared_why,
            "train_contended": contended,
            "train_contended_why": why, "train_load": load, "train_load_why": load_why,
            "train_load_shapes": shaped}


def fit_load_shapes(whole: list[tuple[Any, ...]], streamed: list[tuple[Any, ...]]
                    ) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """``fit_train_contended`` with each load shape of the simulator: every shape's fit (or
    why not), the one of the smallest squared error (None when none fits) and why none did."""
    from reserve_occupy_sim.model.cost import LOAD_SHAPES

    shaped: dict[str, Any] = {}
    for shape in LOAD_SHAPES:
        try:
            shaped[shape] = fit_train_contended(whole, streamed, shape)
        except FitError as e:
            shaped[shape] = {"why": str(e)}
    fitted = [f for f in shaped.values() if "why" not in f]
    best = min(fitted, key=lambda f: f["sse"]) if fitted else None
    return shaped, best, "" if best else "; ".join(f["why"] for f in shaped.values())


def cost_model(fit: dict[str, Any], eta: int, streaming: bool, refit: str,
               revised: bool = False, shape: tuple[int, int] = SHAPE,
               two_way: bool = True, load: bool = False) -> Any:
    """The simulator's ``CostModel`` of one row, from ``fit_costs``. ``revised``: the model
    with the trainer's contention (``train_slowdown``) and its decode fit, which separates the
    time requests lost to training and ties ``prefill_per_token_s`` to ``per_request_s``; and
    the engine's contention for the trainer, as a busy flag (``train_contended``) or, with
    ``load``, shaped by the engine's load (``train_load``); ``two_way=False``: without it."""
    from reserve_occupy_sim.model.cost import CostModel, RolloutCost, TrainCost

    d = fit["decode_with_overlap"] if revised else fit["decode"]
    t, c = fit["train"], fit.get("chunk")  # (a prior may leave out what it did not measure)
    # training stretched by decoding (``two_way=False``: the revised model without it)
    both = fit.get("train_load" if load else "train_contended") if revised and two_way \
        else None
    if both:
        t = both
        c = dict(c, chunk_overhead_s=both["chunk_overhead_s"]) if c else None
    if refit not in fit["sync_s"]:
        raise FitError("the refit pause", f"no {refit!r} step was measured")
    if streaming and c is None:
        raise FitError("the chunk overhead", "no streaming step was measured")
    rollout = RolloutCost(floor_s=0.0, step_s=d["step_s"], per_request_s=d["per_request_s"],
                          per_ctx_token_s=0.0, prefill_per_token_s=d["prefill_per_token_s"],
                          reprefill_on_update=refit == "abort",
                          train_slowdown=fit["train_slowdown"] if revised else 0.0)
    train = TrainCost(fixed_s=t["fixed_s"], per_token_s=t["per_token_s"],
                      sync_s=fit["sync_s"][refit], chunk_groups=1 if streaming else 0,
                      chunk_overhead_s=c["chunk_overhead_s"] if c else 0.0,
                      chunk_share=c["chunk_share"] if c else 1.0,
                      rollout_slowdown=both["rollout_slowdown"] if both else 0.0,
                      rollout_load=both.get("rollout_load", "saturating") if both
                      else "saturating",
                      rollout_load_n=both.get("rollout_load_n", 1.0) if both else 1.0)
    return CostModel(name="calibrated", rollout=rollout, train=train, instances=1,
                     concurrency=min(ENGINE_SEQS, (eta + 1) * shape[0] * shape[1]),
                     derivation={"status": "fitted by bench/calibrate.py"})


def workload(seed: int, prompts: dict[str, int], prompt_mean: float, groups: int,
             max_tokens: int, med: float, sigma: float, group: int = SHAPE[1]) -> Any:
    """The run's workload for the simulator: group ``i`` is unit ``g{i}``, its answers the
    caps ``LongTail`` draws for that unit's candidates."""
    from reserve_occupy_sim.model.workload import GroupSpec, Workload

    tail = peers.LongTail(None, max_tokens, seed, med, sigma)
    fallback = max(1, round(prompt_mean))
    specs = tuple(GroupSpec(i, prompts.get(f"g{i}", fallback),
                            tuple(tail.cap(f"g{i}-c{j}") for j in range(group)))
                  for i in range(groups))
    return Workload(f"long-tail(seed={seed})", specs)


def replayed_load(sim: Any, train: Any) -> dict[str, list[list[float]]]:
    """The engine's load during training in a simulated run, as ``load_profile`` gives it for
    a measured step but over all of the run's steps of a kind and normalised to the busy time:
    ``whole``, the whole-batch steps' training spans (``t_consume`` to ``t_trained``), and
    ``chunk``, the streamed chunks' (each from its hand-over for ``train.chunk_time`` of its
    trajectories, the last to ``t_trained``); ``[[n, share of the busy time], ...]``, empty
    where the engine never ran a request during that kind of span. ``train``: the run's
    ``TrainCost``, without ``rollout_slowdown`` (so a chunk's time is its work)."""
    calls = [Call("", r.t_start, r.t_end, 0, 0) for g in sim.groups
             for r in g.requests + g.surplus if r.t_start == r.t_start and r.t_end == r.t_end]
    pieces = load_pieces(calls, cap=10 ** 9)  # the simulator's instances cap it already
    by_tid = {r.tid: r for r in sim.ledger.requests}
    spans: dict[str, list[tuple[float, float]]] = {"whole": [], "chunk": []}
    for b in sim.ledger.batches:
        if not math.isfinite(b.t_trained):
            continue
        if not b.chunks:
            spans["whole"].append((b.t_consume, b.t_trained))
            continue
        first = 0
        for j, (t, count) in enumerate(b.chunks):
            lengths = [by_tid[x].prompt + by_tid[x].length for x in b.tids[first:first + count]]
            first += count
            end = b.t_trained if j == len(b.chunks) - 1 else t + train.chunk_time(lengths)
            spans["chunk"].append((t, end))
    out = {}
    for kind, xs in spans.items():
        prof = load_profile(xs, pieces, 1.0)
        busy = sum(x for _, x in prof)
        out[kind] = [[n, x / busy] for n, x in prof] if busy > 0 else []
    return out


def with_replayed_load(measured: list[dict[str, Any]], replays: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """Measurements without the engine's load per step (a --raw of the calibrate.py before it
    recorded one) given, per step, its measured busy share spread over the load the simulator's
    replay of the same run had during that kind of training (``replayed_load``; the other
    kind's where the replay had none, all at one request where it had neither)."""
    out = []
    for m, rp in zip(measured, replays):
        def spread(p: list[list[float]], busy: float) -> list[list[float]]:
            return [[n, x * busy] for n, x in p] if p else ([[1, busy]] if busy > 0 else [])
        # (a step without its busy share, of an older --raw still, is kept as it is: the fits
        # then say the share is missing)
        whole = [(*s[:3], spread(rp["whole"] or rp["chunk"], s[2])) if len(s) >= 3 else s
                 for s in m["whole"]]
        streamed = [(*s[:4], spread(rp["chunk"] or rp["whole"], s[3])) if len(s) >= 4 else s
                    for s in m["streamed"]]
        out.append({**m, "whole": whole, "streamed": streamed})
    return out


def has_load(measured: list[dict[str, Any]]) -> bool:
    """Whether every step of these measurements recorded the engine's load profile."""
    return all(len(s) >= 4 for m in measured for s in m["whole"]) and \
        all(len(s) >= 5 for m in measured for s in m["streamed"])


def simulate_row(run: dict[str, Any], fit: dict[str, Any], wl: Any, revised: bool = False,
                 shape: tuple[int, int] = SHAPE, two_way: bool = True, load: bool = False,
                 replay: dict[str, Any] | None = None) -> dict[str, float]:
    """The simulator's figures of one run (answer tokens, as the runtime counts); ``replay``:
    a dict to receive the run's ``replayed_load``."""
    from reserve_occupy_sim.model.runner import RunSpec, simulate

    cost = cost_model(fit, run["eta"], run["streaming"], run["refit"], revised, shape, two_way,
                      load)
    # Reserve-Occupy streams only when told (Config.streaming); the peers that stream
    # (runtime.peers) hand chunks whenever the trainer takes them, as their policies do here
    options = (("streaming", True),) if run["streaming"] and run["policy"] == peers.RESERVE_OCCUPY \
        else ()
    if run["policy"] != peers.RESERVE_OCCUPY:  # the rule as the runtime ran it (verl: colocate)
        from runtime.peers import rule_options
        options += tuple(rule_options(run["policy"]).items())
    _, sim = simulate(RunSpec(run["policy"], run["eta"], batches=run["steps"],
                              batch_size=shape[0], options=options), wl, cost)
    if replay is not None:
        replay.update(replayed_load(sim, cost.train))
    by_tid = {r.tid: r for r in sim.ledger.requests}
    trained = sum(by_tid[t].length for b in sim.ledger.batches for t in b.tids)
    decoded = sum(i.decoded for i in sim.instances)
    wall = sim.now
    # the instrument's window: the batches after the run's warm-up steps, from the end of the
    # last warm-up batch's publish to the end of the last one's (as the runtime's metrics rows)
    w = run.get("warmup_steps", 0)
    ends = [b.t_published if math.isfinite(b.t_published) else b.t_trained
            for b in sim.ledger.batches]
    steady = None
    if len(ends) > w:
        t0 = ends[w - 1] if w else 0.0
        tokens = sum(by_tid[t].length for b in sim.ledger.batches[w:] for t in b.tids)
        steady = tokens / (ends[-1] - t0) if ends[-1] > t0 else None
    return {"wall_s": wall, "gen_tok_s": decoded / wall, "trained_tok_s": trained / wall,
            "steps_per_s": len(sim.ledger.batches) / wall, "steady_trained_tok_s": steady,
            "chunks": sum(len(b.chunks) for b in sim.ledger.batches)}


SIMS = ("sim", "sim_revised")  # the cost model as it was; revised (``cost_model``)
# the revised model without the engine's contention for the trainer (``rollout_slowdown``):
# what the term itself changes, simulated for the instrument's grids (``compared_rows``)
ONE_WAY = "sim_one_way"
# the revised model with that contention shaped by the engine's load (``train_load``)
LOADED = "sim_load"
# Out of sample (``--prior-fit``): each run simulated again with the terms another grid fitted
# (the committed results file a new grid replaces), in each revised variant: a run's
# ``prior`` holds them by these names, the results the fit as ``prior_fit``
PRIOR = "prior"
PRIOR_VARIANTS = ((LOADED, "load-shaped"), ("sim_revised", "busy flag"), (ONE_WAY, "no term"))
# the terms ``cost_model`` reads from a fit (section, keys): what a prior fit must hold
PRIOR_TERMS = (("decode_with_overlap", ("step_s", "per_request_s", "prefill_per_token_s")),
               ("train", ("fixed_s", "per_token_s")), ("sync_s", ()))
# the sections a fit holds where the grid measured them (null or left out where it did not:
# ``cost_model`` then simulates without them, as for a grid's own fit), and the numbers of
# each that ``cost_model`` reads; ``rollout_load``, ``rollout_load_n``: read where present
_CONTENDED = ("fixed_s", "per_token_s", "chunk_overhead_s", "rollout_slowdown")
PRIOR_OPTIONAL = (("chunk", ("chunk_overhead_s", "chunk_share")),
                  ("train_contended", _CONTENDED), ("train_load", _CONTENDED))


def simulate_prior(row: dict[str, Any], prior: dict[str, Any], wl: Any,
                   shape: tuple[int, int] = SHAPE) -> dict[str, dict[str, float]]:
    """One run simulated with another grid's fit (``prior``), in each revised variant that fit
    has (load-shaped only where it fitted a load shape)."""
    out = {"sim_revised": simulate_row(row, prior, wl, revised=True, shape=shape),
           ONE_WAY: simulate_row(row, prior, wl, revised=True, shape=shape, two_way=False)}
    if prior.get("train_load"):
        out[LOADED] = simulate_row(row, prior, wl, revised=True, shape=shape, load=True)
    return out


def read_prior(path: Path, bad: Any) -> dict[str, Any]:
    """The fit of a results file of this script (``--prior-fit``), checked before the grid
    runs (``bad``: one line, exit 2)."""
    results = read_json(path, "--prior-fit", "a results file of calibrate.py", bad)
    fit = results.get("fit") if isinstance(results, dict) else None
    if not isinstance(fit, dict):
        bad(f"--prior-fit {path}: no 'fit' object (a results file of calibrate.py, such as "
            f"docs/results/calibration.json)")
    for section, keys in PRIOR_TERMS:
        part = fit.get(section)
        if not isinstance(part, dict) or not part or not all(k in part for k in keys):
            bad(f"--prior-fit {path}: its fit has no {section!r} with "
                f"{', '.join(keys) or 'a refit pause'} (written by an older calibrate.py?)")
        for key in keys:  # finite and >= 0, as the optional sections' (a time per token...)
            if not _number(part[key]):
                bad(f"--prior-fit {path}: its fit's {section!r}: {key!r} must be a number >= 0, "
                    f"got {part[key]!r}")
    g = fit.get("train_slowdown")
    if not _number(g):
        bad(f"--prior-fit {path}: its fit has no 'train_slowdown' >= 0")
    for mode, pause in fit["sync_s"].items():
        if not _number(pause):
            bad(f"--prior-fit {path}: its fit's 'sync_s': {mode!r} must be a number >= 0 "
                f"(seconds), got {pause!r}")
    from reserve_occupy_sim.model.cost import LOAD_SHAPES

    for section, keys in PRIOR_OPTIONAL:
        part = fit.get(section)
        if part is None:
            continue
        if not isinstance(part, dict) or not part:
            bad(f"--prior-fit {path}: its fit's {section!r} must be null or an object with "
                f"{', '.join(keys)}, got {part!r}")
        for key in keys + tuple(k for k in ("rollout_load_n",) if k in part):
            if not _number(part.get(key)):
                got = repr(part[key]) if key in part else "nothing"
                bad(f"--prior-fit {path}: its fit's {section!r}: {key!r} must be a number >= 0, "
                    f"got {got}")
        if section == "chunk" and part["chunk_share"] > 1:
            bad(f"--prior-fit {path}: its fit's 'chunk': 'chunk_share' must be in [0, 1], got "
                f"{part['chunk_share']!r}")
        if "rollout_load" in part and part["rollout_load"] not in LOAD_SHAPES:
            bad(f"--prior-fit {path}: its fit's {section!r}: 'rollout_load' must be one of "
                f"{', '.join(LOAD_SHAPES)}, got {part['rollout_load']!r}")
    return fit


def _number(x: Any) -> bool:
    """A finite number >= 0 (not a bool): what the simulator's costs take (``cost_from_dict``)."""
    return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and x >= 0)


def add_sim_ratios(runs: list[dict[str, Any]]) -> None:
    """Each run's simulated figures (``sim``, ``sim_revised``) as a ratio to the simulated
    reference of its seed and eta (``sim_ratio``, ``sim_revised_ratio``; the measured
    ratios are ``peers_compare.add_ratios``')."""
    ref = {(r["seed"], r["eta"]): r for r in runs
           if (r["policy"], r["streaming"], r["refit"]) == peers.REF}
    for r in runs:
        base = ref.get((r["seed"], r["eta"]))
        for sim in SIMS:
            r[f"{sim}_ratio"] = {k: (r[sim][k] / base[sim][k] if base else None)
                                 for k in peers.RATIO_KEYS}


# ------------------------------------------------------------------------------ the page ----

def _keys(runs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys: list[tuple[Any, ...]] = []
    for r in runs:
        k = (r["eta"], r["policy"], r["streaming"], r["refit"])
        if k not in keys:
            keys.append(k)
    return keys


def table_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (eta, policy, streaming, refit): the means over the seeds of the measured
    and the simulated ratios, and the gap (simulated / measured - 1) of each."""
    out = []
    for key in _keys(results["runs"]):
        rs = [r for r in results["runs"]
              if (r["eta"], r["policy"], r["streaming"], r["refit"]) == key]
        row: dict[str, Any] = dict(zip(("eta", "policy", "streaming", "refit"), key))
        row["seeds"] = len(rs)
        for k in ("gen_tok_s", "trained_tok_s"):
            meas = peers._mean([r["ratio"][k] for r in rs])
            row[k] = {"measured": meas}
            for sim in SIMS:
                x = peers._mean([r[f"{sim}_ratio"][k] for r in rs])
                row[k][sim] = (x, x / meas - 1.0 if meas and x is not None else None)
        row["abs"] = (fmean(r["trained_tok_s"] for r in rs),
                      *(fmean(r[sim]["trained_tok_s"] for r in rs) for sim in SIMS))
        out.append(row)
    return out


def _within(rows: list[dict[str, Any]], sim: str) -> int:
    return sum(1 for r in rows if r["trained_tok_s"][sim][1] is not None
               and abs(r["trained_tok_s"][sim][1]) <= TARGET)


def _median_gap(rows: list[dict[str, Any]], sim: str) -> float:
    gaps = [abs(r["trained_tok_s"][sim][1]) for r in rows
            if r["trained_tok_s"][sim][1] is not None
            and (r["policy"], r["streaming"], r["refit"]) != peers.REF]
    return median(gaps) if gaps else math.nan


def _abs_gap(rows: list[dict[str, Any]], which: int) -> float:
    """Median over the rows of |simulated / measured trained tok/s - 1| (``which``: 1 as it
    was, 2 revised)."""
    return median(abs(r["abs"][which] / r["abs"][0] - 1) for r in rows)


def _spread(results: dict[str, Any], key: str = "ratio") -> float:
    """Median over the non-reference rows of |ratio of the first seed / of the second - 1|
    (``key``: ``ratio``, measured, or ``sim_ratio``, simulated)."""
    seeds, which = results["seeds"][:2], key
    by: dict[tuple[Any, ...], dict[int, float]] = {}
    for r in results["runs"]:
        if (r["policy"], r["streaming"], r["refit"]) != peers.REF and r["seed"] in seeds:
            key = (r["eta"], r["policy"], r["streaming"], r["refit"])
            by.setdefault(key, {})[r["seed"]] = r[which]["trained_tok_s"]
    xs = [abs(v[seeds[0]] / v[seeds[1]] - 1) for v in by.values() if len(v) == 2]
    return median(xs) if xs else math.nan


def _fit_lines(results: dict[str, Any]) -> list[str]:
    """The fitted terms' table."""
    fit = results["fit"]
    d, t, c, o = fit["decode"], fit["train"], fit["chunk"], fit["decode_with_overlap"]
    b = fit.get("train_contended")
    return [f"Fitted on this machine from {d['requests']} engine requests and "
             f"{t['steps']} whole-batch steps ({len(results['runs'])} runs, "
             f"{results['grid_wall_s']:.0f} s); the revised model adds the trainer's and the "
             f"engine's contention for the cores, each slowing the other, and ties prefill to "
             f"the per-request cost (see below):", "",
             "| term of the cost model | as it was | revised | fit |",
             "|---|---|---|---|",
             f"| decode step: `step_s` + `per_request_s` x running requests | "
             f"{d['step_s'] * 1e3:.3f} ms + {d['per_request_s'] * 1e3:.4f} ms x k | "
             f"{o['step_s'] * 1e3:.3f} ms + {o['per_request_s'] * 1e3:.4f} ms x k | "
             f"R² {d['r2']:.2f} / {o['r2']:.2f}, k {d['k_min']:.1f}-{d['k_max']:.1f} |",
             f"| prefill per prompt token `prefill_per_token_s` | "
             f"{d['prefill_per_token_s'] * 1e3:.4f} ms | {o['prefill_per_token_s'] * 1e3:.4f} ms"
             f" | (same fits) |",
             f"| decode slowdown while the trainer trains `train_slowdown` | (not in the model) "
             f"| {fit['train_slowdown']:.2f} ({fit['trainer_overlap_s']:.2f} s of decode lost "
             f"per s of training) | " + _share_text(fit) + " |",
             f"| train per trajectory token `per_token_s` + per step `fixed_s` | "
             f"{t['per_token_s'] * 1e3:.4f} ms + {t['fixed_s']:.3f} s | "
             + (f"{b['per_token_s'] * 1e3:.4f} ms + {b['fixed_s']:.3f} s alone | R² "
                f"{t['r2']:.2f} / {b['r2']:.2f} over {t['steps']} / {b['steps']} + "
                f"{b['streamed_steps']} steps |" if b else
                f"(same) | R² {t['r2']:.2f} over {t['steps']} steps |"),
             (f"| training slowdown while the engine decodes `rollout_slowdown` (a busy flag) "
              f"| (not in the model) | {b['rollout_slowdown']:.2f}"
              f"{' (the limit of the search)' if b['at_limit'] else ''} (the engine busy "
              f"{b['busy_min']:.0%}-{b['busy_max']:.0%} of a step) | (same fit) |" if b else
              f"| training slowdown while the engine decodes | not fitted: "
              f"{fit.get('train_contended_why', '')} | | |"),
             _load_line(fit),
             "| refit pause `sync_s` | " + ", ".join(
                 f"{m} {s:.3f} s" for m, s in fit["sync_s"].items()) + " | (same) | "
             "mean per mode |",
             ("| streaming chunk overhead `chunk_overhead_s` (`chunk_share` 1) | "
              f"{c['chunk_overhead_s']:.3f} s | "
              + (f"{b['chunk_overhead_s']:.3f} s alone" if b else "(same)")
              + f" | {c['chunks']} chunks in "
              f"{c['steps']} steps |"
              if c else "| streaming chunk overhead | not measured | | no streaming run |"),]


def _share_text(fit: dict[str, Any]) -> str:
    """The fit column of ``train_slowdown``: the requests' shares beside training, and what the
    fit of overlap seconds it replaced gave (``decode_additive``; a results file written before
    has neither)."""
    o, add = fit["decode_with_overlap"], fit.get("decode_additive")
    if fit.get("decode_shared_why"):
        return f"not identified, 0: {fit['decode_shared_why']}"
    if "share_mean" not in o:
        return "(same fit)"
    g = add["trainer_overlap_s"] if add else None
    return (f"(same fit) each request's share of its time beside training, "
            f"{o['share_min']:.0%}-{o['share_max']:.0%} (mean {o['share_mean']:.0%})"
            + (f"; fitted in overlap seconds instead, {g / (1 - g):.2f} ({g:.2f} s lost per "
               f"s), R² {add['r2']:.2f}" if add and g < 1 else ""))


def _shape_text(f: dict[str, Any]) -> str:
    """``s x min(1, n / N)`` or ``s x n / (n + K)``: a load-shaped fit's term."""
    s, k = f["rollout_slowdown"], f["rollout_load_n"]
    return (f"{s:.2f} x min(1, n / {k:g})" if f["rollout_load"] == "saturating" else
            f"{s:.2f} x n / (n + {k:g})")


def _load_line(fit: dict[str, Any]) -> str:
    """The fitted-terms table's row of the load-shaped term: the chosen shape, and every
    shape's rms residual beside the busy flag's."""
    best, shaped = fit.get("train_load"), fit.get("train_load_shapes") or {}
    name = ("| training slowdown shaped by the engine's load: `rollout_slowdown` x f(n), n "
            "running requests (`rollout_load`, `rollout_load_n`) | (not in the model) | ")
    if not best:
        return name + f"not fitted: {fit.get('train_load_why', '')} | |"
    b = fit.get("train_contended")
    steps = best["steps"] + best["streamed_steps"]

    def rms(f: dict[str, Any]) -> str:
        return f"{math.sqrt(f['sse'] / steps) * 1e3:.2f}"

    fits = ([("busy flag", b)] if b and "sse" in b else []) + [
        (k, f) for k, f in shaped.items() if "why" not in f]
    where = ("each step's measured load" if fit.get("load_profiles") == "measured" else
             "each step's busy share spread over the load of the simulator's replay of its run "
             "(the --raw file holds no request times)")
    return (name + f"{_shape_text(best)} ({best['rollout_load']}"
            + ("; the limit of the search" if best["at_limit"] or best["load_at_limit"] else "")
            + ") | " + where + "; rms residual " + " / ".join(rms(f) for _, f in fits)
            + " ms (" + " / ".join(k for k, _ in fits) + "): "
            + "; ".join(f"{k} {_shape_text(f)}" for k, f in fits if k != "busy flag") + " |")


TERM_NAMES = {"step_s": ("decode step", 1e3, "ms"), "per_request_s": ("decode per running "
              "request", 1e3, "ms"), "prefill_per_token_s": ("prefill per prompt token", 1e3,
              "ms"), "fixed_s": ("train per step", 1.0, "s"), "per_token_s": (
              "train per trajectory token", 1e3, "ms"), "chunk_overhead_s": (
              "streaming chunk overhead", 1.0, "s"), "train_slowdown": (
              "decode slowdown while training", 1.0, ""), "rollout_slowdown": (
              "training slowdown while decoding", 1.0, ""), "rollout_load_n": (
              "the load's scale", 1.0, "")}
# names of the terms whose key is another section's too
SECTION_NAMES = {("train_load", "rollout_slowdown"): "training slowdown at full load (shaped)"}


def _halves_lines(results: dict[str, Any]) -> list[str]:
    """The fitted terms of the model as it was, on the whole grid and on each half of its
    seeds (``fit_halves``), and how far the halves differ (|A / B - 1|)."""
    halves = results.get("fit_halves")
    if not halves:
        return []
    even, odd = halves
    seeds = sorted({r["seed"] for r in results["runs"]})
    lines = ["", f"The same fit on each half of the grid (half A: seeds "
                 f"{', '.join(map(str, seeds[0::2]))}; half B: seeds "
                 f"{', '.join(map(str, seeds[1::2]))}): two grids of half the size.", "",
             "| term | whole grid | half A | half B | halves differ by |",
             "|---|---|---|---|---|"]
    for section, key in FIT_TERMS:
        name, scale, unit = TERM_NAMES[key]
        name = SECTION_NAMES.get((section, key), name)
        fits = (results["fit"], even, odd)
        xs = [term(f, section, key) for f in fits]
        if any(x is None for x in xs):
            continue
        diff = f"{abs(xs[1] / xs[2] - 1):.0%}" if xs[2] else "n/a"
        shapes = [term(f, section, "rollout_load") for f in fits] \
            if section == "train_load" else [None] * 3
        lines.append(f"| {name} `{key}` | " + " | ".join(
            f"{x * scale:.4g}{(' ' + unit) if unit else ''}{f' ({k})' if k else ''}"
            for x, k in zip(xs, shapes)) + f" | {diff} |")
    return lines


def render(results: dict[str, Any]) -> str:
    """The generated part of docs/calibration.md, from the results file."""
    if "comparisons" in results:  # a grid the instrument ran (paired, with intervals)
        return render_compared(results)
    rows = table_rows(results)
    lines = _fit_lines(results) + [
             "",
             f"Within {TARGET:.0%} of the measured trained tok/s ratio: **{_within(rows, 'sim')}"
             f" of {len(rows)} rows** with the cost model as it was, **"
             f"{_within(rows, 'sim_revised')} of {len(rows)}** with the revised model; "
             f"median |gap| {_median_gap(rows, 'sim'):.0%} and "
             f"{_median_gap(rows, 'sim_revised'):.0%}; the absolute trained tok/s, simulated / "
             f"measured - 1: median |gap| {_abs_gap(rows, 1):.0%} and {_abs_gap(rows, 2):.0%}."
             + (f" Between two seeds a row's measured trained tok/s ratio moves by "
                f"{_spread(results):.0%}, its simulated one by "
                f"{_spread(results, 'sim_ratio'):.0%} (median over the rows of |seed a / "
                f"seed b - 1|; the seeds' answer lengths differ too)."
                if len(results["seeds"]) > 1 else " (One seed: no spread between seeds.)"),
             "",
             "| eta | policy | streaming | refit | seeds | trained tok/s measured (x ref) "
             "| simulated, as it was (x ref) | gap | revised (x ref) | gap "
             "| gen tok/s measured (x ref) | revised (x ref) | gap "
             "| trained tok/s measured / as it was / revised |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = " (ref)" if (r["policy"], r["streaming"], r["refit"]) == peers.REF else ""
        tr, gen = r["trained_tok_s"], r["gen_tok_s"]

        def pair(x: tuple[Any, Any]) -> str:
            return f"{_g(x[0], '.2f')} | {_g(x[1], '+.0%')}"

        lines.append(f"| {r['eta']} | {r['policy']}{ref} | {'on' if r['streaming'] else 'off'} "
                     f"| {r['refit']} | {r['seeds']} | {_g(tr['measured'], '.2f')} | "
                     f"{pair(tr['sim'])} | {pair(tr['sim_revised'])} | "
                     f"{_g(gen['measured'], '.2f')} | {pair(gen['sim_revised'])} | "
                     + " / ".join(f"{x:.0f}" for x in r["abs"]) + " |")
    return "\n".join(lines)


def doc_block(text: str) -> str:
    return between(text, BEGIN, END)


def write(results: dict[str, Any], results_path: Path = RESULTS, doc: Path = DOC) -> None:
    """The results file (each run's ``placements`` left out: the comparisons hold what they
    gave, the units each pair trained in another step) and the page."""
    kept = {**results, "runs": [{k: v for k, v in r.items() if k != "placements"}
                                for r in results["runs"]]}
    results_path.write_text(json.dumps(kept, indent=1) + "\n")
    splice(doc, BEGIN, END, render(results))


def compared_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The instrument's comparisons, each with the simulated ratio of its pairs (the median of
    simulated a / simulated b over the pairs, the steady-state window of each) for both cost
    models, its gap (simulated / measured - 1) and whether it is within ``TARGET`` or inside
    the measured interval."""
    by_run = {r["run"]: r for r in results["runs"]}
    runs = results["runs"]
    priors = [k for k, _ in PRIOR_VARIANTS if all(k in r.get(PRIOR, {}) for r in runs)]
    out = []
    for j, c in enumerate(results["comparisons"]):
        pairs = [p for p in results["pairs"] if p["comparison"] == j]
        row = dict(c)
        meas, lo, hi = c["trained"]["median"], c["trained"]["lo"], c["trained"]["hi"]

        def versus(get: Any) -> dict[str, Any]:
            xs = [get(by_run[p["a"]["run"]]) / get(by_run[p["b"]["run"]]) for p in pairs
                  if get(by_run[p["a"]["run"]]) and get(by_run[p["b"]["run"]])]
            x = median(xs) if xs else None
            gap = x / meas - 1.0 if x is not None and meas else None
            return {"ratio": x, "gap": gap, "within": gap is not None and (
                abs(gap) <= TARGET or (lo is not None and hi is not None and lo <= x <= hi))}

        for sim in SIMS + tuple(x for x in (ONE_WAY, LOADED) if all(x in r for r in runs)):
            row[sim] = versus(lambda r, sim=sim: r[sim]["steady_trained_tok_s"])
        if priors:
            row[PRIOR] = {k: versus(lambda r, k=k: r[PRIOR][k]["steady_trained_tok_s"])
                          for k in priors}
        out.append(row)
    return out


def render_compared(results: dict[str, Any]) -> str:
    """The page of a grid the instrument ran: the fit, then per comparison (the A/A rows
    first) the measured ratio with its interval and verdict beside the simulated ones: the
    model as it was, and revised with the engine's contention for the trainer as a busy flag
    (``sim_revised``), shaped by its load (``sim_load``, where fitted) and without it
    (``sim_one_way``, where simulated)."""
    rows = sorted(compared_rows(results), key=lambda c: (c["eta"], not c["aa"]))
    ins = results["instrument"]
    scored = [r for r in rows if not r["aa"]]
    peers_table = peers.render_compared(results).split("\n\n")[0]  # its method paragraph
    revised = [(k, name, short) for k, name, short in (
        (LOADED, "shaped by the engine's load", "load-shaped"),
        ("sim_revised", "as a busy flag", "busy flag"), (ONE_WAY, "without it", "no term"))
        if all(k in r for r in rows)]

    def count(k: str) -> str:
        return f"{sum(r[k]['within'] for r in scored)} of {len(scored)}"

    lines = _fit_lines(results) + _halves_lines(results) + [
        "", peers_table, "",
        f"Within {TARGET:.0%} of the measured trained tok/s ratio or inside its "
        f"{ins['level']:.0%} interval: **{count('sim')} rows** with the cost model as it was; "
        f"revised, with the engine's contention for the trainer (`rollout_slowdown`) "
        + ", ".join(f"{name} **{count(k)}**" for k, name, _ in revised) + ".",
        "",
        "| eta | policy | streaming | refit | against | pairs | trained tok/s measured "
        "[interval] | resolved | simulated, as it was | gap | "
        + " | ".join(f"revised, {short} | gap" for _, _, short in revised)
        + " | within (" + " / ".join(short for _, _, short in revised) + ") |",
        "|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(revised) + "---|"]
    for r in rows:
        t = r["trained"]
        sim = r["sim"]
        lines.append(
            f"| {r['eta']} | {'A/A: ' if r['aa'] else ''}{r['policy']} | "
            f"{'on' if r['streaming'] else 'off'} | {r['refit']} | "
            f"{'itself' if r['aa'] else r['against']} | {t['pairs']} | {peers._cell(t)} | "
            f"{'resolved' if t['resolved'] else 'not resolved'} | {_g(sim['ratio'], '.3f')} | "
            f"{_g(sim['gap'], '+.1%')} | "
            + " | ".join(f"{_g(r[k]['ratio'], '.3f')} | {_g(r[k]['gap'], '+.1%')}"
                         for k, _, _ in revised)
            + " | " + " / ".join('yes' if r[k]['within'] else 'no' for k, _, _ in revised)
            + " |")
    return "\n".join(lines + _prior_lines(results, rows))


def _prior_lines(results: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Out of sample (``--prior-fit``): the comparisons simulated with another grid's terms,
    each revised variant's ratio and gap, and how many are within ``TARGET`` or the interval."""
    if "prior_fit" not in results:
        return []
    prior = results["prior_fit"]
    head = (f"**Out of sample.** Each run simulated again with the terms fitted on another grid "
            f"(`--prior-fit`: `train_slowdown` {prior['train_slowdown']:.2f}, decode "
            f"{prior['decode_with_overlap']['step_s'] * 1e3:.2f} ms + "
            f"{prior['decode_with_overlap']['per_request_s'] * 1e3:.3f} ms x k, train "
            f"{prior['train']['per_token_s'] * 1e3:.4f} ms a token + "
            f"{prior['train']['fixed_s']:.3f} s a step)")
    if "prior_why" in results:
        return ["", head + f": not simulated ({results['prior_why']})."]
    variants = [(k, short) for k, short in PRIOR_VARIANTS if k in rows[0].get(PRIOR, {})]
    scored = [r for r in rows if not r["aa"]]
    counts = ", ".join(f"{short} **{sum(r[PRIOR][k]['within'] for r in scored)} of "
                       f"{len(scored)}**" for k, short in variants)
    lines = ["", head + f". Within {TARGET:.0%} of the measured ratio or inside its interval: "
             + counts + ".", "",
             "| eta | policy | streaming | against | trained tok/s measured [interval] | "
             + " | ".join(f"{short}, prior terms | gap" for _, short in variants) + " |",
             "|---|---|---|---|---|" + "---|---|" * len(variants)]
    for r in rows:
        if r["aa"]:
            continue
        lines.append(f"| {r['eta']} | {r['policy']} | {'on' if r['streaming'] else 'off'} | "
                     f"{r['against']} | {peers._cell(r['trained'])} | "
                     + " | ".join(f"{_g(r[PRIOR][k]['ratio'], '.3f')} | "
                                  f"{_g(r[PRIOR][k]['gap'], '+.1%')}" for k, _ in variants)
                     + " |")
    return lines


# ------------------------------------------------------------------------------ the runs ----

async def main(runs_grid: list[tuple[str, bool, str, int]], seeds: list[int], steps: int,
               med: float, sigma: float, engine: Any = None, raw: Path | None = None,
               warmup_steps: int = 1, order: str = "alternate", order_seed: int = 0,
               method: str = "sign", level: float = 0.9, pin: bool = False,
               comps: list[dict[str, Any]] | None = None, shape: tuple[int, int] = SHAPE,
               workload_name: str | None = None, prior: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """Measure the grid as bench-peers does (the instrument: pairs, alternating or crossover
    order, A/A rows, steady-state window; ``peers_compare.main``; ``comps``: the headline
    comparisons or, by default, every row of ``runs_grid`` against the reference) while timing
    every engine request, fit, simulate each run: the results file's content."""
    measured: dict[int, dict[str, Any]] = {}

    def on_row(row: dict[str, Any]) -> None:
        out = row["_out"]
        m = measure(row["_tail"].calls, _jsonl(out / "metrics.jsonl"),
                    _jsonl(out / "driver_notes.jsonl"), shape)
        m["refit"] = row["refit"]
        measured[row["run"]] = m

    t0 = time.perf_counter()
    compared = await peers.main(runs_grid, seeds, steps, med, sigma, engine=engine,
                                warmup_steps=warmup_steps, order=order, order_seed=order_seed,
                                method=method, level=level, pin=pin, tail_class=Timed,
                                on_row=on_row, comps=comps, shape=shape)
    ms = [measured[r["run"]] for r in compared["runs"]]
    wall = time.perf_counter() - t0
    if workload_name is not None:
        compared["workload"] = peers.workload_record(workload_name, shape, med, sigma, steps,
                                                     seeds)
    if raw is not None:  # what the fit reads, to fit again without the engine (--from-raw)
        raw.write_text(json.dumps({"steps": steps, "seeds": seeds, "median": med,
                                   "sigma": sigma, "grid_wall_s": wall, "compared": compared,
                                   "measured": ms, "shape": list(shape)}))
    return finish(compared, ms, steps, seeds, med, sigma, wall, shape, prior)


FIT_TERMS = (("decode", "step_s"), ("decode", "per_request_s"),
             ("decode", "prefill_per_token_s"), ("train", "fixed_s"), ("train", "per_token_s"),
             ("chunk", "chunk_overhead_s"), (None, "train_slowdown"),
             ("train_contended", "rollout_slowdown"), ("train_load", "rollout_slowdown"),
             ("train_load", "rollout_load_n"))


def fit_halves(runs: list[dict[str, Any]], measured: list[dict[str, Any]]
               ) -> list[dict[str, Any]] | None:
    """The fit again on each half of the grid (the runs of the seeds at even places of the
    sorted list, then at odd places): two independent grids of half the size, whose difference is the spread of each
    fitted term. None when a half cannot be fitted (one seed)."""
    seeds = sorted({r["seed"] for r in runs})
    halves = [set(seeds[0::2]), set(seeds[1::2])]
    out = []
    for half in halves:
        ms = [m for r, m in zip(runs, measured) if r["seed"] in half]
        try:
            out.append(fit_costs(ms))
        except FitError:
            return None
    return out


def term(fit: dict[str, Any], section: str | None, key: str) -> float | None:
    """One fitted term of ``fit_costs``' result (None where not measured)."""
    src = fit if section is None else fit.get(section)
    return None if src is None else src.get(key)


def finish(compared: dict[str, Any], measured: list[dict[str, Any]], steps: int,
           seeds: list[int], med: float, sigma: float, wall: float,
           shape: tuple[int, int] = SHAPE, prior: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    """Fit the runs' measurements, simulate each run with the fit: the results. ``prior``:
    another grid's fit, with which each run is simulated too (out of sample; a prior the
    grid cannot use, one without this grid's refit mode, is reported as ``prior_why``
    and the grid's own results are kept)."""
    runs = compared["runs"]
    fit = fit_costs(measured)
    # a --raw file of the calibrate.py before each step's load was recorded: the load from
    # the simulator's replay of each run (the revised model without the term)
    replay = not has_load(measured)
    fit["load_profiles"] = "replayed" if replay else "measured"
    max_tokens = peers.SETTINGS["rollout.max_tokens"]
    wls, replays = [], []
    for row, m in zip(runs, measured):
        wl = workload(row["seed"], m["prompts"], m["prompt_mean"],
                      max(64, 8 * (row["eta"] + 2) * shape[0] * steps), max_tokens, med, sigma,
                      shape[1])
        wls.append(wl)
        row["sim"] = simulate_row(row, fit, wl, shape=shape)
        row["sim_revised"] = simulate_row(row, fit, wl, revised=True, shape=shape)
        if fit.get("train_contended") or replay:
            rp: dict[str, Any] = {}
            row[ONE_WAY] = simulate_row(row, fit, wl, revised=True, shape=shape, two_way=False,
                                        replay=rp)
            replays.append(rp)
    if replay:
        measured = with_replayed_load(measured, replays)
        fit["train_load_shapes"], fit["train_load"], fit["train_load_why"] = \
            fit_load_shapes([s for m in measured for s in m["whole"]],
                            [s for m in measured for s in m["streamed"]])
    if fit["train_load"]:
        for row, wl in zip(runs, wls):
            row[LOADED] = simulate_row(row, fit, wl, revised=True, shape=shape, load=True)
    out_of_sample: dict[str, Any] = {}
    if prior is not None:
        try:
            priors = [simulate_prior(row, prior, wl, shape) for row, wl in zip(runs, wls)]
        except FitError as e:
            out_of_sample = {"prior_fit": prior, "prior_why": str(e)}
        else:
            for row, sims in zip(runs, priors):
                row[PRIOR] = sims
            out_of_sample = {"prior_fit": prior}
    return {"steps": steps, "seeds": seeds, "lognormal": {"median": med, "sigma": sigma},
            "shape": list(shape),
            "reference": dict(zip(("policy", "streaming", "refit"), peers.REF)),
            "grid_wall_s": round(wall, 1), "fit": fit,
            "fit_halves": fit_halves(runs, measured), **out_of_sample, **compared}


RAW_KEYS = {"steps": int, "seeds": list, "median": float, "sigma": float, "compared": dict,
            "measured": list}


def _is(kind: type) -> Any:
    """A check that a value is a ``kind`` (a bool is not an int, as in ``RAW_KEYS``)."""
    return lambda v: isinstance(v, kind) and (kind is bool or not isinstance(v, bool))


def _number_or_null(v: Any) -> bool:
    return v is None or isinstance(v, (int, float)) and not isinstance(v, bool)


def _list_of(ok: Any) -> Any:
    """A check that a value is a list whose every item passes ``ok``."""
    return lambda v: isinstance(v, list) and all(ok(x) for x in v)


# per pair, [this row's run, the baseline's]: read only where present (peers_compare._waits)
OPTIONAL_COMPARISON_KEYS: dict[str, tuple[Any, str]] = {
    k: (_list_of(lambda p: isinstance(p, list) and len(p) == 2
                 and all(_number_or_null(x) for x in p)),
        "list of [number or null, number or null]") for k in ("wait_s", "straggler_s")}


# What the page (``render``: ``compared_rows``, ``render_compared`` and peers_compare's table)
# reads of each of the raw file's comparisons, as peers_compare.summarize_pairs writes them:
# (check, what it must be). A summary (``trained``, ``gen``) is checked for the fields read
# of it; --interval/--level other than the grid's summarize its pairs again (resummarize).
COMPARISON_KEYS: dict[str, tuple[Any, str]] = {
    **{k: (_is(bool), "true or false") for k in ("aa", "streaming", "same_decisions")},
    "eta": (_is(int), "whole number"),
    **{k: (_is(str), "string") for k in ("policy", "refit", "against")},
    **{k: (_list_of(_is(int)), "list of whole numbers") for k in ("seeds", "diff")},
    "trained_tok_s": (_list_of(_number_or_null), "list of numbers or nulls"),
    "staleness_max": (_is(int), "whole number"),
    **{k: (_number_or_null, "number or null") for k in ("staleness_mean", "units_dropped")},
    **{k: (_is(dict), "object") for k in ("trained", "gen")},
}
_ENDS = {k: (_number_or_null, "number or null") for k in ("median", "lo", "hi")}
SUMMARY_KEYS: dict[str, dict[str, tuple[Any, str]]] = {
    "trained": {**_ENDS, "pairs": (_is(int), "whole number"),
                "resolved": (_is(bool), "true or false")},
    "gen": _ENDS}


def _comparison_error(j: int, c: Any) -> str | None:
    """What is wrong with the raw file's comparison ``j`` (``COMPARISON_KEYS``), or None."""
    if not isinstance(c, dict):
        return f"comparison {j} is not an object"
    for key, (ok, kind) in COMPARISON_KEYS.items():
        if key not in c or not ok(c[key]):
            return f"comparison {j}: {key!r} missing or not a {kind}"
    for key, (ok, kind) in OPTIONAL_COMPARISON_KEYS.items():
        if c.get(key) is not None and not ok(c[key]):
            return f"comparison {j}: {key!r} not a {kind}"
    for part, keys in SUMMARY_KEYS.items():
        for key, (ok, kind) in keys.items():
            if key not in c[part] or not ok(c[part][key]):
                return f"comparison {j}: {part!r}: {key!r} missing or not a {kind}"
    return None


def read_raw(path: Path, bad: Any) -> dict[str, Any]:
    """A ``--raw`` file, checked before anything is fitted (``bad``: one line, exit 2)."""
    dump = read_json(path, "--from-raw", "a JSON file of --raw", bad)
    if not isinstance(dump, dict):
        bad(f"--from-raw {path}: not a file of --raw (a JSON object expected)")
    for key, kind in RAW_KEYS.items():
        value = dump.get(key)
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value) if kind is float else
              isinstance(value, kind) and not isinstance(value, bool))
        if not ok:
            bad(f"--from-raw {path}: {key!r} missing or not a {kind.__name__} (a file of "
                f"--raw from this version of calibrate.py)")
    compared = dump["compared"]
    if not all(isinstance(compared.get(k), list) for k in ("runs", "pairs", "comparisons")) \
            or len(compared["runs"]) != len(dump["measured"]):
        bad(f"--from-raw {path}: its runs and measurements do not match")
    for j, c in enumerate(compared["comparisons"]):
        why = _comparison_error(j, c)
        if why is not None:  # before: a KeyError in render, after the fit (exit 1)
            bad(f"--from-raw {path}: {why} (a file of --raw from this version of "
                f"calibrate.py)")
    return dump


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog="calibrate.py", description=__doc__.split("\n\n")[0])
    peers.add_grid_options(parser, steps=8)
    peers.add_workload_options(parser)
    parser.add_argument("--write", action="store_true",
                        help=f"write {RESULTS.relative_to(ROOT)} and the tables of "
                             f"{DOC.relative_to(ROOT)}")
    parser.add_argument("--raw", type=Path, default=None,
                        help="also write what the fit reads (every request's timing) here")
    parser.add_argument("--from-raw", type=Path, default=None,
                        help="fit and simulate again from a --raw file, without the engine")
    parser.add_argument("--prior-fit", type=Path, default=None,
                        help="a results file of an earlier grid (make calibrate passes the "
                             "committed docs/results/calibration.json, read before it is "
                             "replaced): each run is also simulated with its fitted terms, "
                             "out of sample, and the page shows those ratios beside")
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    peers.check_write(args, _bad, BEGIN, END)
    args.prior = read_prior(args.prior_fit, _bad) if args.prior_fit is not None else None
    if args.from_raw is not None:
        if args.raw is not None:
            _bad("--raw and --from-raw: one or the other (--from-raw runs nothing)")
        args.dump = read_raw(args.from_raw, _bad)
        return args
    if args.workload == "filtering":  # (its simulation has no reward filtering here yet)
        _bad("--workload filtering is peers_compare.py's: calibrate fits and simulates the "
             "workloads without groups without gradient (bench, separating)")
    peers.apply_workload(args, raw, _bad)  # the grid's checks are peers_compare's (exit 2)
    if args.raw is not None:
        peers._writable(args.raw, "--raw", _bad)
    if args.steps < 3:  # (the reference, whole-batch, runs in every grid: the train fit's)
        _bad("--steps must be >= 3 (the train fit needs steps of different sizes)")
    return args


def _bad(msg: str) -> None:
    print(f"calibrate: {msg}", file=sys.stderr)
    raise SystemExit(2)


if __name__ == "__main__":
    args = parse()
    if args.from_raw is not None:
        dump = args.dump
        try:
            compared = peers.resummarize(dump["compared"], args.interval, args.level)
            results = finish(compared, dump["measured"], dump["steps"], dump["seeds"],
                             dump["median"], dump["sigma"], dump.get("grid_wall_s", 0.0),
                             tuple(dump.get("shape", SHAPE)), prior=args.prior)
        except FitError as e:
            _bad(f"--from-raw {args.from_raw}: {e}")
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as e:
            _bad(f"--from-raw {args.from_raw}: not a file of --raw ({e.__class__.__name__}: "
                 f"{e})")
    else:
        results = asyncio.run(main(args.grid, args.seed_list, args.steps, args.median,
                                   args.sigma, raw=args.raw, warmup_steps=args.warmup_steps,
                                   order=args.order, order_seed=args.order_seed,
                                   method=args.interval, level=args.level, pin=args.pin,
                                   comps=peers.headline() if args.headline else None,
                                   shape=args.shape, workload_name=args.workload,
                                   prior=args.prior))
    print(render(results))
    if args.write:
        write(results, args.results, args.doc)
