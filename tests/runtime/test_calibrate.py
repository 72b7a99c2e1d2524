"""``make calibrate`` (bench/calibrate.py): the fit recovers known costs from synthetic timings
and refuses measurements that cannot identify a term; the page docs/calibration.md is what the
command last wrote (rendered again from docs/results/calibration.json); bad input is refused in
one line with exit status 2; and the command runs end to end on a tiny grid on the real engine
(its fit has every term, every row a simulated ratio, and its page agrees with its json). Whether
the ratios agree within 5 % is a measurement (the page), not a test."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "calibrate.py"


def _bench():
    return load_bench("calibrate")


def test_request_features_measure_concurrency_and_take_out_pauses():
    bench = _bench()
    calls = [bench.Call("g0-c0-s0", 0.0, 2.0, 10, 20), bench.Call("g1-c0-s0", 1.0, 3.0, 12, 20),
             bench.Call("g2-c0-s0", 5.0, 6.0, 8, 0)]  # no tokens: left out
    rows = bench.request_features(calls, pauses=[(1.5, 2.5)], training=[(0.0, 1.0)])
    assert len(rows) == 2
    assert rows[0]["k"] == pytest.approx(1.5) and rows[1]["k"] == pytest.approx(1.5)
    assert rows[0]["d"] == pytest.approx(1.5) and rows[1]["d"] == pytest.approx(1.0)
    assert rows[0]["train"] == pytest.approx(1.0) and rows[1]["train"] == 0.0
    assert (rows[0]["P"], rows[0]["n"]) == (10, 20)


def _synthetic(p: float, a: float, b: float, noise: float, n: int = 400, seed: int = 0):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        P, tokens, k = rng.randint(20, 120), rng.randint(1, 96), rng.uniform(1, 48)
        d = p * P + tokens * (a + b * k)
        rows.append({"d": d * (1 + rng.gauss(0, noise)), "P": P, "n": tokens, "k": k,
                     "train": 0.0})
    return rows


def test_the_decode_fit_recovers_known_costs():
    bench = _bench()
    fit = bench.fit_decode(_synthetic(2e-4, 5e-3, 3e-4, noise=0.02))
    assert fit["prefill_per_token_s"] == pytest.approx(2e-4, rel=0.1)
    assert fit["step_s"] == pytest.approx(5e-3, rel=0.05)
    assert fit["per_request_s"] == pytest.approx(3e-4, rel=0.05)
    assert fit["r2"] > 0.95


def test_the_train_and_chunk_fits_recover_known_costs():
    bench = _bench()
    steps = [(t, 0.25 + 2e-4 * t) for t in (900, 1200, 1500, 2100, 2600)]
    fit = bench.fit_train(steps)
    assert fit["fixed_s"] == pytest.approx(0.25) and fit["per_token_s"] == pytest.approx(2e-4)
    chunks = [(n, t, n * 0.08 + 2e-4 * t) for n, t in ((1, 300), (3, 900), (2, 700))]
    assert bench.fit_chunk(chunks, 2e-4)["chunk_overhead_s"] == pytest.approx(0.08)


def test_a_fit_the_measurements_cannot_identify_is_refused():
    bench = _bench()
    flat = [dict(r, k=8.0) for r in _synthetic(2e-4, 5e-3, 3e-4, noise=0.0)]
    with pytest.raises(bench.FitError, match="concurrency never varied") as err:
        bench.fit_decode(flat)
    assert err.value.term == "decode time per token against concurrency"
    with pytest.raises(bench.FitError, match="at least 8"):
        bench.fit_decode(_synthetic(2e-4, 5e-3, 3e-4, 0.0, n=5))
    with pytest.raises(bench.FitError, match="same number of tokens"):
        bench.fit_train([(1000, 0.5)] * 4)
    with pytest.raises(bench.FitError, match="no streaming step"):
        bench.fit_chunk([(0, 0, 0.0)], 2e-4)


def test_nnls_keeps_every_coefficient_non_negative():
    import numpy as np

    bench = _bench()
    x = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    y = np.array([3.0, 2.0, 1.0])  # a negative slope: pinned at 0, the mean is the intercept
    assert list(bench.nnls(x, y)) == pytest.approx([2.0, 0.0])


def test_the_page_is_rendered_from_the_results_file():
    bench = _bench()
    results = json.loads(bench.RESULTS.read_text())
    assert bench.doc_block(bench.DOC.read_text()) == bench.render(results)
    refs = [r for r in results["runs"]
            if (r["policy"], r["streaming"], r["refit"]) == bench.peers.REF]
    assert refs and all(r["ratio"]["trained_tok_s"] == 1.0 == r["sim_ratio"]["trained_tok_s"]
                        == r["sim_revised_ratio"]["trained_tok_s"] for r in refs)
    assert all(math.isfinite(r["sim"]["trained_tok_s"]) for r in results["runs"])
    results["runs"][1]["sim"]["trained_tok_s"] *= 1.1  # a changed number is caught
    bench.add_sim_ratios(results["runs"])
    assert bench.doc_block(bench.DOC.read_text()) != bench.render(results)


@pytest.mark.parametrize("args, says", [
    (["--policies", "reserve_occupy", "--median", "nan"], "--median must be a number"),
    (["--steps", "2"], "--steps must be >= 3"),
    (["--etas", "one"], "comma-separated whole numbers"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_a_tiny_calibration_runs_end_to_end(engine, tmp_path):
    bench = _bench()
    grid = [("reserve_occupy", True, "keep", 1)]  # against the reference; and the A/A pair
    results = await bench.main(grid, [0], 4, bench.peers.MEDIAN, bench.peers.SIGMA,
                               engine=engine, raw=tmp_path / "raw.json", warmup_steps=1)
    fit = results["fit"]
    d, t, c = fit["decode"], fit["train"], fit["chunk"]
    assert d["requests"] > 50 and d["k_max"] > d["k_min"]
    assert d["step_s"] + d["per_request_s"] * d["k_max"] > 0 and t["steps"] >= 3
    assert set(fit["sync_s"]) == {"keep"} and fit["sync_s"]["keep"] > 0
    assert c is not None and c["chunks"] >= 1  # the streaming run trained chunks
    runs = results["runs"]  # pair 0: A/A (ref, ref); then (reserve_occupy, ref) run b first
    assert [(r["policy"], r["streaming"]) for r in runs] == [
        ("nemo_in_order", False), ("nemo_in_order", False), ("nemo_in_order", False),
        ("reserve_occupy", True)]
    for r in runs:
        assert r["sim"]["wall_s"] > 0 and r["sim"]["steady_trained_tok_s"] > 0
    # the simulated streaming run streams (chunks of one group), the whole-batch one does not
    assert runs[3]["sim"]["chunks"] > 4 and runs[2]["sim"]["chunks"] == 0
    rows = bench.compared_rows(results)
    assert [(r["aa"], r["policy"]) for r in rows] == [(True, "nemo_in_order"),
                                                      (False, "reserve_occupy")]
    # the A/A pair simulates the same run twice: its simulated ratio is 1 exactly
    assert rows[0]["sim"]["ratio"] == 1.0 == rows[0]["sim_revised"]["ratio"]
    assert rows[1]["sim"]["ratio"] == (runs[3]["sim"]["steady_trained_tok_s"]
                                       / runs[2]["sim"]["steady_trained_tok_s"])
    assert rows[1]["trained"]["median"] == (runs[3]["steady_trained_tok_s"]
                                            / runs[2]["steady_trained_tok_s"])
    # the simulator ran the run's own workload: unit g0's answers are the caps the run drew
    dump = json.loads((tmp_path / "raw.json").read_text())
    assert dump["measured"][3]["prompts"]["g0"] > 0
    wl = bench.workload(0, dump["measured"][3]["prompts"], 0.0, 4, 96, bench.peers.MEDIAN,
                        bench.peers.SIGMA)
    tail = bench.peers.LongTail(None, 96, 0, bench.peers.MEDIAN, bench.peers.SIGMA)
    assert wl.groups[0].response_lens == tuple(tail.cap(f"g0-c{j}") for j in range(4))
    page = bench.render(results).splitlines()
    body = page[[i for i, x in enumerate(page) if x.startswith("| eta | policy")][-1] + 2:]
    assert body[0].startswith("| 1 | A/A: nemo_in_order | off | keep | itself | 1 | ")
    assert body[1].startswith("| 1 | reserve_occupy | on | keep | ref | 1 | ")
    doc, out = tmp_path / "calibration.md", tmp_path / "calibration.json"
    shutil.copy(bench.DOC, doc)
    bench.write(results, out, doc)
    written = json.loads(out.read_text())
    assert bench.doc_block(doc.read_text()) == bench.render(written)
    written["fit"]["decode"]["step_s"] *= 2
    assert bench.doc_block(doc.read_text()) != bench.render(written)
    # --from-raw fits and renders the same page again without the engine
    p = subprocess.run([sys.executable, str(SCRIPT), "--from-raw", str(tmp_path / "raw.json")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "| 1 | A/A: nemo_in_order | off | keep | itself | 1 | " in p.stdout
