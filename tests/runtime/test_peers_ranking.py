"""``make bench-peers-ranking`` (bench/peers_compare.py ``--ranking``, issue 37 item 3): the
comparisons it makes (each eta's A/A first, Reserve-Occupy as it ships against every rule at its
best settings, its levers at the first eta), the levers' ratios printed even where both runs
made the same decisions, the options it refuses, and the table in docs/peers.md is what the
bench last wrote to docs/results/peers_ranking.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peers_compare.py"


def _bench():
    return load_bench("peers_compare")


def test_the_ranking_compares_reserve_occupy_as_it_ships_with_every_rule():
    b = _bench()
    comps = b.ranking((1, 2))
    ro = ("reserve_occupy", True, "keep")
    for eta in (1, 2):
        mine = [c for c in comps if c["a"][3] == eta and c["b"][3] == eta]
        assert mine[0] == {"a": ("nemo_in_order", False, "keep", eta),
                           "b": ("nemo_in_order", False, "keep", eta), "against": "ref",
                           "aa": True}  # the noise floor first
        rules = [c["b"][:2] for c in mine[1:] if not c.get("lever")]
        assert all(c["a"] == (*ro, eta) for c in mine[1:])
        assert rules == list(b.RANKED)
        assert all(c["b"][2] == "keep" for c in mine if not c.get("lever"))
    levers = [(c["b"], c.get("lever", False)) for c in comps[-3:]]
    assert levers == [(("reserve_occupy", True, "abort", 1), True),
                      (("reserve_occupy", False, "keep", 1), True),
                      (("reserve_occupy", True, "keep", 0), False)]
    assert len(comps) == 2 * (1 + len(b.RANKED)) + 3
    assert b.comps_grid(comps)[0] == ("nemo_in_order", False, "keep", 1)


def _compared(diff: list[int], lever: bool) -> dict:
    s = {"median": 1.05, "lo": 1.01, "hi": 1.09, "resolved": True, "pairs": 2}
    row = {"eta": 1, "policy": "reserve_occupy", "streaming": True, "refit": "keep",
           "against": "itself, abort", "aa": False, "lever": lever, "seeds": [0, 1],
           "diff": diff, "same_decisions": all(d == 0 for d in diff), "trained": s, "gen": s,
           "trained_tok_s": [100.0, 100.0], "staleness_max": 1, "staleness_mean": 0.9,
           "units_dropped": 0.0, "wait_s": None, "straggler_s": None}
    return {"instrument": {"level": 0.9, "order": "alternate", "order_seed": 0,
                           "warmup_steps": 1, "interval": "sign", "pin": None},
            "comparisons": [row]}


def test_a_lever_prints_its_ratio_where_a_rule_pair_says_same_decisions():
    b = _bench()
    lever = b.render(_compared([0, 0], lever=True))
    assert "1.050 [1.010, 1.090] | resolved (same decisions)" in lever
    rule = b.render(_compared([0, 0], lever=False))
    assert "same decisions | - | same decisions" in rule and "1.050" not in rule
    assert "| 1.050 [1.010, 1.090] | resolved |" in b.render(_compared([3, 0], lever=True))


@pytest.mark.parametrize("args, says", [
    (["--ranking", "--headline"], "--headline and --ranking are two grids"),
    (["--ranking", "--policies", "areal"], "--policies is not taken with it"),
    (["--ranking", "--streaming", "on"], "--streaming is not taken with it"),
    (["--ranking", "--etas", "0,1"], "--etas takes etas >= 1"),
])
def test_bad_ranking_options_are_one_line_and_exit_2(args, says):
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_the_ranking_table_is_rendered_from_its_results_file():
    b = _bench()
    results = json.loads(b.RANKING_RESULTS.read_text())
    assert results["ranking"] and len(results["comparisons"]) == len(b.ranking((1, 2)))
    page = b.DOC.read_text()
    block = b.doc_block(page, b.RANKING_BEGIN, b.RANKING_END)
    assert block == b.render(results)
    assert b.doc_block(page) != block  # the headline grid's block is another table
    results["comparisons"][1]["trained"]["median"] += 0.01  # a changed number is caught
    assert block != b.render(results)
