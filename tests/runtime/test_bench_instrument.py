"""The instrument (bench/instrument.py) that bench-peers and calibrate compare with: its
statistics against hand computations, the order of a pair's two runs, the steady-state window,
the A/A false-positive estimator, the decisions count, and a tiny A/A grid through the real
harness on the real engine."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from .helpers import load_bench


def _ins():
    return load_bench("instrument")


def test_the_sign_interval_and_median_match_a_hand_computation():
    ins = _ins()
    # n = 10: P(Bin(10, 1/2) <= 1) = 11/1024 -> k = 2 covers 1 - 22/1024 = 0.978515625 >= 0.9;
    # P(<= 2) = 56/1024 -> k = 3 covers 1 - 112/1024 = 0.890625 < 0.9. So [x_(2), x_(9)] of
    # the sorted ratios = [1.02, 1.09]; the median is (1.05 + 1.06) / 2 = 1.055; resolved.
    ratios = [1.07, 1.01, 1.10, 1.04, 1.02, 1.09, 1.06, 1.03, 1.08, 1.05]
    assert ins.sign_interval(ratios, 0.9) == (1.02, 1.09, 1 - 22 / 1024)
    row = ins.summarize(ratios, "sign", 0.9)
    assert row["median"] == pytest.approx(1.055, rel=4 * 2.2e-16)
    assert (row["lo"], row["hi"], row["resolved"]) == (1.02, 1.09, True)
    # n = 7: k = 1 covers 1 - 2/128 = 0.984375; k = 2 covers 1 - 16/128 = 0.875 < 0.9: the range
    assert ins.sign_interval([1.2, 0.9, 1.04, 1.02, 0.95, 1.1, 1.06], 0.9) == (
        0.9, 1.2, 1 - 2 / 128)
    # n = 4: even the range covers only 1 - 2/16 = 0.875: no interval at 90 %, never resolved
    lo, hi, cover = ins.sign_interval([1.3, 1.4, 1.5, 1.6], 0.9)
    assert (lo, hi, cover) == (-math.inf, math.inf, 0.875)
    assert not ins.summarize([1.3, 1.4, 1.5, 1.6])["resolved"]
    assert ins.min_pairs(0.9) == 5 and ins.min_pairs(0.95) == 6  # 1 - 2/32, 1 - 2/64


def test_the_bootstrap_interval_matches_a_hand_computation():
    ins = _ins()
    # resamples of 3 from {1, 2, 3}: the median is 1 with P(at least two 1s) = 7/27 ~ 0.26,
    # 3 likewise, 2 otherwise (13/27): the 5 % and 95 % quantiles of 2000 such medians are
    # 1 and 3 (the chance that fewer than 5 % of 2000 draws are 1 is ~1e-70)
    assert ins.bootstrap_interval([3.0, 1.0, 2.0], 0.9, seed=7) == (1.0, 3.0)
    # resamples of 2 from {1, 2}: medians 1 (1/4), 1.5 (1/2), 2 (1/4): [1, 2]
    assert ins.bootstrap_interval([1.0, 2.0], 0.9, seed=1) == (1.0, 2.0)
    assert ins.bootstrap_interval([1.0, 2.0], 0.9, seed=1) == ins.bootstrap_interval(
        [1.0, 2.0], 0.9, seed=1)  # seeded
    assert ins.resolved(1.01, 1.2) and ins.resolved(0.8, 0.99) and not ins.resolved(0.9, 1.1)
    assert not ins.resolved(1.0, 1.2)  # an interval ending at 1 does not exclude it


def _synthetic_aa(n: int = 200, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [math.exp(rng.gauss(0.0, 0.1)) for _ in range(n)]


def test_the_false_positive_estimator_against_the_exact_rate():
    ins = _ins()
    aa = _synthetic_aa()  # 200 distinct values: after centring, exactly 100 above 1, 100 below
    # the sign interval of 5 pairs (k = 1, the range) calls an A/A row resolved iff all 5
    # draws fall on one side of 1: 2 * (1/2)^5 = 0.0625 exactly; 8000 trials: sd 0.0027
    rate = ins.false_positive_rate(aa, 5, "sign", 0.9, trials=8000, seed=3)
    assert abs(rate - 0.0625) < 5 * math.sqrt(0.0625 * 0.9375 / 8000)
    # measured A/A ratios off-centre (the order effect of a drifting host: every ratio x1.1)
    # are centred first: the same rate, not a flood of false positives
    assert ins.false_positive_rate([1.1 * r for r in aa], 5, "sign", 0.9, trials=8000,
                                   seed=3) == pytest.approx(rate, abs=1e-12)
    # 4 pairs: no sign interval at 90 %, never resolved; the percentile bootstrap of the
    # median calls identical configurations resolved far above its nominal 10 %
    assert ins.false_positive_rate(aa, 4, "sign", 0.9, trials=500) == 0.0
    boot = ins.false_positive_rate(aa, 4, "bootstrap", 0.9, trials=1000, seed=5)
    assert boot > 0.1 + 5 * math.sqrt(0.1 * 0.9 / 1000)


def test_pairs_alternate_their_order():
    ins = _ins()
    assert [ins.order(i) for i in range(4)] == [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]
    assert [ins.order(0, j) for j in range(3)] == [("a", "b"), ("b", "a"), ("a", "b")]
    calls: list[tuple[str, int]] = []

    async def run(config, seed):
        calls.append((config, seed))
        rate = {"A": 10.0, "B": 8.0}.get(config[0], 5.0)
        return {"config": config, "rate": rate, "placements": {"g0": 1, "g1": 1 + (config
                                                                                  == "B1")}}

    pairs = asyncio.run(ins.run_pairs([("A0", "A1"), ("B1", "X")], [5, 6], run, warmup="X"))
    assert calls == [("X", 5),  # the discarded warm-up
                     ("A0", 5), ("A1", 5), ("X", 5), ("B1", 5),  # pair 0: ab, then ba
                     ("A1", 6), ("A0", 6), ("B1", 6), ("X", 6)]  # pair 1: ba, then ab
    assert [(p["comparison"], p["pair"], p["first"]) for p in pairs] == [
        (0, 0, "a"), (1, 0, "b"), (0, 1, "b"), (1, 1, "a")]
    assert pairs[0]["ratio"] == 1.0 and pairs[1]["ratio"] == 8.0 / 5.0
    assert pairs[0]["diff"] == 0 and pairs[1]["diff"] == 1  # g1 trained a step later in B1
    # random order: drawn from the recorded seed, so the same seed gives the same order
    firsts = []
    for _ in range(2):
        calls.clear()
        asyncio.run(ins.run_pairs([("A0", "A1")], list(range(12)), run, mode="random",
                                  order_seed=11))
        firsts.append([c for c, _ in calls[::2]])
    assert firsts[0] == firsts[1] and set(firsts[0]) == {"A0", "A1"}


def test_a_crossover_pair_runs_both_orders_and_cancels_an_effect_of_place():
    """``--order crossover``: each pair runs A and B, then again in the other order; its ratio
    is the geometric mean of the two halves'. On a host where the second run of each two is
    10 % slower (the run before it leaves work behind), every alternating pair's ratio is off
    the true 1.5 by 10 % one way or the other, and no crossover pair's."""
    ins = _ins()
    calls: list[tuple[str, int]] = []

    async def run(config, seed):
        slow = len(calls) % 2 == 1  # the second run of each two
        calls.append((config, seed))
        rate = {"A": 12.0, "B": 8.0}[config] * (0.9 if slow else 1.0)
        return {"config": config, "rate": rate, "placements": {"g0": 1}}

    pairs = asyncio.run(ins.run_pairs([("A", "B")], [5, 6], run, mode="crossover"))
    assert calls == [("A", 5), ("B", 5), ("B", 5), ("A", 5),  # pair 0: a b, then b a
                     ("B", 6), ("A", 6), ("A", 6), ("B", 6)]  # pair 1: b a, then a b
    assert [(p["first"], p["a"]["rate"], p["b"]["rate"], p["a2"]["rate"], p["b2"]["rate"])
            for p in pairs] == [("a", 12.0, 7.2, 10.8, 8.0), ("b", 10.8, 8.0, 12.0, 7.2)]
    # sqrt(12 / 7.2 x 10.8 / 8) = sqrt(1.6667 x 1.35) = sqrt(2.25) = 1.5, both pairs
    assert [p["ratio"] for p in pairs] == pytest.approx([1.5, 1.5], rel=8 * 2.2e-16)
    calls.clear()
    alt = asyncio.run(ins.run_pairs([("A", "B")], [5, 6], run))
    assert [p["ratio"] for p in alt] == pytest.approx([12 / 7.2, 10.8 / 8], rel=4 * 2.2e-16)
    assert ins.pair_ratio({"a": {"rate": 3.0}, "b": {"rate": 0.0}}) is None
    assert ins.pair_ratio({"a": {"rate": 3.0}, "b": {"rate": 2.0}, "a2": {"rate": 1.0},
                           "b2": {"rate": 0.0}}) is None
    with pytest.raises(ValueError, match="order mode 'abba'"):
        asyncio.run(ins.run_pairs([("A", "B")], [5], run, mode="abba"))


