"""bench/peers_compare.py's workloads (issue 37 item 2): the presets ``--workload`` names and
what they set, the headline comparisons ``--headline`` runs, the per-seed answer-length
quantiles printed beside the results (against a hand computation), the trainer's wait
attributable to a straggler (against a hand-made run), and bench/workload_predict.py's choice
criterion. No engine: the simulator and hand-made logs only."""

from __future__ import annotations

import math

import pytest

from .helpers import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("peers_compare")


def test_the_presets_and_what_they_set(bench):
    assert bench.WORKLOADS["bench"] == {"batch_size": 4, "group_size": 4, "median": 12.0,
                                        "sigma": 1.0, "steps": 6}  # the first tables' workload
    assert bench.WORKLOADS["separating"] == {"batch_size": 12, "group_size": 4, "median": 8.0,
                                             "sigma": 1.5, "steps": 8}
    args = bench.parse(["--workload", "separating", "--policies", "reserve_occupy",
                        "--etas", "1", "--refits", "keep"])
    assert (args.shape, args.median, args.sigma, args.steps) == ((12, 4), 8.0, 1.5, 8)
    settings = bench.config_settings("reserve_occupy", True, "keep", 1, 0, args.steps, "out",
                                     args.shape)
    assert (settings["staleness.batch_size"], settings["staleness.group_size"]) == (12, 4)
    # an option given on the command line wins over the preset's
    args = bench.parse(["--workload", "separating", "--median", "20", "--steps", "3",
                        "--policies", "reserve_occupy", "--etas", "1", "--refits", "keep"])
    assert (args.shape, args.median, args.sigma, args.steps) == ((12, 4), 20.0, 1.5, 3)
    # no --workload: the first workload, as before (4 groups of 4, median 12, sigma 1, 6 steps)
    args = bench.parse(["--policies", "reserve_occupy", "--etas", "1", "--refits", "keep"])
    assert (args.shape, args.median, args.sigma, args.steps) == ((4, 4), 12.0, 1.0, 6)
    assert bench.config_settings("reserve_occupy", True, "keep", 1, 0, 6, "out")[
        "staleness.batch_size"] == 4


