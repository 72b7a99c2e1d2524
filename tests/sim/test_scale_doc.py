"""``make sim-scale`` (bench/scale.py, issue 38 item 4): docs/scale.md holds the tables the
bench renders from docs/results/scale.json (a hand edit, or a results file changed without its
page, fails here); a tiny run (two batch sizes, a one-node deployment of 3 steps) writes both
blocks with the structure the page promises; the deployment's cost model is the preset's
scaled as its derivation reads. Structure and arithmetic only: no timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest

from reserve_occupy_sim.model.cost import CostError, preset, scale_nodes

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "bench" / "scale.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # type: ignore[union-attr]


def _render(results: dict) -> dict[str, str]:
    return {"core": bench.render_core(results), "sim": bench.render_sim(results)}


def test_the_page_is_rendered_from_the_results_file():
    results = json.loads(bench.RESULTS.read_text())
    assert bench.doc_blocks(bench.DOC.read_text()) == _render(results)
    results["core"]["rows"][0]["ops"]["occupy"]["median"] += 1000.0  # a changed number shows
    assert bench.doc_blocks(bench.DOC.read_text())["core"] != bench.render_core(results)


def test_the_committed_results_cover_the_promised_grid():
    results = json.loads(bench.RESULTS.read_text())
    cells = {(r["eta"], r["B"]) for r in results["core"]["rows"]}
    assert cells == {(e, b) for e in (1, 2) for b in (16, 64, 256, 1024, 4096)}
    s = results["sim"]["settings"]
    assert (s["gpus"], s["engines"], s["batch"], s["steps"]) == (1024, 256, 1024, 100)
    assert "reserve_occupy" in {r["policy"] for r in results["sim"]["rows"]}


def test_a_tiny_run_writes_both_blocks_and_they_agree(tmp_path, capsys):
    doc, out = tmp_path / "scale.md", tmp_path / "scale.json"
    shutil.copy(bench.DOC, doc)
    bench.main(["--batch-sizes", "2,8", "--etas", "1,2", "--rounds", "2", "--units", "40",
                "--min-batches", "3", "--trigger-calls", "100", "--nodes", "1", "--sim-batch",
                "4", "--sim-steps", "3", "--policies", "reserve_occupy,verl_drop",
                "--results", str(out), "--doc", str(doc), "--write"])
    results = json.loads(out.read_text())
    rows = results["core"]["rows"]
    assert [(r["eta"], r["B"]) for r in rows] == [(1, 2), (1, 8), (2, 2), (2, 8)]
    for r in rows:
        assert set(r["ops"]) == set(bench.CORE_OPS)
        for cell in r["ops"].values():
            assert 0 < cell["lo"] <= cell["median"] <= cell["hi"]
    sim = results["sim"]
    assert [r["policy"] for r in sim["rows"]] == ["reserve_occupy", "verl_drop"]
    for r in sim["rows"]:
        assert r["events"] > 0 and r["cpu_s"] > 0 and r["sim_s"] > 0
        assert r["trained"] == 3 * 4 * 8  # 3 steps of 4 groups of 8
        assert r["staleness_max"] <= 1  # both rules bound staleness by eta = 1
    assert bench.doc_blocks(doc.read_text()) == _render(results)
    table = bench.render_sim(results)
    assert "| Reserve–Occupy | 1 |" in table and "| 1.000 |" in table  # its own ratio is 1
    # another peer merges into the same deployment's rows; another deployment replaces them
    bench.main(["--part", "sim", "--nodes", "1", "--sim-batch", "4", "--sim-steps", "3",
                "--policies", "synchronous", "--results", str(out), "--doc", str(doc),
                "--write"])
    merged = json.loads(out.read_text())
    assert {r["policy"] for r in merged["sim"]["rows"]} == {"reserve_occupy", "verl_drop",
                                                            "synchronous"}
    assert merged["core"] == results["core"]
    assert bench.doc_blocks(doc.read_text()) == _render(merged)
    bench.main(["--part", "sim", "--nodes", "2", "--sim-batch", "4", "--sim-steps", "2",
                "--policies", "synchronous", "--results", str(out), "--doc", str(doc),
                "--write"])
    assert [r["policy"] for r in json.loads(out.read_text())["sim"]["rows"]] == ["synchronous"]
    capsys.readouterr()


def test_the_knobs_sized_for_a_small_deployment_scale_with_the_batch():
    assert bench.scaled_options("nemo_in_order", 1024) == {"max_inflight_prompts": 2048,
                                                           "max_buffered_rollouts": 4096}
    assert bench.scaled_options("prime_rl", 64) == {"max_inflight": 4096}
    assert bench.scaled_options("trl", 1024) == {"queue_maxsize": 65536}
    assert bench.scaled_options("verl_drop", 1024) == {}  # its limits are in batches already
    assert bench.scaled_options("nemo_windowed", 16) == {}  # the preset's batch: as shipped
    sim = {"settings": {"nodes": 1, "gpus": 8, "engines": 2, "concurrency": 40,
                        "training_gpus": 6, "batch": 64, "group_size": 8, "steps": 1,
                        "seed": 0, "cost": "c", "python": "3"},
           "rows": [{"policy": p, "label": p, "eta": 1, "options": o, "throughput": t,
                     "sim_s": 10.0, "staleness_mean": 0.5, "staleness_max": 1, "dropped": 0,
                     "aborted": 0, "events": 10, "cpu_s": 1.0}
                    for p, o, t in (("reserve_occupy", {}, 100.0), ("prime_rl", {}, 50.0),
                                    ("prime_rl", {"max_inflight": 4096}, 80.0))]}
    table = bench.render_sim({"sim": sim})
    assert "| prime_rl (as shipped) | 1 | 50 | 2.000 |" in table
    assert "| prime_rl, max_inflight 4,096 | 1 | 80 | 1.250 |" in table


@pytest.mark.parametrize("args, says", [
    (["--policies", "nobody"], "--policies: unknown policy 'nobody'"),
    (["--batch-sizes", "0"], "--batch-sizes"),
    (["--nodes", "0"], "--nodes"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err


def test_n_nodes_train_n_times_the_batch_in_one_node_s_time():
    base = preset("qwen3-8b-h20")
    lengths = [512 + 97 * i % 9000 for i in range(128)]
    for n in (2, 128):
        big = scale_nodes(base, n)
        assert (big.instances, big.concurrency, big.rollout) == (2 * n, 40, base.rollout)
        t1, tn = base.train.batch_time(lengths), big.train.batch_time(lengths * n)
        # the same sum of n-fold larger terms divided by n: a few roundings of 1e-16 each
        assert math.isclose(tn, t1, rel_tol=64 * 2.0 ** -52)
    assert scale_nodes(base, 1) is base
    for bad in (0, -1, 1.5, True):
        with pytest.raises(CostError, match="nodes"):
            scale_nodes(base, bad)
