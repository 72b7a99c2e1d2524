"""bench/calibrate.py's engine-contention term shaped by the engine's load: ``measure`` records
each step's load profile (the share of its training time at each number of running requests),
``fit_train_contended`` fits the slowdown and the shape's scale jointly (the simulator's
``TrainCost.rollout_load``/``rollout_load_n``), ``fit_load_shapes`` keeps the shape of the
smaller residual, and a --raw file without profiles gets them from the simulator's replay.
Hand-computed inputs, exact answers."""

from __future__ import annotations

import pytest

from reserve_occupy_sim.model.cost import load_share

from .helpers import load_bench


def _bench():
    return load_bench("calibrate")


# (tokens or chunks+tokens, profile) of steps whose loads vary: idle, light, heavy, mixed
PROFILES = ([], [[2, 0.5]], [[4, 0.25], [40, 0.75]], [[64, 1.0]], [[1, 0.2], [8, 0.6]],
            [[16, 0.9]], [[3, 1.0]], [[24, 0.5], [48, 0.5]], [[6, 0.4]], [[12, 1.0]])


def _steps(fixed, per_token, overhead, slow, shape, scale):
    """Whole-batch and streaming steps of known costs under the load-shaped term."""
    def w(p):
        return sum(x * load_share(shape, scale, n) for n, x in p)

    def busy(p):
        return sum(x for _, x in p)

    whole = [(t, (fixed + per_token * t) * (1 + slow * w(p)), busy(p), p)
             for t, p in zip((900, 1300, 1700, 2100, 2500, 1100), PROFILES[:6])]
    streamed = [(n, t, (overhead * n + per_token * t) * (1 + slow * w(p)), busy(p), p)
                for (n, t), p in zip(((1, 300), (3, 900), (2, 700), (6, 1500)), PROFILES[6:])]
    return whole, streamed


@pytest.mark.parametrize("shape,scale,slow", [("saturating", 12.0, 0.8),
                                              ("saturating", 40.0, 1.25),
                                              ("hyperbolic", 6.0, 2.0)])
def test_the_load_shaped_fit_recovers_known_costs(shape, scale, slow):
    """On the search's grids (slowdown by 0.01, the scale's values) the exact costs give zero
    error, so the fit returns them: the tolerance is least squares' round-off in float64 over
    ten rows."""
    bench = _bench()
    fit = bench.fit_train_contended(*_steps(0.03, 1.2e-4, 0.008, slow, shape, scale), shape)
    assert (fit["rollout_load"], fit["rollout_load_n"]) == (shape, scale)
    assert fit["rollout_slowdown"] == pytest.approx(slow, abs=1e-12)
    assert fit["fixed_s"] == pytest.approx(0.03, rel=1e-9)
    assert fit["per_token_s"] == pytest.approx(1.2e-4, rel=1e-9)
    assert fit["chunk_overhead_s"] == pytest.approx(0.008, rel=1e-9)
    assert fit["sse"] == pytest.approx(0.0, abs=1e-20)
    shaped, best, why = bench.fit_load_shapes(*_steps(0.03, 1.2e-4, 0.008, slow, shape, scale))
    assert best["rollout_load"] == shape and why == ""  # the other shape's error is larger
    assert all(f["sse"] >= best["sse"] for f in shaped.values())


def test_the_busy_flag_is_the_shaped_fit_at_one_request():
    """Steps made with the busy flag: the saturating shape finds a scale of 1 (the flag) and
    the flag's own fit (no shape) the same slowdown."""
    bench = _bench()
    whole, streamed = _steps(0.03, 1.2e-4, 0.008, 0.5, "saturating", 1.0)
    assert bench.fit_train_contended(whole, streamed, "saturating")["rollout_load_n"] == 1.0
    flag = bench.fit_train_contended(whole, streamed)
    assert flag["rollout_slowdown"] == pytest.approx(0.5, abs=1e-12)
    assert (flag["rollout_load"], flag["rollout_load_n"]) == ("saturating", 1.0)


