"""Why the regime map's trainer-bound filtered cells read higher the longer they ran over seeds
0–2 (block ``exp6_same_prompts``): not the length but the seeds' draw of groups without gradient
(``reserve_occupy_sim.studies.regimes_drift``, block ``exp6_trainer_drift`` of
docs/sim/regimes.md).

The mechanism, pinned on a small trainer-bound cell: NeMo-RL in_order trains every group in
workload order whatever the filter drew, so its schedule (publish times, tokens per batch) is the
same under any draw, and its steady throughput is its trained tokens per second times the share
of them whose group has a gradient, the draw's; Reserve–Occupy filters the groups without
gradient, so every token it trains has one. The stored evidence: over 16 seeds neither cell
moves from 60 to 360 batches (within two standard errors), the twins without filtering tie, and
seeds 0–2 give the figures of ``exp6_same_prompts`` (the same runs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.filtering import RewardFilter
from reserve_occupy_sim.model.runner import RunSpec, simulate
from reserve_occupy_sim.model.workload import MathReasoningShape, generate
from reserve_occupy_sim.studies import regimes_drift, regimes_stretch
from reserve_occupy_sim.studies.regimes_compute import classify_run, scaled

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
COST = scaled(preset("qwen3-8b-h20"), 4.0, 40)  # training 4x: trainer-bound
EPS = float(np.finfo(np.float64).eps)
ETA, BATCHES, BATCH_SIZE, GROUPS = 3, 24, 8, 128  # trainer-bound for both rules


def _run(rule: str, filter_seed: int, options: tuple = ()):
    wl = generate(0, MathReasoningShape(groups=GROUPS, truncated=0.03))
    spec = RunSpec(rule, ETA, BATCHES, BATCH_SIZE, options=options,
                   filtering=RewardFilter(0.3, seed=filter_seed))
    return simulate(spec, wl, COST)


def _schedule(sim) -> list[tuple[float, int]]:
    return [(b.t_published, b.tokens) for b in sim.ledger.batches[: sim.n_batches]]


def test_in_order_trains_the_same_schedule_under_any_draw_and_its_figure_is_the_share():
    (ra, sa), (rb, sb) = _run("nemo_in_order", 1), _run("nemo_in_order", 2)
    assert classify_run(ra) == classify_run(rb) == "trainer-bound"
    assert _schedule(sa) == _schedule(sb)  # bit for bit: the draw does not touch it
    wa, wb = (regimes_drift.window(s, r.warmup_batches) for s, r in ((sa, ra), (sb, rb)))
    assert wa["tok_s"] == wb["tok_s"]
    assert wa["share"] != wb["share"]  # the two draws made different groups no-gradient
    # the steady throughput is the token rate times the draw's share (a sum of integers over one
    # span against a product of two such quotients: a few roundings)
    for r, w in ((ra, wa), (rb, wb)):
        assert math.isclose(r.steady_throughput, w["tok_s"] * w["share"], rel_tol=4 * EPS)
    assert math.isclose(ra.steady_throughput / rb.steady_throughput,
                        wa["share"] / wb["share"], rel_tol=8 * EPS)


def test_the_drop_path_and_reserve_occupy_filter_so_the_draw_moves_their_schedule():
    # the contrast: a rule that filters replaces the no-gradient groups, so its schedule depends
    # on the draw, and every token it trains has a gradient
    for rule, options in (("nemo_in_order", (("on_no_gradient", "drop"),)),
                          ("reserve_occupy", ())):
        (ra, sa), (rb, sb) = _run(rule, 1, options), _run(rule, 2, options)
        assert _schedule(sa) != _schedule(sb), rule
        assert classify_run(ra) == "trainer-bound", rule
        for r, s in ((ra, sa), (rb, sb)):
            assert regimes_drift.window(s, r.warmup_batches)["share"] == 1.0, rule


def test_expected_share():
    wl = generate(0, MathReasoningShape(groups=64, truncated=0.03))
    assert regimes_drift.expected_share(wl, None) == 1.0
    # without skew every group has the rate as its probability (bisected to far below 1e-12)
    for rate in (0.2, 0.4):
        share = regimes_drift.expected_share(wl, RewardFilter(rate, skew=0.0))
        assert math.isclose(share, 1.0 - rate, rel_tol=1e-12)
    # with the default skew the long groups are the no-gradient ones: less than 1 - rate
    assert regimes_drift.expected_share(wl, RewardFilter(0.2)) < 0.8


def test_a_small_run_and_its_table():
    payload = regimes_drift.run(preset("qwen3-8b-h20"), cells=regimes_drift.CELLS[:1],
                                lengths=(8, 16), seeds=2, groups=64, batch_size=4)
    (filtered, twin) = payload["cells"]
    assert filtered["cell"][-1] == 0.2 and twin["cell"][-1] == 0.0
    for entry in payload["cells"]:
        for n, by_rule in entry["runs"].items():
            for rule, runs in by_rule.items():
                assert len(runs) == 2
                for r in runs:
                    assert math.isclose(r["steady"], r["tok_s"] * r["share"], rel_tol=4 * EPS)
                    if rule == "reserve_occupy" or entry["cell"][-1] == 0:
                        assert r["share"] == 1.0
    lines = regimes_drift.table(payload).splitlines()
    assert len(lines) == 2 + 2 * 2  # header, rule, two cells at two lengths


@pytest.fixture(scope="module")
def stored():
    return json.loads((RESULTS / regimes_drift.RESULTS).read_text(encoding="utf-8"))


def test_stored_seeds_0_to_2_are_the_runs_of_the_same_prompts_block(stored):
    same = json.loads((RESULTS / regimes_stretch.RESULTS).read_text(encoding="utf-8"))
    by_cell = {tuple(c["cell"]): c for c in same["cells"]}
    m = stored["map_seeds"]
    assert m == same["seeds"]
    checked = 0
    for entry in stored["cells"]:
        if entry["cell"][-1] == 0:
            continue
        for n in map(str, same["lengths"]):
            s = regimes_drift.summary(entry, n, n, slice(0, m))
            want = by_cell[tuple(entry["cell"])]["ratios"]["same prompts"][n]["nemo_in_order"]
            assert math.isclose(s["ratio"], want["mean"], rel_tol=16 * EPS), (entry["cell"], n)
            checked += 1
    assert checked == 2 * len(regimes_drift.CELLS)


def test_stored_no_length_effect_over_16_seeds_and_the_twins_tie(stored):
    lengths = [str(n) for n in stored["lengths"]]
    assert stored["seeds"] >= 16 and lengths[0] == "60" and int(lengths[-1]) >= 360
    for entry in stored["cells"]:
        for n in lengths[1:]:
            s = regimes_drift.summary(entry, n, lengths[0])
            if entry["cell"][-1] == 0:  # the control: the two rules train the same groups
                assert abs(s["ratio"] - 1.0) < 1e-9 and abs(s["change"]) < 1e-9
            else:  # no change with the length beyond two standard errors
                assert abs(s["change"]) <= 2 * s["change_se"], (entry["cell"], n, s)
                # and in_order's token rate does not move: the warm-up holds the transient
                first = regimes_drift.summary(entry, lengths[0], lengths[0])
                assert abs(s["io_tok_s"] / first["io_tok_s"] - 1) < 0.005
        # trainer-bound at every length (as the doc's block says)
        assert {regimes_drift.regime(entry, n) for n in lengths} == {"trainer-bound"}