def test_headline_runs_its_comparisons(bench, capsys):
    ro, ref, shipped = ("reserve_occupy", True, "keep"), bench.REF, bench.SHIPPED
    comps = bench.headline()
    assert [(c["a"], c["b"], c["against"], c["aa"]) for c in comps] == [
        ((*ref, 1), (*ref, 1), "ref", True),  # the A/A row first
        ((*ro, 1), (*shipped, 1), "shipped", False),
        ((*ro, 2), (*shipped, 2), "shipped", False),
        ((*ro, 1), (*ref, 1), "ref", False),
        ((*ro, 1), ("verl_drop", False, "keep", 1), "verl_drop", False),
        ((*ro, 1), (*ro, 0), "itself at eta 0", False),
        (("reserve_occupy", False, "keep", 1), (*ref, 1), "ref", False)]
    args = bench.parse(["--workload", "separating", "--headline"])
    assert args.grid == bench.headline_grid() and len(args.grid) == 8
    with pytest.raises(SystemExit) as e:
        bench.parse(["--headline", "--etas", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["peers_compare: --headline runs its own comparisons: --etas is not taken "
                   "with it"]


def _nearest_rank(xs, q):
    """By hand: the ceil(q n)-th smallest."""
    return sorted(xs)[math.ceil(q * len(xs)) - 1]


def test_length_quantiles_against_a_hand_computation(bench):
    # one unit of 4 answers (seed 2: 6, 7, 63, 75 tokens): p50 is the 2nd smallest
    # (ceil(0.5 * 4) = 2), p90 and p99 the 4th
    tail = bench.LongTail(None, 96, 2, 8.0, 1.5)
    assert sorted(tail.cap(f"g0-c{j}") for j in range(4)) == [6, 7, 63, 75]
    assert bench.length_quantiles(2, 8.0, 1.5, 96, 1, 4) == {
        "p50": 7.0, "p90": 75.0, "p99": 75.0, "max": 75.0, "mean": (6 + 7 + 63 + 75) / 4}
    # 5 units of 2 (seed 0, median 12, sigma 1: 4 7 7 9 11 11 18 24 35 73): p50 the 5th
    # smallest, p90 the 9th (ceil(9.0)), p99 the 10th
    tail = bench.LongTail(None, 96, 0, 12.0, 1.0)
    caps = [tail.cap(f"g{u}-c{j}") for u in range(5) for j in range(2)]
    assert sorted(caps) == [4, 7, 7, 9, 11, 11, 18, 24, 35, 73]
    q = bench.length_quantiles(0, 12.0, 1.0, 96, 5, 2)
    assert q == {"p50": 11.0, "p90": 35.0, "p99": 73.0, "max": 73.0, "mean": 19.9}
    assert q["p90"] == _nearest_rank(caps, 0.9)
    # sigma 0: every answer is the median; the cap bounds them all
    assert bench.length_quantiles(1, 8.0, 0.0, 96, 3, 4) == {
        "p50": 8.0, "p90": 8.0, "p99": 8.0, "max": 8.0, "mean": 8.0}
    assert bench.length_quantiles(1, 500.0, 0.0, 96, 3, 4)["max"] == 96.0


def _consume(*units):
    return {"op": "consume", "batch": {"units": [{"unit": u, "staleness": 0} for u in units]}}


def test_straggler_wait_against_a_hand_made_run(bench):
    # step 0 waits in [1.0, 2.5]; its units become final at 0.5, 1.2, 2.0: only g2 is missing
    # in [1.2, 2.0], 0.8 s of the wait. Step 1 waits in [4.0, 4.5]; its units at 3.0, 4.4:
    # only g4 missing in [3.0, 4.4], of which [4.0, 4.4] = 0.4 s is waited. Step 2 waits in
    # [7.0, 8.1] (0.1 s idle, 1.0 s training chunks) while only g6 is missing in [6.0, 8.0]:
    # an overlap of 1.0 s, counted as at most the idle wait, 0.1 s.
    metrics = [{"step": 1, "time_s": 6.0, "step_s": 2.0, "wait_s": 0.5, "stream_s": 0.0},
               {"step": 0, "time_s": 3.0, "step_s": 2.0, "wait_s": 1.5},  # rows in any order
               {"step": 2, "time_s": 8.5, "step_s": 1.5, "wait_s": 0.1, "stream_s": 1.0}]
    notes = [{"t": 0.5, "event": "occupy", "unit": "g0"},
             {"t": 1.2, "event": "occupy", "unit": "g1"},
             {"t": 2.0, "event": "occupy", "unit": "g2"},
             {"t": 3.0, "event": "occupy", "unit": "g3"},
             {"t": 4.4, "event": "occupy", "unit": "g4"},
             {"t": 4.1, "event": "resume", "unit": "g5"},  # not a unit becoming final
             {"t": 6.0, "event": "occupy", "unit": "g5"},
             {"t": 8.0, "event": "occupy", "unit": "g6"}]
    events = [{"op": "reserve"}, _consume("g0", "g1", "g2"), {"op": "publish"},
              _consume("g3", "g4"), _consume("g5", "g6")]
    w = bench.straggler_wait(metrics, notes, events)
    assert w["wait_s"] == pytest.approx(2.1, abs=1e-12)
    assert w["straggler_s"] == pytest.approx(0.8 + 0.4 + 0.1, abs=1e-12)
    w = bench.straggler_wait(metrics, notes, events, warmup_steps=1)
    assert w == pytest.approx({"wait_s": 0.6, "straggler_s": 0.5}, abs=1e-12)
    # a streaming step: the wait window runs on through the chunks trained (stream_s)
    metrics = [{"step": 0, "time_s": 3.0, "step_s": 2.0, "wait_s": 0.2, "stream_s": 1.3}]
    assert bench.straggler_wait(metrics, notes, events)["straggler_s"] == pytest.approx(0.2)


def test_the_table_prints_the_workload_and_the_waits(bench):
    comps = bench.headline()[:2]
    row = {"steady_trained_tok_s": 100.0, "steady_gen_tok_s": 200.0, "staleness_max": 1,
           "staleness_mean": 0.5, "units_dropped": 0}
    pairs = [{"comparison": j, "seed": s, "first": "a", "diff": 1, "ratio": 1.0 + s / 100,
              "a": {**row, "wait_s": 1.0 + s, "straggler_s": 0.5},
              "b": {**row, "wait_s": 2.0, "straggler_s": 0.25 * s}}
             for j in range(2) for s in range(5)]
    summary = bench.summarize_pairs(comps, pairs, "sign", 0.9)
    assert summary["rows"][1]["wait_s"] == [[1.0 + s, 2.0] for s in range(5)]
    assert summary["rows"][1]["straggler_s"] == [[0.5, 0.25 * s] for s in range(5)]
    workload = bench.workload_record("separating", (12, 4), 8.0, 1.5, 8, [0, 1])
    assert workload["units"] == 96
    assert workload["length_quantiles"]["1"] == bench.length_quantiles(1, 8.0, 1.5, 96, 96, 4)
    results = {"instrument": {"order": "alternate", "order_seed": 0, "interval": "sign",
                              "level": 0.9, "warmup_steps": 1, "pin": None},
               "comparisons": summary["rows"], "false_positive": None, "workload": workload}
    text = bench.render(results)
    q0 = workload["length_quantiles"]["0"]
    assert (f"Workload 'separating': 12 groups of 4 per step, answer lengths lognormal (median "
            f"8, sigma 1.5, at most 96 tokens); per seed, over the answers of its first 96 "
            f"units, p50 / p90 / p99 / max tokens: seed 0: {q0['p50']:g} / {q0['p90']:g} / "
            f"{q0['p99']:g} / {q0['max']:g}, mean {q0['mean']:.1f}; seed 1: ") in text
    # the waits: row 3.00 (0.50) / baseline 2.00 (0.50), means over the 5 pairs
    assert text.splitlines()[-1].endswith("| 3.00 (0.50) / 2.00 (0.50) |")
    older = {**results, "workload": None,
             "comparisons": [{k: v for k, v in c.items() if k not in ("wait_s", "straggler_s")}
                             for c in summary["rows"]]}
    assert "Workload" not in bench.render(older)
    assert bench.render(older).splitlines()[-1].endswith("| n/a |")


def test_the_choice_criterion_is_the_least_separated_comparison():
    predict = load_bench("workload_predict")

    def row(name, ratios):
        return {"name": name, "ratios": dict(zip(predict.SHORT, ratios))}

    by_scale = {1.0: [row("x", [1.05, 0.93, 1.2, 1.3, 1.4, 1.06]),
                      row("y", [1.0, 1.5, 1.5, 1.5, 1.5, 1.5])],
                0.5: [row("x", [1.05, 1.05, 1.2, 1.3, 1.4, 0.96]),
                      row("y", [1.5, 1.5, 1.5, 1.5, 1.5, 1.5])]}
    out = predict.separation(by_scale)
    assert [(n, round(s, 9), where) for n, s, where in out] == [
        ("x", 0.04, f"{predict.SHORT[5]} at training x 0.5"),  # |0.96 - 1|, a deficit counts
        ("y", 0.0, f"{predict.SHORT[0]} at training x 1")]
    assert predict.CANDIDATES["separating: 12 groups of 4, median 8"]["batch_size"] == 12
