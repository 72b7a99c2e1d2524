"""bench/calibrate.py's second contention term: training slowed while the engine decodes
(``fit_train_contended``, the simulator's ``TrainCost.rollout_slowdown``), and the engine's
busy share of each step that ``measure`` records for it. Hand-computed inputs, exact answers."""

from __future__ import annotations

import pytest

from .helpers import load_bench


def _bench():
    return load_bench("calibrate")


def _steps(fixed: float, per_token: float, overhead: float, slow: float):
    """Whole-batch and streaming steps of known costs, the engine busy 0 to 100 % of each."""
    whole = [(t, (fixed + per_token * t) * (1 + slow * b), b)
             for t, b in ((900, 0.0), (1300, 0.2), (1700, 1.0), (2100, 0.6), (2500, 0.9),
                          (1100, 0.0))]
    streamed = [(n, t, (overhead * n + per_token * t) * (1 + slow * b), b)
                for n, t, b in ((1, 300, 1.0), (3, 900, 0.5), (2, 700, 0.0), (6, 1500, 0.3))]
    return whole, streamed


@pytest.mark.parametrize("slow", [0.0, 0.37, 1.25])
def test_the_contended_train_fit_recovers_known_costs(slow):
    """On the search's grid (0.01 steps) the exact costs give zero error, so the fit returns
    them: the tolerance is least squares' round-off in float64 over a dozen rows."""
    bench = _bench()
    fit = bench.fit_train_contended(*_steps(0.03, 1.2e-4, 0.008, slow))
    assert fit["rollout_slowdown"] == pytest.approx(slow, abs=1e-12)
    assert fit["fixed_s"] == pytest.approx(0.03, rel=1e-9)
    assert fit["per_token_s"] == pytest.approx(1.2e-4, rel=1e-9)
    assert fit["chunk_overhead_s"] == pytest.approx(0.008, rel=1e-9)
    assert (fit["busy_min"], fit["busy_max"]) == (0.0, 1.0) and not fit["at_limit"]


def test_a_slowdown_the_steps_cannot_identify_is_refused():
    bench = _bench()
    whole, streamed = _steps(0.03, 1.2e-4, 0.008, 0.5)
    always = [(t, s, 0.9) for t, s, _ in whole] + [(t, s, 0.95) for t, s, _ in whole]
    with pytest.raises(bench.FitError, match="hardly varied"):
        bench.fit_train_contended(always, [])
    with pytest.raises(bench.FitError, match="busy share"):  # an earlier --raw: no busy
        bench.fit_train_contended([(t, s) for t, s, _ in whole] * 2, [])
    with pytest.raises(bench.FitError, match="at least 8"):
        bench.fit_train_contended(whole[:3], streamed[:2])


def test_the_revised_model_stretches_training_only_where_the_fit_found_it():
    bench = _bench()
    whole, streamed = _steps(0.03, 1.2e-4, 0.008, 0.5)
    fit = {"decode": {"step_s": 1e-3, "per_request_s": 5e-5, "prefill_per_token_s": 1e-4},
           "decode_with_overlap": {"step_s": 1e-3, "per_request_s": 5e-5,
                                   "prefill_per_token_s": 5e-5},
           "train": bench.fit_train(whole), "chunk": bench.fit_chunk(streamed, 1.4e-4),
           "sync_s": {"keep": 0.04}, "train_slowdown": 0.4,
           "train_contended": bench.fit_train_contended(whole, streamed)}
    as_was = bench.cost_model(fit, 1, True, "keep")
    revised = bench.cost_model(fit, 1, True, "keep", revised=True)
    assert as_was.train.rollout_slowdown == 0.0 and as_was.rollout.train_slowdown == 0.0
    assert revised.train.rollout_slowdown == pytest.approx(0.5)
    assert revised.rollout.train_slowdown == 0.4
    assert revised.train.per_token_s == pytest.approx(1.2e-4, rel=1e-9)
    assert revised.train.chunk_overhead_s == pytest.approx(0.008, rel=1e-9)
    unfitted = dict(fit, train_contended=None)  # not identified: the train fit, unstretched
    plain = bench.cost_model(unfitted, 1, True, "keep", revised=True)
    assert plain.train.rollout_slowdown == 0.0
    assert plain.train.per_token_s == fit["train"]["per_token_s"]


def test_measure_records_the_engine_s_busy_share_of_each_step():
    """Two whole-batch steps on the run's clock (the requests' clock is the same here: the
    one unit's occupy note is written when its last request ends): step 1 trains over [1, 3]
    while a request runs over [0, 2] (busy 1/2), step 2 over [5, 6] with the engine idle."""
    bench = _bench()
    calls = [bench.Call("g0-c0-s0", 0.0, 2.0, 4, 10), bench.Call("g1-c0-s0", 0.5, 1.5, 4, 5)]
    rows = [{"time_s": 3.5, "sync_s": 0.5, "train_s": 2.0, "stream_s": 0.0,
             "tokens_trained": 15},
            {"time_s": 6.5, "sync_s": 0.5, "train_s": 1.0, "stream_s": 0.0,
             "tokens_trained": 30}]
    notes = [{"event": "occupy", "unit": "g0", "t": 2.0}, {"event": "occupy", "unit": "g1",
                                                             "t": 1.5}]
    m = bench.measure(calls, rows, notes, shape=(1, 1))
    assert [round(s[2], 12) for s in m["whole"]] == [0.5, 0.0]
    assert bench.busy_spans(calls + [bench.Call("g2-c0-s0", 4.0, 4.5, 4, 1)]) == \
        [(0.0, 2.0), (4.0, 4.5)]
