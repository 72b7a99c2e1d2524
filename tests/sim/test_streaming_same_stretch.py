"""The streaming regime map measures every rule of a filtered cell over the same stretch of the
workload: ``sweep.batches`` batches' worth of groups with a gradient (``RunSpec.gradient_batches``,
``streaming_compute.FILTERED_MEASURE``). A rule that trains its no-gradient groups takes more
batches to get there and so covers the same prompts as one that filters them; before, every
rule ran the same number of batches, and such a rule covered about 1 - rate of the prompts.

The hand-checked cell: 8 prompts of 2 answers each, alternately long (prompt 0, 2, ...: 400
tokens) and short (100 tokens), and a filter whose outcome follows the length exactly (skew 10,
rate 0.5): every long group has no gradient, every short one has one. With batches of 2 groups,
Reserve–Occupy (it filters) trains the two short groups of 4 prompts per batch; NeMo in_order
(it trains them, zero advantage) one long and one short group of 2 prompts per batch, so it
needs twice the batches for the same prompts."""

from __future__ import annotations

import copy
import json

import pytest

from reserve_occupy_sim.model.core import SimulationStalled, Simulator
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.filtering import RewardFilter
from reserve_occupy_sim.model.runner import RunSpec, simulate
from reserve_occupy_sim.model.workload import GroupSpec, Workload
from reserve_occupy_peers import make_policy
from reserve_occupy_sim.studies import streaming
from reserve_occupy_sim.studies.regimes import Sweep
from reserve_occupy_sim.studies.streaming_compute import (FILTERED_MEASURE, FRAMEWORKS,
                                                          _map_run, framework_cost)

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LONG, SHORT = 400, 100
HAND = Workload("alternating", tuple(
    GroupSpec(i, 20, (LONG, LONG) if i % 2 == 0 else (SHORT, SHORT)) for i in range(8)))
FILT = RewardFilter(0.5, skew=10.0, seed=0)  # p = 1 for a long group, e**-20 for a short one
N, B = 5, 2  # batches (of groups with a gradient), groups per batch
SWEEP = Sweep(batches=N, batch_size=B)  # only its batches and batch_size are read here
FWS = {fw.key: fw for fw in FRAMEWORKS}
COST = preset("qwen3-8b-h20")
QUIET = dict(say=lambda _m: None)


def _run(key: str, filt=FILT, **kw):
    fw = FWS[key]
    return simulate(RunSpec(fw.policy, 1, N, B, options=fw.options, filtering=filt, **kw),
                    HAND, framework_cost(COST, fw.trainer, fw.engine, fw.share))


def _gradient_prompts(sim) -> list[int]:
    by = {r.tid: r for r in sim.ledger.requests}
    return sorted({by[t].group.index for b in sim.ledger.batches for t in b.tids
                   if not by[t].group.no_grad})


def test_the_hand_cell_filter_follows_the_length():
    outcomes = FILT.bind(HAND)
    assert [outcomes.no_gradient(k) for k in range(64)] == [k % 2 == 0 for k in range(64)]
    for key, filters in (("RO stream in-flight", True), ("NeMo in_order stream", False)):
        assert make_policy(FWS[key].policy, 1, **dict(FWS[key].options)).filters is filters


