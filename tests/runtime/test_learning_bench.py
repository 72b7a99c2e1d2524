"""``make bench-learning`` (bench/learning.py): its statistics against hand computations (the
curve at a time, the time to a target, the t-interval, the per-seed pairing), bad input refused
in one line with exit status 2, the page docs/learning.md is what the command last wrote, and a
tiny grid on the real engine (every row for every seed, the order rotated, each checkpoint
scored at its step's time)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "learning.py"
EPS = 2.2e-16


def _bench():
    return load_bench("learning")


CURVE = [{"step": 0, "time_s": 0.0, "reward": 0.2, "greedy_reward": 0.3},
         {"step": 10, "time_s": 4.0, "reward": 0.4, "greedy_reward": 0.5},
         {"step": 20, "time_s": 10.0, "reward": 0.7, "greedy_reward": 0.6}]


def test_the_curve_at_a_time_and_the_time_to_a_target():
    b = _bench()
    assert b.at_time(CURVE, 2.0) == pytest.approx(0.3, rel=4 * EPS)  # halfway 0.2 -> 0.4
    assert b.at_time(CURVE, 7.0) == pytest.approx(0.55, rel=4 * EPS)  # halfway 0.4 -> 0.7
    assert b.at_time(CURVE, 99.0) == 0.7 and b.at_time(CURVE, -1.0) == 0.2  # held
    assert b.at_time(CURVE, 7.0, "greedy_reward") == pytest.approx(0.55, rel=4 * EPS)
    assert b.time_to(CURVE, 0.5) == pytest.approx(4.0 + 6.0 / 3, rel=4 * EPS)  # 1/3 of 0.3
    assert b.time_to(CURVE, 0.1) == 0.0 and b.time_to(CURVE, 0.71) is None


def test_the_mean_and_its_t_interval():
    b = _bench()
    x = b.mean_interval([1.0, 2.0, 3.0])  # sd 1, t(0.95, 2) = 2.920
    assert (x["n"], x["mean"], x["sd"]) == (3, 2.0, 1.0)
    assert (x["lo"], x["hi"]) == pytest.approx((2 - 2.920 / math.sqrt(3),
                                                2 + 2.920 / math.sqrt(3)), rel=8 * EPS)
    one = b.mean_interval([0.5, None])
    assert one["mean"] == 0.5 and one["lo"] is None
    assert b.mean_interval([])["mean"] is None


def _runs(shift: list[float], speed: float) -> list[dict]:
    """Rows eta 0 and eta 1 for 3 seeds: eta 1 ``shift[seed]`` higher at every point and
    ``speed`` times faster."""
    out = []
    for s in range(3):
        out.append({"row": "eta 0 plain", "seed": s, "curve": CURVE})
        out.append({"row": "eta 1 plain", "seed": s, "curve": [
            {**p, "time_s": p["time_s"] / speed, "reward": p["reward"] + shift[s],
             "greedy_reward": p["greedy_reward"] + shift[s]} for p in CURVE]})
    return out


def test_each_row_is_paired_per_seed_with_the_plain_eta_0_row():
    b = _bench()
    summ = b.summarize(_runs([0.01, 0.02, 0.03], 2.0))
    assert summ["base"] == "eta 0 plain"
    assert summ["t_fixed_s"] == {0: 5.0, 1: 5.0, 2: 5.0}  # eta 1 ends at 10 / 2
    assert summ["target"] == pytest.approx(0.68, rel=4 * EPS)  # 0.7 - 0.02
    base, fast = summ["rows"]
    # eta 0 at 5 s: 0.4 + 0.3 / 6 = 0.45; eta 1 has ended at 5 s: 0.7 + shift
    assert base["fixed"]["mean"] == pytest.approx(0.45, rel=8 * EPS)
    assert fast["fixed"]["mean"] == pytest.approx(0.72, rel=8 * EPS)
    d = fast["d_final"]  # 0.01, 0.02, 0.03: mean 0.02, sd 0.01
    assert d["mean"] == pytest.approx(0.02, rel=8 * EPS)
    assert (d["lo"], d["hi"]) == pytest.approx((0.02 - 2.920 * 0.01 / math.sqrt(3),
                                                0.02 + 2.920 * 0.01 / math.sqrt(3)), rel=1e-9)
    assert d["resolved"]  # [0.0031, 0.0369] excludes 0
    assert fast["d_fixed"]["resolved"] and fast["d_fixed"]["mean"] == pytest.approx(0.27)
    # a shift that changes sign between seeds is not resolved
    mixed = b.summarize(_runs([0.03, -0.02, 0.01], 1.0))["rows"][1]["d_final"]
    assert not mixed["resolved"] and mixed["lo"] < 0 < mixed["hi"]
    # time to the target 0.68: eta 0 at 4 + 6 x 0.28 / 0.3 = 9.6 s; eta 1 (shift 0.02 ...)
    assert base["to_target"]["mean"] == pytest.approx(9.6, rel=8 * EPS)
    assert base["reached"] == 3


@pytest.mark.parametrize("args, says", [
    (["--objectives", "magic"], "unknown 'magic'"),
    (["--every", "70"], "is more than --steps 60"),
    (["--seeds", "1,1"], "names a seed twice"),
    (["--lr", "nan"], "--lr"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_the_page_is_rendered_from_the_results_file():
    b = _bench()
    results = json.loads(b.RESULTS.read_text())
    assert b.doc_block(b.DOC.read_text()) == b.render(results)
    results["runs"][0]["curve"][-1]["reward"] += 0.1  # a changed number is caught
    results["summary"] = b.summarize(results["runs"], results["target"])
    assert b.doc_block(b.DOC.read_text()) != b.render(results)


@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_a_tiny_learning_grid_on_the_real_engine(engine):
    b = _bench()
    rows = [(0, "plain"), (None, "plain")]
    results = await b.main(rows, [0, 1], steps=2, every=1, lr=3e-4, samples=2,
                           engine=engine, log=lambda _: None)
    runs = results["runs"]
    # every row for every seed; seed 1 starts with the second row
    assert [(r["seed"], r["row"]) for r in runs] == [
        (0, "eta 0 plain"), (0, "unbounded plain"), (1, "unbounded plain"), (1, "eta 0 plain")]
    for r in runs:
        c = r["curve"]
        assert [p["step"] for p in c] == [0, 1, 2]
        assert c[0]["time_s"] == 0.0 < c[1]["time_s"] < c[2]["time_s"]
        assert all(0.0 <= p["reward"] <= 1.0 and 0.0 <= p["greedy_reward"] <= 1.0 for p in c)
    # step 0 is the same model scored with the same seeds: the same for both rows of a seed
    assert runs[0]["curve"][0] == runs[1]["curve"][0]
    assert results["summary"]["base"] == "eta 0 plain"
    page = b.render(results)
    assert "| eta 0 plain | " in page and "| unbounded plain | " in page
