"""bench/calibrate.py: a streamed chunk is training, so the decode fit's overlap of a request
with training (``request_features``' ``train``, which fits ``RolloutCost.train_slowdown``)
counts the chunks' spans as well as the steps' ``train_s`` spans. Hand-computed."""

from __future__ import annotations

import pytest

from .helpers import load_bench


def test_a_request_beside_a_streamed_chunk_overlaps_training():
    """One streamed step: its chunk's note at t = 2.0 with ``stream_s`` 1.0 (the chunk trained
    over [1, 2]), then ``train_s`` 0.5 over [2.5, 3] and ``sync_s`` 0.5 over [3, 3.5]. The
    request over [0, 2.2] overlaps the chunk by 1.0 and the step's tail by 0; the one over
    [2.4, 2.8] the tail by 0.3 (and no pause)."""
    bench = load_bench("calibrate")
    calls = [bench.Call("g0-c0-s0", 0.0, 2.2, 4, 10), bench.Call("g1-c0-s0", 2.4, 2.8, 4, 3)]
    rows = [{"time_s": 3.5, "sync_s": 0.5, "train_s": 0.5, "stream_s": 1.0,
             "tokens_trained": 13, "streamed_units": 2}]
    notes = [{"event": "occupy", "unit": "g0", "t": 2.2}, {"event": "occupy", "unit": "g1",
                                                             "t": 2.8},
             {"event": "train_chunk", "t": 2.0, "units": ["g0"]}]
    m = bench.measure(calls, rows, notes, shape=(1, 1))
    trains = [r["train"] for r in m["requests"]]
    assert trains == [pytest.approx(1.0), pytest.approx(0.3)]