def test_the_steady_state_window_leaves_out_the_warm_up():
    ins = _ins()
    # a slow first step (model load, an empty pipeline: 5 s for 100 tokens), then 100 tokens a
    # second; rows as metrics.jsonl has them (cumulative tokens, time from the run's start)
    rows = [{"step": s, "time_s": t, "tokens_trained": x}
            for s, t, x in ((3, 7.0, 300), (1, 5.0, 100), (4, 8.0, 400), (2, 6.0, 200))]
    assert ins.steady_rate(rows, 1) == 100.0  # (400 - 100) / (8 - 5)
    assert ins.steady_rate(rows, 2) == 100.0  # (400 - 200) / (8 - 6)
    assert ins.steady_rate(rows, 0) == 50.0  # from the run's start: 400 / 8
    with pytest.raises(ins.WindowError, match="no step after the 4 warm-up steps"):
        ins.steady_rate(rows, 4)
    # the runtime numbers its steps from 0: the window is by position, not by number
    assert ins.steady_rate([dict(r, step=r["step"] - 1) for r in rows], 1) == 100.0
    with pytest.raises(ins.WindowError, match="lasted 0.0 s"):
        ins.steady_rate([dict(r, time_s=5.0) for r in rows], 1)


def test_placements_count_the_units_trained_in_another_step():
    ins = _ins()

    def log(*batches):
        return [{"op": "header"}] + [
            rec for units in batches for rec in (
                {"op": "reserve", "unit": units[0]},
                {"op": "consume", "batch": {"units": [{"unit": u, "staleness": 0}
                                                      for u in units]}})]

    a = ins.placements(log(["g0", "g1"], ["g2", "g3"]))
    b = ins.placements(log(["g0", "g2"], ["g1", "g4"]))
    assert a == {"g0": 1, "g1": 1, "g2": 2, "g3": 2}
    # g1 and g2 swapped steps, g3 only in a, g4 only in b; g0 the same
    assert ins.placement_diff(a, b) == 4 and ins.placement_diff(a, a) == 0


