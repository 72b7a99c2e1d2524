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


def test_the_docs_table_is_rendered_from_the_results_file():
    bench = _bench()
    results = json.loads(bench.RESULTS.read_text())
    assert bench.doc_block(bench.DOC.read_text()) == bench.render(results)
    assert all(FIELDS <= set(r) for r in results["runs"])
    refs = [r for r in results["runs"] if (r["policy"], r["streaming"], r["refit"]) == bench.REF]
    assert refs and all(r["ratio"]["gen_tok_s"] == 1.0 for r in refs)
    results["runs"][1]["gen_tok_s"] += 50.0  # a changed number is caught
    assert bench.doc_block(bench.DOC.read_text()) != bench.render(results)


def test_the_grid_streams_only_the_rules_that_stream():
    bench = _bench()
    assert bench.grid(["verl_drop", "nemo_weight_fifo", "unbounded"], [1], ["keep"],
                      [False, True]) == [
        ("verl_drop", False, "keep", 1), ("nemo_weight_fifo", False, "keep", 1),
        ("nemo_weight_fifo", True, "keep", 1), ("unbounded", False, "keep", 1),
        ("unbounded", True, "keep", 1)]
    # the committed results hold NeMo-RL as shipped: every row has its ratio to it; a results
    # file without that row (an older grid) renders without the column
    results = json.loads(bench.RESULTS.read_text())
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
    bench = _bench()
    grid = bench.grid(["reserve_occupy", "nemo_in_order"], [1], ["keep"], [False, True])
    assert grid == [("reserve_occupy", False, "keep", 1), ("reserve_occupy", True, "keep", 1),
                    ("nemo_in_order", False, "keep", 1), ("nemo_in_order", True, "keep", 1)]
    runs = await bench.main(grid, [0], 2, bench.MEDIAN, bench.SIGMA, tmp_path / "rows.jsonl",
                            engine=engine)
    assert [(r["policy"], r["streaming"]) for r in runs] == [(p, s) for p, s, _, _ in grid]
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 4
    for r in runs:
        assert FIELDS <= set(r) and r["steps"] == 2 and r["staleness_max"] <= 1
        assert r["tokens_trained"] > 0 and 0 <= r["trainer_idle"] <= 1
    assert runs[2]["ratio"] == {k: 1.0 for k in bench.RATIO_KEYS}
    assert runs[0]["ratio"]["gen_tok_s"] == runs[0]["gen_tok_s"] / runs[2]["gen_tok_s"]
    # ... and to NeMo-RL as shipped (nemo_in_order streaming, keep), the table's last column
    assert runs[3]["ratio_shipped"] == {k: 1.0 for k in bench.RATIO_KEYS}
    assert runs[0]["ratio_shipped"]["trained_tok_s"] == (runs[0]["trained_tok_s"]
                                                         / runs[3]["trained_tok_s"])
    table = bench.render({"runs": runs}).splitlines()
    assert "x shipped" in table[0] and "nemo_in_order (shipped) | on | keep" in table[5]
    assert table[5].endswith(" 1.00 / 1.00 / 1.00 |")
    doc, out = tmp_path / "peers.md", tmp_path / "peers_compare.json"
    shutil.copy(bench.DOC, doc)
    results = {"steps": 2, "runs": runs}
    bench.write(results, out, doc)
    written = json.loads(out.read_text())
    assert bench.doc_block(doc.read_text()) == bench.render(written)
    written["runs"][0]["units_dropped"] += 3
    assert bench.doc_block(doc.read_text()) != bench.render(written)
