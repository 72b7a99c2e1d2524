"""``calibrate.py --prior-fit``: each run of a grid simulated again with the terms another grid
fitted (out of sample). With the grid's own fit as the prior the out-of-sample ratios are the
in-sample ones exactly (same workload, same terms, a deterministic simulator); with another fit
they move; a prior the grid cannot use is reported and the grid's results are kept; a file
that is not a results file of calibrate.py is one line and exit 2, before anything runs."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench
from .test_calibrate import _measured

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "calibrate.py"


def _grid():
    """Two seeds of (reference, Reserve-Occupy whole batch) at eta 1, one comparison."""
    runs, pairs, measured = [], [], []
    for seed in (0, 1):
        for policy in ("nemo_in_order", "reserve_occupy"):
            runs.append({"run": len(runs), "seed": seed, "policy": policy, "eta": 1,
                         "streaming": False, "refit": "keep", "steps": 4, "warmup_steps": 1})
            measured.append(_measured(seed, 5e-3, 0.25))
        pairs.append({"comparison": 0, "a": {"run": len(runs) - 1}, "b": {"run": len(runs) - 2}})
    comparisons = [{"aa": False, "eta": 1, "policy": "reserve_occupy", "streaming": False,
                    "refit": "keep", "against": "ref",
                    "trained": {"median": 1.0, "lo": 0.99, "hi": 1.01, "pairs": 2,
                                "resolved": False}}]
    return {"runs": runs, "pairs": pairs, "comparisons": comparisons}, measured


def _finish(bench, prior=None):
    compared, measured = _grid()
    return bench.finish(compared, measured, 4, [0, 1], 8.0, 1.5, 0.0, shape=(2, 4),
                        prior=prior)


def test_the_grid_s_own_fit_as_prior_gives_the_in_sample_ratios_exactly():
    bench = _bench()
    own = _finish(bench)
    assert bench.PRIOR not in own["runs"][0] and "prior_fit" not in own
    again = _finish(bench, prior=copy.deepcopy(own["fit"]))
    for r in again["runs"]:
        assert r[bench.PRIOR]["sim_revised"] == r["sim_revised"]
        assert r[bench.PRIOR][bench.ONE_WAY]["steady_trained_tok_s"] > 0
    (row,) = bench.compared_rows(again)
    assert row[bench.PRIOR]["sim_revised"] == row["sim_revised"]


def test_another_fit_moves_the_out_of_sample_ratios_and_the_page_shows_them():
    bench = _bench()
    own = _finish(bench)
    prior = copy.deepcopy(own["fit"])
    prior["decode_with_overlap"]["step_s"] *= 4  # a slower engine: the rules' ratio moves
    prior["train"]["per_token_s"] /= 4
    results = _finish(bench, prior=prior)
    speeds = [(r["sim_revised"]["steady_trained_tok_s"],
               r[bench.PRIOR]["sim_revised"]["steady_trained_tok_s"]) for r in results["runs"]]
    assert all(a != b for a, b in speeds)
    page = _prior_page(bench, results)
    assert "**Out of sample.**" in page and "busy flag, prior terms" in page
    assert f"decode {prior['decode_with_overlap']['step_s'] * 1e3:.2f} ms" in page
    (row,) = bench.compared_rows(results)
    cell = f"{row[bench.PRIOR]['sim_revised']['ratio']:.3f}"
    assert [x for x in page.splitlines() if x.startswith("| 1 | reserve_occupy | off | ref |")
            and cell in x]
    assert _prior_page(bench, own) == ""


def test_a_prior_the_grid_cannot_use_is_reported_and_the_grid_kept():
    bench = _bench()
    own = _finish(bench)
    prior = copy.deepcopy(own["fit"])
    prior["sync_s"] = {"abort": 0.1}  # the grid refits with keep
    results = _finish(bench, prior=prior)
    assert "keep" in results["prior_why"] and bench.PRIOR not in results["runs"][0]
    assert [r["sim_revised"] for r in results["runs"]] == [r["sim_revised"] for r in own["runs"]]
    assert "not simulated" in _prior_page(bench, results)


def _bench():
    return load_bench("calibrate")


def _prior_page(bench, results):
    """The page's out-of-sample part (``render_compared`` ends with it)."""
    return "\n".join(bench._prior_lines(results, bench.compared_rows(results)))


@pytest.mark.parametrize("content, says", [
    (None, "prior.json: no such file"),
    ("{not json", "not a results file of calibrate.py"),
    ("[1, 2]", "no 'fit' object"),
    ('{"fit": {"decode_with_overlap": {"step_s": 1}}}', "no 'decode_with_overlap' with"),
])
def test_a_bad_prior_file_is_one_line_and_exit_2(tmp_path, content, says):
    path = tmp_path / "prior.json"
    if content is not None:
        path.write_text(content)
    p = subprocess.run([sys.executable, str(SCRIPT), "--prior-fit", str(path),
                        "--from-raw", str(tmp_path / "none.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_the_committed_results_are_a_usable_prior():
    bench = _bench()
    fit = bench.read_prior(bench.RESULTS, lambda msg: pytest.fail(msg))
    assert fit == json.loads(bench.RESULTS.read_text())["fit"]