def test_a_shape_the_steps_cannot_identify_is_refused():
    bench = _bench()
    whole, streamed = _steps(0.03, 1.2e-4, 0.008, 0.5, "saturating", 12.0)
    # the same load whenever busy: the slowdown and the scale trade off
    same = [(t, s, b, [[5, b]] if b else []) for t, s, b, _ in whole]
    same_streamed = [(n, t, s, b, [[5, b]] if b else []) for n, t, s, b, _ in streamed]
    with pytest.raises(bench.FitError, match="load during training hardly varied"):
        bench.fit_train_contended(same, same_streamed, "saturating")
    with pytest.raises(bench.FitError, match="no step recorded the engine's load"):
        bench.fit_train_contended([s[:3] for s in whole], [s[:4] for s in streamed],
                                  "hyperbolic")
    with pytest.raises(bench.FitError, match="unknown shape"):
        bench.fit_train_contended(whole, streamed, "linear")
    shaped, best, why = bench.fit_load_shapes([s[:3] for s in whole], [s[:4] for s in streamed])
    assert best is None and "no step recorded the engine's load" in why
    assert set(shaped) == {"saturating", "hyperbolic"}


def test_measure_records_each_step_s_load_profile():
    """The engine's requests over [0, 2] and [0.5, 1.5] (the requests' clock is the run's
    here: the one unit's occupy note is written when its last request ends); step 1 trains
    over [1, 3]: two requests over [1, 1.5], one over [1.5, 2], none over [2, 3]; step 2 over
    [5, 6] with the engine idle."""
    bench = _bench()
    calls = [bench.Call("g0-c0-s0", 0.0, 2.0, 4, 10), bench.Call("g1-c0-s0", 0.5, 1.5, 4, 5)]
    rows = [{"time_s": 3.5, "sync_s": 0.5, "train_s": 2.0, "stream_s": 0.0,
             "tokens_trained": 15},
            {"time_s": 6.5, "sync_s": 0.5, "train_s": 1.0, "stream_s": 0.0,
             "tokens_trained": 30}]
    notes = [{"event": "occupy", "unit": "g0", "t": 2.0}, {"event": "occupy", "unit": "g1",
                                                             "t": 1.5}]
    m = bench.measure(calls, rows, notes, shape=(1, 1))
    assert m["whole"][0][3] == [[1, 0.25], [2, 0.25]] and m["whole"][1][3] == []
    assert bench.has_load([m]) and not bench.has_load([{"whole": [(1, 2, 0.5)],
                                                        "streamed": []}])


def test_the_load_counts_at_most_the_engine_s_running_requests():
    bench = _bench()
    calls = [bench.Call(f"g{i}-c0-s0", 0.0, 1.0 + i, 4, 1) for i in range(3)]
    assert bench.load_pieces(calls) == [(0.0, 1.0, 3), (1.0, 2.0, 2), (2.0, 3.0, 1)]
    assert bench.load_pieces(calls, cap=2) == [(0.0, 1.0, 2), (1.0, 2.0, 2), (2.0, 3.0, 1)]
    assert bench.load_profile([(0.5, 1.5), (2.5, 4.0)], bench.load_pieces(calls), 2.5) == \
        [[1, 0.2], [2, 0.2], [3, 0.2]]


def test_a_raw_file_without_loads_takes_them_from_the_replay():
    """Each step's measured busy share spread over its run's replayed load of that kind; the
    other kind's where the replay had none; one request where it had neither."""
    bench = _bench()
    measured = [{"whole": [(900, 0.2, 0.5)], "streamed": [(2, 600, 0.1, 1.0)], "x": 1},
                {"whole": [(900, 0.2, 0.8)], "streamed": [], "x": 2},
                {"whole": [(900, 0.2, 0.4)], "streamed": [], "x": 3}]
    replays = [{"whole": [[2, 0.25], [8, 0.75]], "chunk": [[3, 1.0]]},
               {"whole": [], "chunk": [[4, 0.5], [6, 0.5]]},
               {"whole": [], "chunk": []}]
    out = bench.with_replayed_load(measured, replays)
    assert out[0]["whole"] == [(900, 0.2, 0.5, [[2, 0.125], [8, 0.375]])]
    assert out[0]["streamed"] == [(2, 600, 0.1, 1.0, [[3, 1.0]])]
    assert out[1]["whole"] == [(900, 0.2, 0.8, [[4, 0.4], [6, 0.4]])]
    assert out[2]["whole"] == [(900, 0.2, 0.4, [[1, 0.4]])]
    assert [m["x"] for m in out] == [1, 2, 3] and bench.has_load(out)
    # a raw file older still, without busy shares: kept as it was, and the fits say why
    older = bench.with_replayed_load([{"whole": [(900, 0.2)] * 8, "streamed": []}], replays)
    assert older[0]["whole"] == [(900, 0.2)] * 8
    _, best, why = bench.fit_load_shapes(older[0]["whole"], [])
    assert best is None and "no step recorded the engine's busy share" in why


