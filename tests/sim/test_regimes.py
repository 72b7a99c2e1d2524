"""The regime classifier on hand-built cases (and a broken classifier failing them), the
admission-gate accounting it reads, and the tiny regime sweep: complete, JSON-ready and
deterministic."""

from __future__ import annotations

import dataclasses
import json

import pytest
from sim_helpers import run_policy

from reserve_occupy_sim.studies import regimes
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.studies.regimes import TINY, classify, classify_run, run_sweep, scaled
from reserve_occupy_sim.model.runner import RunSpec, simulate
from reserve_occupy_sim.model.workload import MathReasoningShape, generate

# (trainer idle, admission held by the window, admission waiting for engines) -> regime
CASES = [
    ((0.02, 0.90, 0.05), "trainer-bound"),  # trainer always busy, whatever admission does
    ((0.09, 0.00, 0.99), "trainer-bound"),
    ((0.40, 0.75, 0.20), "slot-bound"),  # engines idle, the window holds admission
    ((0.30, 0.50, 0.50), "slot-bound"),  # a tie goes to the window
    ((0.40, 0.10, 0.85), "engine-bound"),  # every engine slot busy
    ((0.10, 0.00, 1.00), "engine-bound"),  # exactly at the trainer threshold: not trainer-bound
]


@pytest.mark.parametrize("fractions,want", CASES)
def test_classifier_on_hand_built_cases(fractions, want):
    assert classify(*fractions) == want


def broken_classify(trainer_idle, slot_held, engine_full):
    """Broken: looks only at admission, never at the trainer."""
    return "slot-bound" if slot_held >= engine_full else "engine-bound"


def test_a_broken_classifier_fails_the_cases():
    assert any(broken_classify(*f) != want for f, want in CASES)


@pytest.mark.parametrize("bad", [(-0.1, 0.5, 0.5), (0.5, 1.5, 0.0), (0.5, "x", 0.1),
                                 (True, 0.1, 0.1)])
def test_classifier_refuses_non_fractions(bad):
    with pytest.raises(ValueError, match="fraction"):
        classify(*bad)


def test_gate_time_covers_the_wall(workload, cost):
    for name in ("reserve_occupy", "nemo_in_order", "verl_drop", "unbounded"):
        sim = run_policy((name, 2), workload, cost)
        assert sum(sim.gate_time.values()) == pytest.approx(sim.now, rel=1e-9)
    # unbounded admits whenever a slot is free, so its admission is never held by a policy
    sim = run_policy(("unbounded", 0), workload, cost)
    assert sim.gate_time["policy_held"] == pytest.approx(0.0, abs=1e-6)


def test_real_runs_land_in_the_expected_regimes(cost):
    workload = generate(0, MathReasoningShape(groups=256))

    def regime(eta, mult, conc):
        spec = RunSpec("reserve_occupy", eta, 20, 8)
        return classify_run(simulate(spec, workload, scaled(cost, mult, conc))[0])

    assert regime(1, 4.0, 40) == "trainer-bound"  # training 4x as slow
    assert regime(3, 0.5, 4) == "engine-bound"  # 8 engine slots for 64 trajectories a batch
    assert regime(1, 0.5, 80) == "slot-bound"  # 160 slots, a window of one batch ahead


def test_scaled_cost_scales_training_only(cost):
    c = scaled(cost, 2.0, 16)
    assert c.concurrency == 16 and c.rollout == cost.rollout
    assert c.train.batch_time([1000, 2000]) == pytest.approx(
        2.0 * cost.train.batch_time([1000, 2000]))
    assert c.train.sync_s == cost.train.sync_s


@pytest.mark.slow
def test_tiny_sweep_is_complete_and_deterministic(cost):
    a = run_sweep(cost, TINY, progress=False)
    b = run_sweep(cost, TINY, progress=False)
    a.pop("seconds"), b.pop("seconds")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert len(a["cells"]) == len(TINY.cells())
    for cell in a["cells"]:
        assert cell["regime"] in regimes.REGIMES
        for base in regimes.BASELINES:
            r = cell["ratios"][base]
            assert r["min"] <= r["mean"] <= r["max"] and r["mean"] > 0
        assert (regimes.IN_ORDER_DROP in cell["ratios"]) == (cell["filter_rate"] > 0)
        for mode in regimes.OVERSAMPLING:  # both oversampling modes ran in every cell
            o = cell["oversampling"][mode]
            assert o["gain"]["min"] <= o["gain"]["mean"] <= o["gain"]["max"]
            assert o["pace"]["mean"] > 0 and 0 < o["length_ratio"]["mean"] <= 1.5
            assert o["l2"]["mean"] > 0  # the surplus is aborted in flight: L2 waste
    for cell in a["cells"]:  # the references ran once per point, whatever the cell's eta
        for label in regimes.REFERENCES:
            assert cell["ratios"][label]["mean"] > 0
            twin = next(c for c in a["cells"] if c["eta"] != cell["eta"]
                        and regimes._point(c) == regimes._point(cell))
            assert twin["runs"][label] == cell["runs"][label]
    areal = a["cells"][0]["runs"]["areal/eta1"]
    assert all(r["max_staleness"] >= 2 for r in areal)  # AReaL at eta 1 overruns it
    goals = regimes.targets(a)
    assert len(goals) == len({regimes._point(c) for c in a["cells"]})
    mine = next(g for g in goals if tuple(g[k] for k in ("train_mult", "concurrency",
                                                         "truncated", "filter_rate"))
                == regimes._point(a["cells"][0]))
    assert mine["areal_eta1_staleness"] == max(r["max_staleness"] for r in areal)
    table = regimes.summary_table(a)
    assert "slot-bound" in table or "engine-bound" in table
    assert regimes.cell_table(a).count("\n") >= len({c["eta"] for c in a["cells"]})
    over = regimes.oversampling_table(a)
    assert "RO C=B+4" in over and "RO cand=G+2" in over