@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_a_tiny_aa_grid_through_the_real_harness(engine, tmp_path):
    """The reference against itself, 2 pairs of 3 steps on the real engine, as bench-peers
    runs a grid: one discarded warm-up run, then the pairs in alternating order; each run's
    throughput over the steps after the first; the A/A row first in the table."""
    peers, ins = load_bench("peers_compare"), _ins()
    ref = (*peers.REF, 1)
    results = await peers.main([ref], [0, 1], 3, peers.MEDIAN, peers.SIGMA,
                               tmp_path / "rows.jsonl", engine=engine, warmup_steps=1)
    runs, pairs = results["runs"], results["pairs"]
    assert [r["run"] for r in runs] == [2, 3, 4, 5]  # run 1, the warm-up, is discarded
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 4
    assert [(p["pair"], p["first"], p["a"]["run"], p["b"]["run"]) for p in pairs] == [
        (0, "a", 2, 3), (1, "b", 5, 4)]  # pair 1 ran b first
    assert [r["seed"] for r in runs] == [0, 0, 1, 1]
    for r in runs:
        assert r["steps"] == 3 and r["warmup_steps"] == 1 and r["steady_trained_tok_s"] > 0
        # the window is steps 2-3, not the run from its start
        assert r["steady_trained_tok_s"] != r["tokens_trained"] / r["wall_s"]
        assert set(r["placements"].values()) == {1, 2, 3}  # every step trained units
    for p in pairs:
        assert p["ratio"] == p["a"]["steady_trained_tok_s"] / p["b"]["steady_trained_tok_s"]
    (row,) = results["comparisons"]
    assert row["aa"] and row["trained"]["pairs"] == 2 and len(row["diff"]) == 2
    assert row["trained"]["median"] == pytest.approx(
        (pairs[0]["ratio"] + pairs[1]["ratio"]) / 2, rel=4 * 2.2e-16)
    assert not row["trained"]["resolved"]  # 2 pairs: no 90 % sign interval exists
    fp = results["false_positive"]
    assert fp["pairs"] == 2 and fp["sign"] == 0.0 and 0.0 <= fp["bootstrap"] <= 1.0
    table = peers.render({**results, "runs": runs}).splitlines()
    assert "is called resolved 0.0% of the time with the sign interval" in table[1]
    assert table[5].startswith("| 1 | A/A: nemo_in_order | off | keep | itself | 2 | ")
    assert "not resolved" in table[5]


