"""``make bench-peers`` (bench/peers_compare.py): the table in docs/peers.md is what the bench
last measured (rendered again from docs/results/peers_compare.json: a hand edit, or a results
file without its table, fails), bad input is refused in one line with exit status 2, and the
bench runs a tiny grid on the real engine whose ``--write`` table agrees with its json."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peers_compare.py"
FIELDS = {"policy", "streaming", "refit", "eta", "seed", "steps", "wall_s", "gen_tok_s",
          "trained_tok_s", "steps_per_s", "staleness_max", "staleness_mean", "units_dropped",
          "wasted_tokens", "length_ratio", "trainer_idle", "eval_before", "eval_after",
          "reward_gain_per_min", "ratio"}


def _bench():
    return load_bench("peers_compare")


# The full grid of every rule as the bench wrote it before the instrument (3 seeds, eta 1 and 2,
# 144 runs; it was docs/results/peers_compare.json until the headline grid replaced it): the
# tests of the full grid's table read it, whatever grid the docs hold now.
FULL_GRID = Path(__file__).with_name("peers_full_grid.json")


def test_the_docs_table_is_rendered_from_the_results_file():
    bench = _bench()
    results = json.loads(bench.RESULTS.read_text())
    assert bench.doc_block(bench.DOC.read_text()) == bench.render(results)
    if "comparisons" in results:  # a grid measured with the instrument (the headline grid)
        results["comparisons"][1]["trained"]["median"] += 0.05  # a changed number is caught
    else:
        results["runs"][1]["gen_tok_s"] += 50.0
    assert bench.doc_block(bench.DOC.read_text()) != bench.render(results)


def test_the_full_grid_s_rows_hold_every_field_and_the_reference_ratio_one():
    bench = _bench()
    results = json.loads(FULL_GRID.read_text())
    assert all(FIELDS <= set(r) for r in results["runs"])
    refs = [r for r in results["runs"] if (r["policy"], r["streaming"], r["refit"]) == bench.REF]
    assert refs and all(r["ratio"]["gen_tok_s"] == 1.0 for r in refs)
    table = bench.render(results)
    results["runs"][1]["gen_tok_s"] += 50.0  # a changed number is caught
    assert bench.render(results) != table


def test_the_grid_streams_only_the_rules_that_stream():
    bench = _bench()
    assert bench.grid(["verl_drop", "nemo_weight_fifo", "unbounded"], [1], ["keep"],
                      [False, True]) == [
        ("verl_drop", False, "keep", 1), ("nemo_weight_fifo", False, "keep", 1),
        ("nemo_weight_fifo", True, "keep", 1), ("unbounded", False, "keep", 1),
        ("unbounded", True, "keep", 1)]
    # the full grid holds NeMo-RL as shipped: every row has its ratio to it; a results file
    # without that row (an older grid) renders without the column
    results = json.loads(FULL_GRID.read_text())
    assert "x shipped" in bench.render(results)
    assert all(r["ratio_shipped"]["trained_tok_s"] is not None for r in results["runs"])
    older = {"runs": [r for r in results["runs"] if not (r["policy"] == "nemo_in_order"
                                                          and r["streaming"])]}
    assert "x shipped" not in bench.render(older)


@pytest.mark.parametrize("args, says", [
    (["--policies", "reserve_occupy,nemo_fifo"], "unknown policy 'nemo_fifo'"),
    (["--etas", "1,-1"], "eta must be >= 0"),
    (["--etas", "one"], "comma-separated whole numbers"),
    (["--refits", "pause"], "--refits takes abort and/or keep"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_a_tiny_grid_runs_and_its_table_agrees(engine, tmp_path):
    """Reserve-Occupy streaming and NeMo-RL as shipped, one pair of 2 steps each: the A/A row,
    each against the reference, and Reserve-Occupy against NeMo-RL as shipped; the table of
    ``--write`` agrees with its json."""
    bench = _bench()
    grid = bench.grid(["reserve_occupy", "nemo_in_order"], [1], ["keep"], [True])
    assert grid == [("reserve_occupy", True, "keep", 1), ("nemo_in_order", True, "keep", 1)]
    comps = bench.comparisons(grid)
    ref, ro, shipped = (*bench.REF, 1), grid[0], grid[1]
    assert [(c["a"], c["b"], c["against"], c["aa"]) for c in comps] == [
        (ref, ref, "ref", True), (ro, ref, "ref", False), (shipped, ref, "ref", False),
        (ro, shipped, "shipped", False)]
    results = await bench.main(grid, [0], 2, bench.MEDIAN, bench.SIGMA, engine=engine,
                               warmup_steps=1)
    runs = results["runs"]
    assert len(runs) == 8 and [p["first"] for p in results["pairs"]] == ["a", "b", "a", "b"]
    for r in runs:
        assert FIELDS - {"ratio"} <= set(r) and r["steps"] == 2 and r["staleness_max"] <= 1
        assert r["tokens_trained"] > 0 and 0 <= r["trainer_idle"] <= 1
    rows = results["comparisons"]
    assert [(c["policy"], c["streaming"], c["against"]) for c in rows] == [
        ("nemo_in_order", False, "ref"), ("reserve_occupy", True, "ref"),
        ("nemo_in_order", True, "ref"), ("reserve_occupy", True, "shipped")]
    for c, p in zip(rows, results["pairs"]):
        assert c["trained"]["ratios"] == [p["ratio"]] and c["diff"] == [p["diff"]]
    table = bench.render(results).splitlines()
    body = table[[i for i, x in enumerate(table) if x.startswith("|---")][0] + 1:]
    assert "| A/A: nemo_in_order | off | keep | itself | 1 |" in body[0]  # printed first
    assert "| reserve_occupy | on | keep | shipped | 1 |" in body[3]
    doc, out = tmp_path / "peers.md", tmp_path / "peers_compare.json"
    shutil.copy(bench.DOC, doc)
    bench.write(results, out, doc)
    written = json.loads(out.read_text())
    assert bench.doc_block(doc.read_text()) == bench.render(written)
    written["comparisons"][1]["units_dropped"] = 3.0
    assert bench.doc_block(doc.read_text()) != bench.render(written)
