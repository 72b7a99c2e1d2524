"""The regime map (experiment 6) measures every run of a reward-filtered cell over the same
stretch of the workload, as the streaming map does: ``sweep.batches`` batches' worth of groups
with a gradient (``RunSpec.gradient_batches``, ``FILTERED_MEASURE``). A rule that filters its
no-gradient groups makes its plain run; one that trains them (in_order, weight_fifo, windowed,
ready_first, prime-rl) takes more batches and covers the same prompts. Before, every rule ran
``sweep.batches`` batches, and such a rule covered about 1 - rate of the prompts
(tests/sim/test_streaming_same_stretch.py pins the measure itself on a cell worked by hand).

A stored map of the old measure is migrated in place (``remeasure_filtered``, ``simulate
regimes --add-peers``): its filtered cells run again whole, the runs of the rules that filter
checked equal to the stored ones, the unfiltered cells left as they are."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from sim_helpers import sim_cli

from reserve_occupy_peers import make_policy
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.filtering import RewardFilter
from reserve_occupy_sim.model.runner import FILTERED_MEASURE, RunSpec, simulate
from reserve_occupy_sim.model.workload import MathReasoningShape, generate
from reserve_occupy_sim.studies import regimes

ROOT = Path(__file__).resolve().parents[2]
COST = preset("qwen3-8b-h20")
# two distinct cells, one filtered (0.3), two seeds: seconds
SMALL = regimes.Sweep(etas=(1,), train_mults=(0.5,), concurrencies=(8,), truncations=(0.03,),
                      filter_rates=(0.0, 0.3), seeds=2, batches=8, groups=64, batch_size=4)
# the labels whose rule trains its no-gradient groups (zero advantage): they take more batches
TRAINS_THEM = {"nemo_in_order", "nemo_weight_fifo", "nemo_windowed", "nemo_ready_first",
               "prime_rl"}


@pytest.fixture(scope="module")
def fresh():
    return {"cost": COST.name, **regimes.compact(regimes.run_sweep(COST, SMALL, progress=False))}


def test_which_rules_train_their_no_gradient_groups():
    for label, options, _ in regimes._policies(regimes.Cell("x", 1, filter_rate=0.3), SMALL, 8):
        policy = make_policy(label.split("/")[0], regimes.REFERENCES.get(label, 1),
                             **dict(options))
        assert policy.filters is (label not in TRAINS_THEM), label


def test_a_filtered_cell_runs_every_rule_over_the_same_prompts(fresh):
    filtered = [c for c in fresh["cells"] if c["filter_rate"] > 0]
    assert filtered
    for c in filtered:
        assert c["measure"] == FILTERED_MEASURE
        for label, runs in c["runs"].items():
            took = [r["batches"] for r in runs]
            if label in TRAINS_THEM:  # about 8 / (1 - 0.3) batches
                assert all(n > SMALL.batches for n in took), (label, took)
            else:  # it filters: the plain run
                assert took == [SMALL.batches] * SMALL.seeds, (label, took)
    for c in fresh["cells"]:
        if c["filter_rate"] == 0:  # measured as before: no tag, no batches
            assert "measure" not in c
            assert all("batches" not in r for runs in c["runs"].values() for r in runs)


def test_the_cells_runs_are_the_gradient_batches_runs(fresh):
    c = next(c for c in fresh["cells"] if c["filter_rate"] > 0)
    cost = regimes.scaled(COST, c["train_mult"], c["concurrency"])
    for seed in range(SMALL.seeds):
        wl = generate(seed, MathReasoningShape(groups=SMALL.groups, truncated=c["truncated"]))
        filt = RewardFilter(c["filter_rate"], seed=seed)
        for label in ("nemo_in_order", "reserve_occupy"):
            def run(gradient_batches: bool):
                r, _ = simulate(RunSpec(label, c["eta"], SMALL.batches, SMALL.batch_size,
                                        filtering=filt, gradient_batches=gradient_batches),
                                wl, cost)
                return r
            new, plain = run(True), run(False)
            assert c["runs"][label][seed]["steady"] == regimes.compact(new.steady_throughput)
            assert c["runs"][label][seed]["batches"] == new.batches
            if label == "reserve_occupy":  # it filters: the same run
                assert new.to_json() == plain.to_json()
            else:  # in_order ran more batches, and trained as many groups with a gradient
                assert new.batches > plain.batches
                assert new.tokens_useful > plain.tokens_useful


def _old_measure(result: dict) -> dict:
    """``result`` as a map stored before the measure: no tag, no batches, and figures of its own
    in the columns of the rules that train their no-gradient groups (every column of the
    unfiltered cells, too, which must be kept as they are)."""
    old = copy.deepcopy(result)
    for c in old["cells"]:
        if c["filter_rate"] > 0:
            del c["measure"]
            for runs in c["runs"].values():
                for r in runs:
                    r.pop("batches", None)
            for label in TRAINS_THEM:
                c["ratios"][label]["mean"] = 0.5
                c["runs"][label][0]["steady"] = 1.0
        else:
            c["ratios"]["nemo_in_order"]["mean"] = 0.25
    old["definitions"].pop("measure")
    old["definitions"]["warmup"] = "first fifth of the batches left out"
    return json.loads(json.dumps(old))


def _filtered_keys(result: dict) -> list[tuple]:
    return list(dict.fromkeys((c["eta"], *regimes._point(c)) for c in result["cells"]
                              if c["filter_rate"] > 0))


def test_a_stored_map_of_the_old_measure_is_measured_again(fresh):
    old = _old_measure(fresh)
    keys = _filtered_keys(fresh)
    assert len(keys) == 2  # the workload and the filter slice's
    assert regimes.unmeasured(old) == keys
    got = copy.deepcopy(old)
    assert regimes.remeasure_filtered(got, COST) == keys
    for mine, new, was in zip(got["cells"], fresh["cells"], old["cells"]):
        assert mine == (new if mine["filter_rate"] > 0 else was)
    assert got["definitions"] == fresh["definitions"]
    assert regimes.unmeasured(got) == []
    assert regimes.remeasure_filtered(got, COST) == []  # nothing left to measure
    # a cell the selection leaves out stays as it was stored
    kept = copy.deepcopy(old)
    assert regimes.remeasure_filtered(kept, COST, select=lambda cell: cell.eta > 1) == []
    assert kept == old
    # add_peers migrates first: the map it leaves is the fresh one
    via_peers = copy.deepcopy(old)
    assert regimes.add_peers(via_peers, COST) == keys
    assert [c for c in via_peers["cells"] if c["filter_rate"] > 0] == \
        [c for c in fresh["cells"] if c["filter_rate"] > 0]


def test_a_rule_that_filters_must_make_its_stored_run_again(fresh):
    old = _old_measure(fresh)
    cell = next(c for c in old["cells"] if c["filter_rate"] > 0)
    cell["runs"]["tinker"][1]["steady"] *= 1.001
    before = copy.deepcopy(old)
    with pytest.raises(regimes.StoredFigureMoved, match="tinker filters"):
        regimes.remeasure_filtered(old, COST)
    assert old == before  # nothing written


def test_keep_rows_keeps_the_rows_of_cells_not_rerun():
    head = "| η | a |\n|---|---|\n"
    plain, filtered = "| 1 | 0.25 | 8 | 0.03 | 0 | {} |\n", "| 1 | 0.25 | 8 | 0.03 | 0.2 | {} |\n"
    old = head + plain.format("x1") + filtered.format("y1")
    new = head + plain.format("x2") + filtered.format("y2")
    assert regimes.keep_rows(new, old, [(1, 0.25, 8, 0.03, 0.2)]) == \
        head + plain.format("x1") + filtered.format("y2")
    assert regimes.keep_rows(new, None, []) == new


def test_add_peers_command_measures_the_old_cells_again(tmp_path, fresh, capsys):
    results = tmp_path / "results"
    results.mkdir()
    path = results / "regimes.json"
    path.write_text(json.dumps(_old_measure(fresh)))
    argv = ["regimes", "--add-peers", "--results-dir", str(results), "--img-dir",
            str(tmp_path / "img"), "--no-progress"]
    assert sim_cli(argv) == 0
    assert f"{len(_filtered_keys(fresh))} filtered cells measured again" in \
        capsys.readouterr().out
    got = json.loads(path.read_text())
    want = {**_old_measure(fresh), "definitions": fresh["definitions"]}
    want["cells"] = [c if c["filter_rate"] == 0 else n
                     for c, n in zip(want["cells"], fresh["cells"])]
    assert got == want
    tables = (results / "tables.md").read_text()
    assert "## exp6_cells" in tables and "## exp6_regimes" in tables
    assert (tmp_path / "img" / "sim_regimes_filtering.png").exists()


def test_every_filtered_cell_of_the_stored_map_is_measured_over_the_same_prompts():
    reg = json.loads((ROOT / "docs/results/regimes.json").read_text())
    assert regimes.unmeasured(reg) == []
    n = reg["sweep"]["batches"]
    filtered = [c for c in reg["cells"] if c["filter_rate"] > 0]
    assert len({(c["eta"], *regimes._point(c)) for c in filtered}) == 56
    for c in filtered:
        assert c["measure"] == FILTERED_MEASURE
        for label, runs in c["runs"].items():
            took = [r.get("batches") for r in runs if "steady" in r]
            if label in TRAINS_THEM:
                assert took and min(took) > n, (c, label)
            else:
                assert took == [n] * len(took), (c, label)
    for c in reg["cells"]:
        if c["filter_rate"] == 0:
            assert "measure" not in c
            assert all("batches" not in r for runs in c["runs"].values() for r in runs)


def test_the_evidence_block_reads_the_maps_runs(fresh):
    """``regimes_stretch`` (the block ``exp6_same_prompts``): its same-prompts figure at the map's
    length is the map's; the drop path filters, so both measures give it the same run; in_order
    takes more batches only under the new measure."""
    from reserve_occupy_sim.studies import regimes_stretch

    key = next(k for k in _filtered_keys(fresh) if k[1] == 0.5)
    got = regimes_stretch.run(COST, cells=(key,), lengths=(SMALL.batches, 2 * SMALL.batches),
                              seeds=SMALL.seeds, groups=SMALL.groups,
                              batch_size=SMALL.batch_size)
    (e,) = got["cells"]
    cell = next(c for c in fresh["cells"] if (c["eta"], *regimes._point(c)) == key)
    n = str(SMALL.batches)
    for label in ("nemo_in_order", "nemo_weight_fifo", regimes.IN_ORDER_DROP):
        assert regimes.compact(e["ratios"]["same prompts"][n][label]["mean"]) == \
            cell["ratios"][label]["mean"]
    assert e["regime"] == cell["regime"]
    for length in e["ratios"]["old"]:
        assert e["ratios"]["old"][length][regimes.IN_ORDER_DROP] == \
            e["ratios"]["same prompts"][length][regimes.IN_ORDER_DROP]
        assert e["batches"]["old"][length] == [int(length)] * SMALL.seeds
        assert min(e["batches"]["same prompts"][length]) > int(length)
    text = regimes_stretch.table(got)
    assert f"{e['ratios']['old'][n]['nemo_in_order']['mean']:.4f}" in text
