"""The rollout's contention for the trainer (``TrainCost.rollout_slowdown``): training runs at
``1 / (1 + s)`` of its speed while any instance decodes. Checked against a hand integration of
the engine's busy time over each training step, computed from the requests' own start and end
times (not from the simulator's re-timing)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reserve_occupy_sim.model.cost import TOY
from reserve_occupy_sim.model.workload import MathReasoningShape, generate
from sim_helpers import run_policy

WL = generate(5, MathReasoningShape(groups=96, group_size=4, response_median=300,
                                    max_response=2000, min_response=10))


def _with(s: float):
    return replace(TOY, train=replace(TOY.train, rollout_slowdown=s))


def _busy(sim) -> list[tuple[float, float]]:
    """The union of the intervals during which some request was in an instance."""
    spans = sorted((r.t_start, r.t_end) for g in sim.groups for r in g.requests + g.surplus
                   if r.t_start == r.t_start and r.t_end == r.t_end and r.t_end > r.t_start)
    out: list[list[float]] = []
    for a, b in spans:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _overlap(t0: float, t1: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(t1, b) - max(t0, a)) for a, b in spans)


@pytest.mark.parametrize("s", [1.0, 2.0, 3.0])
def test_each_step_does_its_work_at_the_stretched_speed_while_the_engine_decodes(s):
    """Whole-batch trainer at eta 1 (the engine decodes during most steps, not all of each):
    for every step, ``busy / (1 + s) + idle`` over its training span is its work alone
    (``TrainCost.batch_time``). Tolerance, absolute: the span's end is the step's start plus a
    few re-timed pieces, each a float64 sum of terms of magnitude ``now`` (about 2e-16 x
    ``now`` each); 64 such ulps of ``now`` bound a step re-timed a few dozen times."""
    sim = run_policy(("reserve_occupy", 1), WL, _with(s))
    busy = _busy(sim)
    by_tid = {r.tid: r for r in sim.ledger.requests}
    stretched = 0
    for b in sim.ledger.batches:
        span = b.t_trained - b.t_consume
        on = _overlap(b.t_consume, b.t_trained, busy)
        work = TOY.train.batch_time([by_tid[t].prompt + by_tid[t].length for t in b.tids])
        ulps = 64 * 2.2e-16 * sim.now
        assert on / (1 + s) + (span - on) == pytest.approx(work, rel=0, abs=ulps)
        stretched += 0 < on < span
    assert stretched, "no step had the engine decoding for only part of it: the test checks nothing"


def test_zero_is_the_run_without_the_term_and_eta_0_trains_alone():
    """0 (every preset) gives the run without the term, event for event; at eta 0 the engine
    is idle while the trainer trains, so the term changes nothing either."""
    base = run_policy(("reserve_occupy", 1), WL, TOY)
    zero = run_policy(("reserve_occupy", 1), WL, _with(0.0))
    assert (zero.now, zero.events) == (base.now, base.events)
    slowed = run_policy(("reserve_occupy", 1), WL, _with(1.0))
    assert slowed.now > base.now
    eta0 = run_policy(("reserve_occupy", 0), WL, TOY)
    eta0_slowed = run_policy(("reserve_occupy", 0), WL, _with(1.0))
    assert (eta0_slowed.now, eta0_slowed.events) == (eta0.now, eta0.events)
