"""The rollout's contention for the trainer shaped by the engine's load (``TrainCost``'s
``rollout_load`` and ``rollout_load_n``): with ``n`` requests running, training runs at
``1 / (1 + s * f(n))`` of its speed. Every step is checked against a hand integration of
``f(n(t))`` over its training span, ``n(t)`` counted from the requests' own start and end
times (not from the simulator's re-timing), so a simulator that re-times the trainer only when
the engine starts or stops decoding (the busy flag's edges) fails it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reserve_occupy_sim.model.cost import TOY, CostError, cost_from_dict, load_share
from reserve_occupy_sim.model.workload import MathReasoningShape, generate
from sim_helpers import run_policy

WL = generate(5, MathReasoningShape(groups=96, group_size=4, response_median=300,
                                    max_response=2000, min_response=10))


def _with(s: float, shape: str = "saturating", scale: float = 1.0):
    return replace(TOY, train=replace(TOY.train, rollout_slowdown=s, rollout_load=shape,
                                      rollout_load_n=scale))


def _load_steps(sim) -> list[tuple[float, float, int]]:
    """The running requests as a step function: (from, to, n) pieces between consecutive
    starts and ends of the requests' times on an instance."""
    edges: list[tuple[float, int]] = []
    for g in sim.groups:
        for r in g.requests + g.surplus:
            if r.t_start == r.t_start:  # started (not NaN)
                edges.append((r.t_start, +1))
                edges.append((r.t_end if r.t_end == r.t_end else float("inf"), -1))
    edges.sort()
    out, n, t = [], 0, 0.0
    for when, d in edges:
        if when > t:
            out.append((t, when, n))
        n, t = n + d, max(t, when)
    out.append((t, float("inf"), n))
    return out


def test_the_load_share_by_hand():
    assert [load_share("saturating", 4.0, n) for n in (0, 1, 2, 4, 9)] == [0, .25, .5, 1, 1]
    assert [load_share("hyperbolic", 3.0, n) for n in (0, 1, 3, 9)] == [0, .25, .5, .75]
    # the busy flag: saturating at 1 (the default), or at anything below, or hyperbolic at 0
    for shape, scale in (("saturating", 1.0), ("saturating", 0.0), ("hyperbolic", 0.0)):
        assert [load_share(shape, scale, n) for n in (0, 1, 7)] == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("s,shape,scale", [(2.0, "saturating", 12.0), (1.5, "hyperbolic", 4.0),
                                           (3.0, "saturating", 30.0)])
def test_each_step_does_its_work_at_the_speed_its_load_allows(s, shape, scale):
    """Whole-batch trainer at eta 1 on TOY (2 instances of 8 slots, so 0 to 16 requests run
    while a step trains): for every step, the sum over the pieces of its training span of
    ``dt / (1 + s * f(n))`` is its work alone (``TrainCost.batch_time``). Tolerance, absolute:
    the span's end is the step's start plus the re-timed pieces, each a float64 sum of terms
    of magnitude ``now`` (about 2e-16 x ``now`` each); a step is re-timed at most a few hundred
    times (once per request joining or leaving), so 1024 ulps of ``now`` bound it."""
    cost = _with(s, shape, scale)
    sim = run_policy(("reserve_occupy", 1), WL, cost)
    pieces = _load_steps(sim)
    by_tid = {r.tid: r for r in sim.ledger.requests}
    levels_seen = 0
    for b in sim.ledger.batches:
        done, levels = 0.0, set()
        for a, z, n in pieces:
            lo, hi = max(a, b.t_consume), min(z, b.t_trained)
            if hi > lo:
                done += (hi - lo) / (1.0 + s * load_share(shape, scale, n))
                levels.add(n)
        work = TOY.train.batch_time([by_tid[t].prompt + by_tid[t].length for t in b.tids])
        assert done == pytest.approx(work, rel=0, abs=1024 * 2.2e-16 * sim.now)
        levels_seen += len({load_share(shape, scale, n) for n in levels} - {0.0, 1.0}) > 1
    assert levels_seen, "no step trained through two loads below saturation: checks nothing"


def test_a_busy_flag_shape_is_the_busy_flag_event_for_event():
    """The default shape (saturating at 1), saturating below 1 and hyperbolic at 0 all give
    ``f = 1`` for every running load: one run, event for event; a shape below the flag trains
    faster than the flag and slower than no term."""
    flag = run_policy(("reserve_occupy", 1), WL, _with(1.0))
    for shape, scale in (("saturating", 0.5), ("hyperbolic", 0.0)):
        other = run_policy(("reserve_occupy", 1), WL, _with(1.0, shape, scale))
        assert (other.now, other.events) == (flag.now, flag.events)
    shaped = run_policy(("reserve_occupy", 1), WL, _with(1.0, "saturating", 12.0))
    none = run_policy(("reserve_occupy", 1), WL, TOY)
    trained = [sum(b.t_trained - b.t_consume for b in r.ledger.batches)
               for r in (none, shaped, flag)]
    assert trained[0] < trained[1] < trained[2]
    assert run_policy(("reserve_occupy", 1), WL, _with(0.0, "hyperbolic", 5.0)).events \
        == none.events


def test_a_cost_file_names_a_shape_it_does_not_know():
    data = {"preset": "toy", "train": {"rollout_slowdown": 0.5, "rollout_load": "hyperbolic",
                                       "rollout_load_n": 6}}
    cost = cost_from_dict(data)
    assert (cost.train.rollout_load, cost.train.rollout_load_n) == ("hyperbolic", 6.0)
    with pytest.raises(CostError, match=r"train\.rollout_load.*saturating, hyperbolic"):
        cost_from_dict({**data, "train": {"rollout_load": "linear"}})
    with pytest.raises(CostError, match=r"train\.rollout_load_n.*>= 0"):
        cost_from_dict({**data, "train": {"rollout_load_n": -1}})