def test_the_load_shaped_model_carries_the_shape_to_the_simulator():
    bench = _bench()
    whole, streamed = _steps(0.03, 1.2e-4, 0.008, 0.8, "saturating", 12.0)
    _, load, _ = bench.fit_load_shapes(whole, streamed)
    fit = {"decode": {"step_s": 1e-3, "per_request_s": 5e-5, "prefill_per_token_s": 1e-4},
           "decode_with_overlap": {"step_s": 1e-3, "per_request_s": 5e-5,
                                   "prefill_per_token_s": 5e-5},
           "train": bench.fit_train([s[:2] for s in whole]),
           "chunk": bench.fit_chunk(streamed, 1.4e-4), "sync_s": {"keep": 0.04},
           "train_slowdown": 0.4, "train_contended": bench.fit_train_contended(whole, streamed),
           "train_load": load}
    shaped = bench.cost_model(fit, 1, True, "keep", revised=True, load=True).train
    assert (shaped.rollout_slowdown, shaped.rollout_load, shaped.rollout_load_n) == \
        (pytest.approx(0.8), "saturating", 12.0)
    assert shaped.per_token_s == pytest.approx(1.2e-4, rel=1e-9)
    flag = bench.cost_model(fit, 1, True, "keep", revised=True).train
    assert (flag.rollout_load, flag.rollout_load_n) == ("saturating", 1.0)
    none = bench.cost_model(fit, 1, True, "keep", revised=True, two_way=False, load=True).train
    assert none.rollout_slowdown == 0.0


@pytest.mark.parametrize("streaming", [False, True])
def test_the_replayed_load_is_the_simulated_run_s(streaming):
    """A simulated eta-1 run (TOY's costs): the replayed profile's mean load times the busy
    time of the training spans is the requests' summed overlap with those spans, each request
    counted on its own (not through the step function the profile is built from)."""
    from dataclasses import replace

    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.cost import TOY
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate
    from reserve_occupy_peers import make_policy

    bench = _bench()
    cost = replace(TOY, train=replace(TOY.train, chunk_groups=1 if streaming else 0,
                                      chunk_overhead_s=0.05))
    wl = generate(3, MathReasoningShape(groups=64, group_size=4, response_median=200,
                                        max_response=1200, min_response=10))
    policy = make_policy("reserve_occupy", 1, **({"streaming": True} if streaming else {}))
    sim = Simulator(policy, wl, cost, batches=6, batch_size=4).run()
    prof = bench.replayed_load(sim, cost.train)["chunk" if streaming else "whole"]
    by_tid = {r.tid: r for r in sim.ledger.requests}
    spans = []
    for b in sim.ledger.batches:
        if not streaming:
            spans.append((b.t_consume, b.t_trained))
            continue
        first = 0
        for j, (t, count) in enumerate(b.chunks):
            lengths = [by_tid[x].prompt + by_tid[x].length for x in b.tids[first:first + count]]
            first += count
            spans.append((t, b.t_trained if j == len(b.chunks) - 1
                          else t + cost.train.chunk_time(lengths)))
    reqs = [(r.t_start, r.t_end) for g in sim.groups for r in g.requests + g.surplus
            if r.t_start == r.t_start and r.t_end == r.t_end]
    summed = sum(bench.overlap(a, z, spans) for a, z in reqs)
    busy = sum(bench.overlap(a, z, bench.busy_spans([bench.Call("", a, z, 0, 0)
                                                     for a, z in reqs])) for a, z in spans)
    assert busy > 0 and sum(x for _, x in prof) == pytest.approx(1.0, rel=1e-12)
    # float64 sums of a few hundred terms of magnitude sim.now
    assert sum(n * x for n, x in prof) * busy == pytest.approx(summed, rel=1e-9)
    assert max(n for n, _ in prof) > 1
