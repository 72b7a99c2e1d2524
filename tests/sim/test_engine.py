"""The closed-form engine against a step-by-step reference."""

from __future__ import annotations

import math

import pytest

from reserve_occupy_sim.model.cost import RolloutCost
from reserve_occupy_sim.model.engine import Instance, Request

COST = RolloutCost(floor_s=0.008, step_s=0.003, per_request_s=2e-4, per_ctx_token_s=5e-7,
                   prefill_per_token_s=0.0)


def stepwise(lengths, prompt, cost):
    """Decode one step at a time: completion time of each request (reference)."""
    left = list(lengths)
    ctx = [prompt] * len(lengths)
    t, done = 0.0, [None] * len(lengths)
    while any(d is None for d in done):
        running = [i for i, d in enumerate(done) if d is None]
        t += cost.step_time(len(running), sum(ctx[i] for i in running))
        for i in running:
            left[i] -= 1
            ctx[i] += 1
            if left[i] == 0:
                done[i] = t
    return done


def closed_form(lengths, prompt, cost):
    inst = Instance(0, cost, capacity=len(lengths))
    for i, n in enumerate(lengths):
        inst.join(Request(i, None, i, n, prompt), 0.0, i)
    out = {}
    while inst.k:
        t = inst.next_event()
        inst.advance(t)
        for r in inst.finish_due(True):
            out[r.tid] = t
    return [out[i] for i in range(len(lengths))], inst


@pytest.mark.parametrize("lengths", [[50, 50, 50], [10, 400, 900, 2000], [1, 3000]])
def test_completion_times_match_stepping(lengths):
    ref = stepwise(lengths, 100, COST)
    ours, inst = closed_form(lengths, 100, COST)
    for r, o in zip(ref, ours):
        # continuous progress: within one step's duration of the discrete schedule
        assert abs(r - o) <= COST.step_time(len(lengths), 100 * len(lengths) + 3 * 2000)
    assert inst.decoded == pytest.approx(sum(lengths))


def test_time_and_steps_are_inverse():
    inst = Instance(0, COST, capacity=64)
    for i in range(37):
        inst.join(Request(i, None, i, 10_000, 500 + 40 * i), 0.0, i)
    for u in (0.5, 3.0, 17.25, 400.0, 5000.0):
        assert inst.steps_in(inst.time_for(u)) == pytest.approx(u, rel=1e-9)


def test_floor_then_linear_piece():
    # one request: the floor dominates until the context grows past (F - a - b) / c
    inst = Instance(0, COST, capacity=1)
    inst.join(Request(0, None, 0, 100_000, 0), 0.0, 0)
    x0 = (COST.floor_s - COST.step_s - COST.per_request_s) / COST.per_ctx_token_s
    assert inst.time_for(x0) == pytest.approx(COST.floor_s * x0)
    assert inst.time_for(2 * x0) > COST.floor_s * 2 * x0


def test_pause_stops_decoding_and_resume_reprefills():
    cost = RolloutCost(floor_s=0.01, step_s=0.0, per_request_s=0.0, per_ctx_token_s=0.0,
                       prefill_per_token_s=1e-3)
    inst = Instance(0, cost, capacity=2)
    inst.join(Request(0, None, 0, 1000, 100), 0.0, 0)
    assert inst.stall == pytest.approx(0.1)  # prefill of the prompt
    inst.advance(1.1)
    assert inst.progress == pytest.approx(100)
    inst.pause()
    inst.advance(5.0)
    assert inst.progress == pytest.approx(100) and math.isinf(inst.next_event())
    inst.resume(reprefill=True)
    assert inst.stall == pytest.approx(1e-3 * 200)  # prompt + 100 generated tokens
    assert inst.next_event() == pytest.approx(5.0 + 0.2 + 900 * 0.01)


def test_a_slowed_instance_decodes_at_the_slowed_speed():
    """``Instance.slow`` (the trainer's contention, ``RolloutCost.train_slowdown``) scales every
    decode step: the same progress takes ``slow`` times as long."""
    fast, slowed = Instance(0, COST, capacity=8), Instance(0, COST, capacity=8)
    for inst in (fast, slowed):
        for i in range(5):
            inst.join(Request(i, None, i, 10_000, 300), 0.0, i)
    slowed.slow = 3.0
    for u in (1.0, 40.0, 900.0):
        assert slowed.time_for(u) == pytest.approx(3.0 * fast.time_for(u))
        assert slowed.steps_in(fast.time_for(u)) == pytest.approx(u / 3.0, rel=1e-6)


def test_the_trainer_slows_decoding_only_while_it_trains():
    """With ``train_slowdown`` the decode steps that overlap a training step are slower, and
    nothing else changes; 0 (every preset) gives the run without the term."""
    from dataclasses import replace

    from reserve_occupy_sim.model.cost import TOY
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate
    from sim_helpers import run_policy

    wl = generate(3, MathReasoningShape(groups=64, group_size=4, response_median=300,
                                        max_response=2000, min_response=10))
    zero = replace(TOY, rollout=replace(TOY.rollout, train_slowdown=0.0))
    slowed = replace(TOY, rollout=replace(TOY.rollout, train_slowdown=1.0))
    base = run_policy(("reserve_occupy", 1), wl, TOY)
    same = run_policy(("reserve_occupy", 1), wl, zero)
    slow = run_policy(("reserve_occupy", 1), wl, slowed)
    assert same.now == base.now and same.events == base.events
    assert slow.now > base.now
    assert all(i.slow == 1.0 for i in slow.instances)  # the run ended idle: full speed again
