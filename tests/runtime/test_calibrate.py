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


def _measured(seed: int, a: float, train_s: float) -> dict:
    """One run's ``measure`` as the fit reads it: requests of decode cost ``a`` per token
    (prefill 2e-4, per request 3e-4), whole-batch steps of ``train_s`` + 2e-4 s a token."""
    return {"requests": _synthetic(2e-4, a, 3e-4, noise=0.0, n=50, seed=seed),
            "whole": [(t, train_s + 2e-4 * t) for t in (900, 1500, 2100)], "streamed": [],
            "syncs": [0.05], "refit": "keep", "prompts": {}, "prompt_mean": 20.0}


def test_the_fit_on_each_half_of_the_grid_gives_each_term_its_spread():
    """``fit_halves``: the runs of the even-indexed seeds fitted apart from the odd ones', so
    the results say how far each fitted term moves between two grids of half the size."""
    bench = _bench()
    runs = [{"seed": s} for s in (0, 1, 2, 3)]
    measured = [_measured(s, 5e-3 if s % 2 == 0 else 6e-3, 0.25 if s % 2 == 0 else 0.35)
                for s in (0, 1, 2, 3)]
    even, odd = bench.fit_halves(runs, measured)
    assert even["decode"]["step_s"] == pytest.approx(5e-3, rel=1e-6)
    assert odd["decode"]["step_s"] == pytest.approx(6e-3, rel=1e-6)
    assert (bench.term(even, "train", "fixed_s"), bench.term(odd, "train", "fixed_s")) == \
        pytest.approx((0.25, 0.35), rel=1e-6)
    assert bench.term(even, "chunk", "chunk_overhead_s") is None  # no streaming run
    assert bench.fit_halves(runs[:1], measured[:1]) is None  # one seed: no second half
    lines = bench._halves_lines({"fit": bench.fit_costs(measured), "fit_halves": [even, odd],
                                 "runs": runs})
    assert "half A: seeds 0, 2; half B: seeds 1, 3" in lines[1]
    (step,) = [x for x in lines if "`step_s`" in x]
    assert step.endswith("| 5 ms | 6 ms | 17% |")  # |5 / 6 - 1| = 16.7 %
    assert not [x for x in lines if "chunk_overhead_s" in x]  # not measured: not printed


def test_the_simulated_engine_has_the_grid_s_shape_and_the_engine_s_slots():
    """A grid of 12 groups of 4 at eta 1 holds 96 sequences in flight by the rules, more than
    the bench's engine runs at once (max_num_seqs 64): the simulated instance is capped to it;
    at eta 0 (48) it is not. The batches are 12 groups."""
    bench = _bench()
    fit = bench.fit_costs([_measured(s, 5e-3, 0.25) for s in (0, 1)])
    assert bench.cost_model(fit, 1, False, "keep", shape=(12, 4)).concurrency == 64
    assert bench.cost_model(fit, 0, False, "keep", shape=(12, 4)).concurrency == 48
    assert bench.cost_model(fit, 1, False, "keep").concurrency == 32  # 2 x 4 x 4
    wl = bench.workload(0, {}, 20.0, 30, 96, 8.0, 1.5, group=4)
    run = {"policy": "nemo_in_order", "eta": 1, "streaming": False, "refit": "keep",
           "steps": 2, "warmup_steps": 1}
    sim = bench.simulate_row(run, fit, wl, shape=(12, 4))
    assert sim["steady_trained_tok_s"] > 0
    trained = sim["trained_tok_s"] * sim["wall_s"]
    assert trained == pytest.approx(sum(sum(g.response_lens) for g in wl.groups[:24]))


def test_nnls_keeps_every_coefficient_non_negative():
    import numpy as np

    bench = _bench()
    x = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    y = np.array([3.0, 2.0, 1.0])  # a negative slope: pinned at 0, the mean is the intercept
    assert list(bench.nnls(x, y)) == pytest.approx([2.0, 0.0])


def test_the_page_is_rendered_from_the_results_file():
    """The committed page is the instrument's grid (``comparisons``, A/A rows first), rendered
    from the committed results; an A/A comparison simulates the same run twice (ratio 1)."""
    bench = _bench()
    results = json.loads(bench.RESULTS.read_text())
    assert "comparisons" in results and results["instrument"]["order"] == "crossover"
    assert bench.doc_block(bench.DOC.read_text()) == bench.render(results)
    rows = bench.compared_rows(results)
    assert [r for r in rows if r["aa"]] and all(
        r["sim"]["ratio"] == 1.0 == r["sim_revised"]["ratio"] for r in rows if r["aa"])
    assert all(math.isfinite(r["sim"]["steady_trained_tok_s"]) for r in results["runs"])
    assert results["fit_halves"] is not None
    for r in results["runs"]:  # a changed number is caught: every simulated run 1.5x faster
        if r["policy"] == "reserve_occupy":
            r["sim"]["steady_trained_tok_s"] *= 1.5
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
