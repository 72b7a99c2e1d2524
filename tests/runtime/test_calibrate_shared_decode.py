"""bench/calibrate.py's decode fit with the trainer's contention for the cores on the requests'
timeline (``fit_decode_shared``, the simulator's ``RolloutCost.train_slowdown``): a request
decodes at ``1 - g`` of its speed while the trainer trains, so its time in the engine is its
work alone over ``1 - g * phi``, ``phi`` the share of that time beside training.

The requests below are laid on a clock with training spans and their times in the engine
integrated exactly (``_timeline``), so the fit must return the costs they were built with; and
with requests held in the engine longer or shorter for a reason other than training (a queue:
the same work at the same share of time beside training), the fit of overlap seconds that
``fit_costs`` used before (``fit_decode(..., with_training=True)``, its regressor ``phi * d``
a part of the time ``d`` it explains) credits the training with the delay, and this one does
not."""

from __future__ import annotations

import pytest

from .helpers import load_bench

A, B = 7e-4, 9e-5  # step_s, per_request_s (= prefill_per_token_s, tied)
TRAINING = [(0.5, 1.3), (2.0, 2.4), (3.1, 4.6), (5.0, 5.2), (6.0, 7.5), (9.0, 9.9)]


def _bench():
    return load_bench("calibrate")


def _time_in_engine(t0: float, work: float, g: float) -> float:
    """Seconds from ``t0`` until ``work`` seconds of decoding alone are done, at speed 1 with
    the trainer idle and ``1 - g`` during the ``TRAINING`` spans (piecewise exact)."""
    t, left = t0, work
    for a, b in sorted(TRAINING) + [(float("inf"), float("inf"))]:
        if b <= t:
            continue
        if a > t:  # idle until a
            if left <= a - t:
                return t + left - t0
            left -= a - t
            t = a
        if b == float("inf"):
            break
        span = b - t  # training until b
        if left <= span * (1 - g):
            return t + left / (1 - g) - t0
        left -= span * (1 - g)
        t = b
    return t + left - t0


def _overlap(t0: float, t1: float) -> float:
    return sum(max(0.0, min(t1, b) - max(t0, a)) for a, b in TRAINING)


def _timeline(g: float, n: int = 120):
    """``request_features`` rows of ``n`` requests started over [0, 10] s (every one's prompt,
    tokens and mean concurrency known), their times in the engine from ``_time_in_engine``."""
    rows = []
    for i in range(n):
        t0 = 10.0 * i / n
        prompt, tokens, k = 4 + i % 5, 1 + (37 * i) % 96, 1.0 + (11 * i) % 60
        work = B * prompt + tokens * (A + B * k)
        d = _time_in_engine(t0, work, g)
        rows.append({"d": d, "P": prompt, "n": tokens, "k": k, "train": _overlap(t0, t0 + d)})
    return rows


def _queued(rows):
    """Each request twice more, held 40 % longer and 40 % shorter at the same share of its time
    beside training (``train = phi * d``): what a queue or the driver adds, not training."""
    out = list(rows)
    for r in rows:
        phi = r["train"] / r["d"]
        for f in (1.4, 0.6):
            out.append({**r, "d": r["d"] * f, "train": phi * r["d"] * f})
    return out


@pytest.mark.parametrize("g", [0.0, 0.16, 0.5])
def test_the_shared_decode_fit_recovers_known_costs_from_a_timeline(g):
    """``g`` on the search's grid (0.005 steps): the exact costs give zero error there, so the
    fit returns them; the tolerance is least squares' round-off in float64 over 120 rows."""
    fit = _bench().fit_decode_shared(_timeline(g))
    assert fit["trainer_overlap_s"] == pytest.approx(g, abs=1e-12)
    assert fit["step_s"] == pytest.approx(A, rel=1e-9)
    assert fit["per_request_s"] == pytest.approx(B, rel=1e-9)
    assert fit["prefill_per_token_s"] == fit["per_request_s"]
    assert fit["share_min"] == 0.0 and fit["share_max"] > 0.9 and not fit["at_limit"]


def _measured(rows):
    """One run's ``measure`` output around these requests (whole-batch steps enough for the
    train fit; too few for the engine's contention for the trainer, which is then not fitted)."""
    return [{"requests": rows, "whole": [(900, 0.14), (1300, 0.19), (1700, 0.24)],
             "streamed": [], "syncs": [0.04, 0.04, 0.04], "refit": "keep", "prompts": {},
             "prompt_mean": 4.0}]


@pytest.mark.parametrize("g", [0.16, 0.5])
def test_fit_costs_does_not_credit_training_with_time_spent_elsewhere(g):
    """With the queued copies the pairs' means are still the timeline's, and the shared fit's
    regressors are the same within each triple: at the true ``g`` it fits the means exactly,
    and any other ``g`` misses them, so ``train_slowdown`` is ``g / (1 - g)`` again. (On the
    code before it, ``fit_costs`` fitted overlap seconds: ``trainer_overlap_s`` 0.373 for 0.16
    and 0.625 for 0.5, ``train_slowdown`` 0.596 for 0.190 and 1.666 for 1.)"""
    fit = _bench().fit_costs(_measured(_queued(_timeline(g))))
    assert fit["trainer_overlap_s"] == pytest.approx(g, abs=1e-12)
    assert fit["train_slowdown"] == pytest.approx(g / (1 - g), rel=1e-12)
    assert fit["decode_with_overlap"]["step_s"] == pytest.approx(A, rel=1e-9)
    assert fit["decode_with_overlap"]["per_request_s"] == pytest.approx(B, rel=1e-9)
    # the fit of overlap seconds, kept beside it for the page, is the one that is misled
    assert fit["decode_additive"]["trainer_overlap_s"] > g + 0.05


def test_a_share_the_requests_cannot_identify_is_refused():
    bench = _bench()
    flat = [{**r, "train": 0.5 * r["d"]} for r in _timeline(0.0)]
    with pytest.raises(bench.FitError, match="hardly varied"):
        bench.fit_decode_shared(flat)
    with pytest.raises(bench.FitError, match="at least 8"):
        bench.fit_decode_shared(_timeline(0.2)[:5])


def test_fit_costs_without_requests_beside_training_keeps_decode_unslowed_and_says_why():
    """No request overlapped training (a grid whose steps never met the engine): the revised
    decode is the tied fit alone, ``train_slowdown`` 0, and the page names why."""
    bench = _bench()
    alone = [{**r, "train": 0.0} for r in _timeline(0.0)]
    fit = bench.fit_costs(_measured(alone))
    assert fit["train_slowdown"] == 0.0 and "hardly varied" in fit["decode_shared_why"]
    assert fit["decode_with_overlap"]["step_s"] == pytest.approx(A, rel=1e-9)
    assert bench._share_text(fit).startswith("not identified, 0: cannot fit decode time")