def test_the_map_runs_each_rule_over_the_same_prompts():
    ro = _map_run(FWS["RO stream in-flight"], 1, COST, SWEEP, HAND, FILT)
    nemo = _map_run(FWS["NeMo in_order stream"], 1, COST, SWEEP, HAND, FILT)
    # RO: 5 batches of 2 short groups; in_order: 10 batches of one long and one short group
    assert (ro.batches, ro.warmup_batches) == (N, N // 5)
    assert (nemo.batches, nemo.warmup_batches) == (2 * N, 2 * (N // 5))
    # each trained the first 2N short groups: the same tokens with a gradient
    assert ro.tokens_useful == nemo.tokens_useful == 2 * N * 2 * (20 + SHORT)
    assert nemo.no_gradient_tokens == 2 * N * 2 * (20 + LONG)
    assert ro.waste_filtered_tokens >= 2 * N * 2 * (20 + LONG)  # it generated them too
    _, ro_sim = _run("RO stream in-flight", gradient_batches=True)
    _, nemo_sim = _run("NeMo in_order stream", gradient_batches=True)
    assert _gradient_prompts(ro_sim) == _gradient_prompts(nemo_sim) == list(range(1, 4 * N, 2))
    # and the steady window is the same short groups: prompts 4 .. 4N - 1 (the warm-up's 4 out)
    for sim, warm in ((ro_sim, N // 5), (nemo_sim, 2 * (N // 5))):
        steady = sim.ledger.batches[warm:]
        assert sum(b.useful_tokens for b in steady) == 2 * (2 * N - 2) * (20 + SHORT)


def test_without_filtering_or_for_a_rule_that_filters_the_run_is_the_plain_run():
    for key, filt in (("RO stream in-flight", FILT), ("NeMo in_order stream", None),
                      ("window FIFO", FILT)):
        plain, _ = _run(key, filt)
        counted, _ = _run(key, filt, gradient_batches=True)
        assert counted.to_json() == plain.to_json()


def test_a_goal_out_of_reach_stalls_and_a_goal_past_the_batches_is_refused():
    policy = make_policy("nemo_in_order", 1)
    sim = Simulator(policy, HAND, COST, batches=N, batch_size=B, filtering=FILT,
                    useful_groups=N * B)  # in N batches in_order trains only N short groups
    with pytest.raises(SimulationStalled, match=f"{N} of the {N * B} groups with a gradient"):
        sim.run()
    with pytest.raises(ValueError, match="useful_groups"):
        Simulator(make_policy("nemo_in_order", 1), HAND, COST, batches=N, batch_size=B,
                  useful_groups=N * B + 1)


# two distinct cells, one of them filtered; two seeds: seconds
SMALL = Sweep(etas=(1,), train_mults=(0.5,), concurrencies=(8,), truncations=(0.03,),
              filter_rates=(0.0, 0.3), seeds=2, batches=8, groups=64, batch_size=4)


def test_a_stored_filtered_cell_measured_over_batches_is_measured_again():
    peers = ("NeMo windowed stream", "tinker")
    fresh = streaming.run_regimes(sweep=SMALL, peers=peers, **QUIET)
    filtered = [c for c in fresh["cells"] if c["filter_rate"] > 0]
    assert filtered and all(c["measure"] == FILTERED_MEASURE for c in filtered)
    for c in filtered:  # the batches each row took: the rules that filter take SMALL's 8
        assert c["batches"]["RO stream in-flight"] == c["batches"]["tinker"] == [8, 8]
        assert all(n > 8 for n in c["batches"]["NeMo in_order stream"])
    old = copy.deepcopy(fresh)  # a map stored before the measure: figures of its own
    for c in old["cells"]:
        c["ratios"]["RO stream in-flight"]["min"] = 0.5
        if c["filter_rate"] > 0:
            del c["measure"], c["batches"]
    stored = json.loads(json.dumps(old))
    got = streaming.run_regimes(sweep=SMALL, peers=peers[:1], base=stored, **QUIET)
    assert stored == json.loads(json.dumps(old))  # not changed in place
    for mine, new, was in zip(got["cells"], fresh["cells"], old["cells"]):
        if mine["filter_rate"] > 0:  # measured again, with the peers it had
            assert mine == new
        else:  # kept as stored
            assert mine == was
    # a cell the selection leaves out stays as it was stored
    kept = streaming.run_regimes(sweep=SMALL, peers=peers, base=stored,
                                 select=lambda cell: cell.filter_rate == 0, **QUIET)
    assert json.loads(json.dumps(kept)) == stored


def test_every_filtered_cell_of_the_stored_map_is_measured_over_the_same_prompts():
    reg = json.loads((ROOT / "docs/results/streaming.json").read_text())["regimes"]
    filtered = [c for c in reg["cells"] if c["filter_rate"] > 0]
    assert len(filtered) == 56  # 14 distinct filtered cells per eta
    want = reg["sweep"]["batches"]
    for c in filtered:
        assert c["measure"] == FILTERED_MEASURE
        for key in ("RO stream", "RO stream in-flight", "verl V1 drop", "verl V1 wait",
                    "tinker", "window FIFO"):  # they filter: the plain run
            assert c["batches"][key] == [want] * reg["sweep"]["seeds"], (c, key)
        for key in ("NeMo in_order stream", "NeMo weight_fifo stream"):  # they do not
            assert min(c["batches"][key]) > want, (c, key)
    for c in reg["cells"]:
        if c["filter_rate"] == 0:
            assert "measure" not in c and "batches" not in c


def test_the_counts_the_docs_quote_are_the_stored_maps():
    """README, docs/sim/regimes.md and the streaming page's reading quote the map's counts in
    prose: the target over the strictly bounded rows, over those that drop nothing (with the
    lowest ratio), and against in_order alone; each must be what the stored map gives."""
    from reserve_occupy_sim.studies.streaming_compute import MAP_RO
    from reserve_occupy_sim.studies.streaming_render import _bounded, _drops, regimes_losses

    reg = json.loads((ROOT / "docs/results/streaming.json").read_text())["regimes"]
    got = regimes_losses(reg)
    n, met, free = got["cells"], got["strict_met"], got["strict_free_met"]
    lowest = min(min([c["ratios"][MAP_RO]["min"]] + [p["min"] for k, p in c["peers"].items()
                                                     if _bounded(k) and not _drops(k)])
                 for c in reg["cells"])
    in_order = sum(1 for c in reg["cells"] if c["ratios"][MAP_RO]["min"] >= 0.99)
    readme = " ".join((ROOT / "README.md").read_text().split())
    regimes = " ".join((ROOT / "docs/sim/regimes.md").read_text().split())
    page = " ".join((ROOT / "docs/sim/streaming.md").read_text().split())
    assert f"every row bounded per trajectory in {met} of {n} cells" in readme
    assert f"against those that drop nothing {free} of {n}, lowest {lowest:.3f}" in readme
    assert f"{met} of {n} cells meet it" in regimes and f"{free} against those of them" in regimes
    assert f"every bounded row in {met} of the {n} cells" in page
    assert f"it is {free} (" in page and f"the lowest {lowest:.3f}" in page
    assert f"as shipped in {in_order} cells" in page
