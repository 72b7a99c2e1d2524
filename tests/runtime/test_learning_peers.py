"""``make bench-learning-peers`` (bench/learning.py ``--peers``, issue 39 item 3): each rule's
row runs with the settings it ships with on this runtime, the rows are paired against the
first, the page's peers table is what the command last wrote, bad names are refused in one
line, and a tiny grid of two rules runs on the real engine, each row saying what it trained."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "learning.py"


def _bench():
    return load_bench("learning")


def test_each_rule_runs_as_it_ships_and_validates():
    from runtime.config import load_config

    b = _bench()
    seen = {}
    for peer in b.PEER_ROWS:
        cfg = load_config(None, b.settings(1, "tis", 0, 60, 10, 3e-4, Path("out"), peer))
        seen[peer] = (cfg.staleness.policy, cfg.trainer.streaming, cfg.rollout.refit,
                      cfg.staleness.max_staleness, cfg.trainer.correction.kind)
    assert seen == {"reserve_occupy": ("reserve_occupy", True, "keep", 1, "tis"),
                    "nemo_shipped": ("nemo_in_order", True, "keep", 1, "tis"),
                    "verl_drop": ("verl_drop", False, "keep", 1, "tis"),
                    "areal": ("areal", False, "keep", 1, "tis"),
                    "synchronous": ("synchronous", False, "keep", 1, "tis")}
    # the eta rows keep the demo's own settings (no peer): what docs/learning.md's first
    # table measured
    demo = load_config(None, {})
    cfg = load_config(None, b.settings(2, "plain", 0, 60, 10, 3e-4, Path("out")))
    assert (cfg.trainer.streaming, cfg.rollout.refit) == (demo.trainer.streaming,
                                                          demo.rollout.refit)


def test_peers_rows_are_named_and_paired_against_the_first():
    b = _bench()
    a = b.parse(["--peers", "verl_drop,reserve_occupy", "--etas", "1,2",
                 "--objectives", "plain,tis"])
    assert a.rows[:3] == [("verl_drop", 1, "plain"), ("verl_drop", 2, "plain"),
                          ("verl_drop", 1, "tis")]
    assert len(a.rows) == 8 and a.results == b.PEERS_RESULTS
    assert (a.begin, a.end) == (b.PEERS_BEGIN, b.PEERS_END)
    curve = [{"step": 0, "time_s": 0.0, "reward": 0.2, "greedy_reward": 0.2},
             {"step": 2, "time_s": 4.0, "reward": 0.5, "greedy_reward": 0.4}]
    runs = [{"row": b.row_name(1, "plain", p), "peer": p, "seed": s,
             "curve": [{**c, "reward": c["reward"] + d * (c["step"] > 0)} for c in curve],
             "staleness_mean": 0.5, "staleness_max": 1, "units_dropped": u,
             "units_filtered": min(u, 1), "tokens_trained": 100} for s in (0, 1, 2)
            for p, d, u in (("reserve_occupy", 0.0, 0), ("verl_drop", -0.05 - 0.01 * s, 3))]
    summ = b.summarize(runs)
    assert summ["base"] == "reserve_occupy eta 1 plain"
    drop = summ["rows"][1]["d_final"]  # -0.05, -0.06, -0.07 against the first row
    assert drop["mean"] == pytest.approx(-0.06) and drop["resolved"]
    page = b.render({"setup": {"steps": 2, "every": 1, "lr": 3e-4, "samples": 2,
                               "eval_prompts": 100}, "seeds": [0, 1, 2], "target": None,
                     "wall_s": 60, "runs": runs, "summary": summ})
    assert "(the `reserve_occupy eta 1 plain` row's final, less 0.02)" in page
    assert "| verl_drop eta 1 plain | 0.50 / 1 | 1.0 / 2.0 | 100 |" in page
    assert "| reserve_occupy eta 1 plain | 0.50 / 1 | 0.0 / 0.0 | 100 |" in page


@pytest.mark.parametrize("args, says", [
    (["--peers", "magic"], "unknown 'magic'"),
    (["--peers", "areal,areal"], "names a rule twice"),
    (["--peers", ","], "name at least one"),
])
def test_bad_peers_are_one_line_and_exit_2(args, says):
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_the_peers_table_is_rendered_from_its_results_file():
    b = _bench()
    results = json.loads(b.PEERS_RESULTS.read_text())
    page = b.DOC.read_text()
    assert b.doc_block(page, b.PEERS_BEGIN, b.PEERS_END) == b.render(results)
    results["runs"][0]["curve"][-1]["reward"] += 0.1  # a changed number is caught
    results["summary"] = b.summarize(results["runs"], results["target"])
    assert b.doc_block(page, b.PEERS_BEGIN, b.PEERS_END) != b.render(results)


@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_two_rules_learn_side_by_side_on_the_real_engine(engine):
    b = _bench()
    rows = [("reserve_occupy", 1, "plain"), ("verl_drop", 1, "plain")]
    results = await b.main(rows, [0], steps=2, every=1, lr=3e-4, samples=2, engine=engine,
                           log=lambda _: None)
    runs = results["runs"]
    assert [(r["row"], r["peer"]) for r in runs] == [
        ("reserve_occupy eta 1 plain", "reserve_occupy"), ("verl_drop eta 1 plain", "verl_drop")]
    for r in runs:
        assert [p["step"] for p in r["curve"]] == [0, 1, 2]
        assert r["staleness_max"] is not None and r["staleness_max"] <= 1
        assert r["units_dropped"] is not None and r["tokens_trained"] > 0
    assert results["summary"]["base"] == "reserve_occupy eta 1 plain"
    assert "| verl_drop eta 1 plain | " in b.render(results)