def test_the_table_prints_the_aa_row_first_and_same_decisions_without_a_ratio():
    peers, ins = load_bench("peers_compare"), _ins()

    def comp(policy, aa, diffs, ratios):
        return {"eta": 1, "policy": policy, "streaming": False, "refit": "keep",
                "against": "ref", "aa": aa, "seeds": list(range(len(ratios))),
                "diff": diffs, "same_decisions": all(d == 0 for d in diffs),
                "trained": ins.summarize(ratios), "gen": ins.summarize(ratios),
                "trained_tok_s": [100.0], "staleness_max": 1, "staleness_mean": 0.5,
                "units_dropped": 0.0}

    ratios = [1.07, 1.01, 1.10, 1.04, 1.02, 1.09, 1.06, 1.03, 1.08, 1.05]
    results = {"instrument": {"order": "alternate", "order_seed": 0, "interval": "sign",
                              "level": 0.9, "warmup_steps": 1, "pin": None},
               "comparisons": [comp("verl_drop", False, [0] * 10, ratios),
                               comp("reserve_occupy", False, [3] * 10, ratios),
                               comp("nemo_in_order", True, [0] * 10, [1.0] * 10)]}
    body = peers.render(results).splitlines()[4:]
    assert body[0].startswith("| 1 | A/A: nemo_in_order | off | keep | itself | 10 | "
                              "1.000 [1.000, 1.000] | not resolved |")
    assert "| verl_drop | off | keep | ref | 10 | same decisions | - | same decisions |" in body[1]
    assert "| reserve_occupy | off | keep | ref | 10 | 1.055 [1.020, 1.090] | resolved |" \
        in body[2]


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_place_pins_the_engine_apart_from_the_driver():
    """``--pin`` in a child process (pinning here would pin the test session): an engine
    stand-in (a child ``sleep``) on the first usable core, every thread of the process on the
    others, torch at one thread."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench"
    code = f"""
import json, os, subprocess, sys, threading
sys.path.insert(0, {str(bench)!r})
import instrument, torch
t = threading.Thread(target=lambda: __import__("time").sleep(5)); t.start()  # a thread too
child = subprocess.Popen(["sleep", "30"])
try:
    done = instrument.place([child.pid])
    tasks = os.listdir(f"/proc/{{os.getpid()}}/task")
    print(json.dumps({{"done": done, "child": sorted(os.sched_getaffinity(child.pid)),
                      "threads": sorted({{c for t in tasks for c in os.sched_getaffinity(int(t))}}),
                      "ntasks": len(tasks), "torch": torch.get_num_threads()}}))
finally:
    child.kill()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    cores = sorted(__import__("os").sched_getaffinity(0))
    assert out["child"] == [cores[0]] == out["done"]["engine_cores"]
    assert out["threads"] == cores[1:] == out["done"]["driver_cores"] and out["ntasks"] > 1
    assert out["torch"] == 1
