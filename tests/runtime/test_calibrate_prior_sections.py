"""``calibrate.py --prior-fit``: the prior's optional sections (``chunk``, ``train_contended``,
``train_load``) and its refit pauses are checked with the rest, before anything runs. A
malformed one (a hand-edited prior) used to pass the check and fail in ``finish``, after the
grid, with a traceback and nothing kept; it is now one line naming the section and the field,
exit 2, nothing written. A section the fit did not measure (null, or left out) stays a usable
prior: the simulation runs without it, as it does for a grid's own fit."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench
from .test_calibrate_prior_fit import _finish, _grid

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "calibrate.py"


class Refused(Exception):
    pass


def _refuse(msg: str) -> None:
    raise Refused(msg)


def _committed() -> dict:
    """The committed results' fit: every optional section present (the grid streamed and the
    engine's contention for the trainer was fitted, busy flag and load-shaped)."""
    bench = load_bench("calibrate")
    fit = json.loads(bench.RESULTS.read_text())["fit"]
    assert all(isinstance(fit.get(s), dict) for s in ("chunk", "train_contended", "train_load"))
    return fit


def _edited(path: tuple[str, ...], value: object) -> dict:
    """The committed fit with one entry replaced (``DELETE``: removed)."""
    fit = copy.deepcopy(_committed())
    *parents, last = path
    where = fit
    for p in parents:
        where = where[p]
    if value is DELETE:
        del where[last]
    else:
        where[last] = value
    return fit


DELETE = object()

MALFORMED = [
    (("chunk",), "fast", ("'chunk'", "null or an object")),
    (("chunk",), {}, ("'chunk'", "chunk_overhead_s")),
    (("chunk", "chunk_overhead_s"), DELETE, ("'chunk'", "'chunk_overhead_s'")),
    (("chunk", "chunk_overhead_s"), "0.01", ("'chunk'", "'chunk_overhead_s'")),
    (("chunk", "chunk_overhead_s"), math.nan, ("'chunk'", "'chunk_overhead_s'")),
    (("chunk", "chunk_share"), 1.5, ("'chunk'", "'chunk_share'", "[0, 1]")),
    (("chunk", "chunk_share"), True, ("'chunk'", "'chunk_share'")),
    (("train_contended",), [0.1], ("'train_contended'", "null or an object")),
    (("train_contended",), {}, ("'train_contended'", "fixed_s")),
    (("train_contended", "fixed_s"), DELETE, ("'train_contended'", "'fixed_s'")),
    (("train_contended", "per_token_s"), None, ("'train_contended'", "'per_token_s'")),
    (("train_contended", "rollout_slowdown"), -0.1, ("'train_contended'", "'rollout_slowdown'")),
    (("train_contended", "chunk_overhead_s"), DELETE,
     ("'train_contended'", "'chunk_overhead_s'")),
    (("train_contended", "rollout_load"), "linear",
     ("'train_contended'", "'rollout_load'", "saturating")),
    (("train_load", "rollout_load_n"), "64", ("'train_load'", "'rollout_load_n'")),
    (("train_load", "rollout_load_n"), math.inf, ("'train_load'", "'rollout_load_n'")),
    (("train_load", "rollout_slowdown"), DELETE, ("'train_load'", "'rollout_slowdown'")),
    (("train_load", "rollout_load"), 1, ("'train_load'", "'rollout_load'")),
    (("sync_s", "keep"), "slow", ("'sync_s'", "'keep'")),
    (("sync_s", "keep"), -1.0, ("'sync_s'", "'keep'")),
]


def _read(bench, tmp_path: Path, fit: dict) -> dict:
    path = tmp_path / "prior.json"
    path.write_text(json.dumps({"fit": fit}))
    return bench.read_prior(path, _refuse)


@pytest.mark.parametrize("path, value, says", MALFORMED,
                         ids=[".".join(p) + "=" + ("deleted" if v is DELETE else repr(v))
                              for p, v, _ in MALFORMED])