def test_oversampling_runs_use_the_sweeps_sizes(cost):
    """Capacity is the sweep's batch size + 4 and candidates the group size + 2, in the runs."""
    cell = regimes.Cell("hardware", 1, 1.0, 8)
    got = {label: (dict(options), cand)
           for label, options, cand in regimes._policies(cell, TINY, group_size=8)}
    assert got["reserve_occupy/capacity+4"] == ({"capacity": TINY.batch_size + 4}, None)
    assert got["reserve_occupy/candidates+2"] == ({}, 10)


def _runs(steady, batch_s, length):
    return {"steady": steady, "batch_s": batch_s, "length_ratio": length, "length_ks": 0.1,
            "l2": 0.2}


@pytest.mark.parametrize("plain_length,mode,want", [
    (1.0, _runs(110, 90, 0.80), True),  # faster in both, by training answers 20 % shorter
    (1.0, _runs(90, 90, 0.80), True),  # slower in tok/s, batches come faster: still short
    (1.0, _runs(110, 90, 1.00), False),  # ahead without length bias
    (1.0, _runs(90, 110, 0.80), False),  # behind in both: nothing gained, no label
    # reward filtering toward long groups: plain RO already trains shorter answers than it
    # admits; only what the mode adds counts
    (0.80, _runs(110, 90, 0.79), False),
    (0.80, _runs(110, 90, 0.60), True),
])
def test_short_answers_label(plain_length, mode, want):
    plain = [_runs(100, 100, plain_length)]
    assert regimes._oversampling(plain, [mode])["short_answers"] is want


def test_sweep_seeds_change_the_workload(cost):
    one = dataclasses.replace(TINY, seeds=1, etas=(1,), train_mults=(1.0,), concurrencies=(8,),
                              filter_rates=(0.0,))
    cells = [regimes.Cell("hardware", 1, 1.0, 8)]
    r1 = run_sweep(cost, one, progress=False, cells=cells)
    r2 = run_sweep(cost, dataclasses.replace(one, seeds=2), progress=False, cells=cells)
    runs1 = r1["cells"][0]["runs"]["reserve_occupy"]
    runs2 = r2["cells"][0]["runs"]["reserve_occupy"]
    assert runs2[0] == runs1[0] and runs2[1] != runs2[0]


def test_default_sweep_covers_every_axis():
    sweep = regimes.Sweep()
    cells = sweep.cells()
    assert {c.eta for c in cells} == {1, 2, 3, 4}
    assert {c.slice for c in cells} == {"hardware", "workload", "filter"}
    assert sweep.batches >= 50 and sweep.seeds >= 3
    assert preset("qwen3-8b-h20").concurrency in sweep.concurrencies


def _cell(eta, ratios, areal_staleness=2, point=(1.0, 40, 0.03, 0.0)):
    runs = {"areal/eta1": [{"steady": 1.0, "max_staleness": areal_staleness}]}
    return {"slice": "hardware", "eta": eta, "train_mult": point[0], "concurrency": point[1],
            "truncated": point[2], "filter_rate": point[3], "runs": runs,
            "ratios": {k: {"mean": v} for k, v in ratios.items()}}


def test_targets_on_hand_built_cells():
    """Each target reads the right cell: in_order at eta 1, unbounded at eta 2, AReaL at the
    eta equal to its achieved staleness, and the lowest ratio to any bounded baseline."""
    bounded = {"nemo_in_order": 1.0, "nemo_weight_fifo": 1.0, "verl_drop": 1.0}
    cells = [_cell(1, {**bounded, "nemo_in_order": 1.12, "unbounded": 0.80, "areal/eta1": 0.9}),
             _cell(2, {**bounded, "verl_drop": 0.97, "unbounded": 0.96, "areal/eta1": 1.05}),
             _cell(3, {**bounded, "unbounded": 0.99, "areal/eta1": 0.5})]
    t, = regimes.targets({"cells": cells})
    assert t["vs_in_order_eta1"] == 1.12 and t["vs_unbounded_eta2"] == 0.96
    assert t["areal_eta1_staleness"] == 2 and t["vs_areal_at_its_staleness"] == 1.05
    assert t["lowest_vs_bounded"] == 0.97 and t["lowest_at"] == (2, "verl_drop")
    summary = regimes.targets_summary({"cells": cells})
    assert summary == {"in_order_eta1": (1, 1), "unbounded_eta2": (1, 1), "areal": (1, 1),
                       "never_below": (0, 1)}
    assert "0.970 ✗" in regimes.targets_table({"cells": cells})
    # a tie (identical schedules, up to float order) is not below, and not faster
    cells = [_cell(1, {**bounded, "verl_drop": 1 - 1e-6, "areal/eta1": 1.0 + 1e-6}),
             _cell(2, {**bounded, "areal/eta1": 1 + 1e-6})]
    got = regimes.targets_summary({"cells": cells})
    assert got["never_below"] == (1, 1) and got["areal"] == (0, 1)
    # AReaL reaching a staleness the map has no cell for: that target is not counted
    cells = [_cell(1, bounded, areal_staleness=5)]
    assert regimes.targets_summary({"cells": cells})["areal"] == (0, 0)