def test_each_malformed_entry_is_one_typed_refusal(tmp_path, path, value, says):
    bench = load_bench("calibrate")
    with pytest.raises(Refused) as e:
        _read(bench, tmp_path, _edited(path, value))
    msg = str(e.value)
    assert msg.startswith(f"--prior-fit {tmp_path / 'prior.json'}: ") and "\n" not in msg
    for s in says:
        assert s in msg, msg


@pytest.mark.parametrize("section", ["train_contended", "train_load"])
@pytest.mark.parametrize("absent", ["null", "left out"])
def test_an_unmeasured_contention_section_is_still_a_usable_prior(tmp_path, section, absent):
    """``simulate_prior`` runs without a load shape (no ``sim_load``) and ``cost_model`` without
    the busy flag (the train fit unstretched): as for a grid that could not fit them."""
    bench = load_bench("calibrate")
    own = _finish(bench)["fit"]
    prior = copy.deepcopy(_committed())
    prior["sync_s"] = dict(own["sync_s"])
    if absent == "null":
        prior[section] = None
    else:
        del prior[section]
    assert _read(bench, tmp_path, prior) == prior
    results = _finish(bench, prior=prior)
    assert "prior_why" not in results
    for r in results["runs"]:
        assert r[bench.PRIOR]["sim_revised"]["steady_trained_tok_s"] > 0
        assert (bench.LOADED in r[bench.PRIOR]) == (section != "train_load")


@pytest.mark.parametrize("absent", ["null", "left out"])
def test_a_prior_without_a_chunk_fit_simulates_a_whole_batch_grid(tmp_path, absent):
    """No streaming step measured (``chunk`` null, as ``fit_costs`` writes it, or left out):
    a grid without streaming runs needs none; the old code read ``fit["chunk"]`` and failed
    with a KeyError in ``finish`` when it was left out."""
    bench = load_bench("calibrate")
    prior = copy.deepcopy(_finish(bench)["fit"])
    if absent == "null":
        prior["chunk"] = None
    else:
        del prior["chunk"]
    assert _read(bench, tmp_path, prior) == prior
    results = _finish(bench, prior=prior)
    assert "prior_why" not in results
    assert all(r[bench.PRIOR]["sim_revised"] == r["sim_revised"] for r in results["runs"])


def test_the_command_refuses_before_the_fit_and_writes_nothing(tmp_path):
    """End to end, from a --raw file: the bad prior is one line on stderr, exit 2, and neither
    --write's results file nor its page is touched (the old code fitted and simulated, then
    blamed the --raw file: "not a file of --raw (CostError: ... unknown shape 'linear')"; after
    a grid, the same error was a traceback and the grid lost)."""
    bench = load_bench("calibrate")
    compared, measured = _grid()
    # the grid's own interval (the command's defaults): --from-raw keeps its comparisons
    compared["instrument"] = {"interval": "sign", "level": bench.peers.instrument.LEVEL,
                              "order_seed": 0}
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({"steps": 4, "seeds": [0, 1], "median": 8.0, "sigma": 1.5,
                               "compared": compared, "measured": measured, "shape": [2, 4]}))
    prior = _edited(("train_load", "rollout_load"), "linear")
    prior["sync_s"] = {"keep": 0.05}
    (tmp_path / "prior.json").write_text(json.dumps({"fit": prior}))
    doc = tmp_path / "doc.md"
    doc.write_text(f"page\n{bench.BEGIN}\nold\n{bench.END}\n")
    results = tmp_path / "results.json"
    results.write_text("{}")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    p = subprocess.run([sys.executable, str(SCRIPT), "--from-raw", str(raw), "--prior-fit",
                        str(tmp_path / "prior.json"), "--write", "--results", str(results),
                        "--doc", str(doc)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("calibrate: --prior-fit ") and "'train_load'" in line \
        and "'rollout_load'" in line, line
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()} == before
    # the same raw file and a well-formed prior: the grid's results, simulated with it
    prior["train_load"]["rollout_load"] = "saturating"
    out = bench.finish(compared, measured, 4, [0, 1], 8.0, 1.5, 0.0, (2, 4), prior=prior)
    assert "prior_why" not in out and all(bench.LOADED in r[bench.PRIOR] for r in out["runs"])
