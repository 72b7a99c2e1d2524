"""``calibrate.py --prior-fit``: the prior's required terms (``decode_with_overlap``'s
``step_s``, ``per_request_s``, ``prefill_per_token_s``; ``train``'s ``fixed_s``,
``per_token_s``) are checked as the optional sections' are: each a finite number >= 0, a bad
one refused in one line naming the section and the field, exit 2, nothing written. Before,
they were only checked for being finite numbers: a negative time per token (a hand-edited
prior) passed, and the grid was simulated with it. A term left out is still the message for a
fit of an older calibrate.py (tests/runtime/test_calibrate_prior_fit.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from .helpers import load_bench
from .test_calibrate_prior_fit import _grid
from .test_calibrate_prior_sections import SCRIPT, Refused, _edited, _read

REQUIRED = [("decode_with_overlap", "step_s"), ("decode_with_overlap", "per_request_s"),
            ("decode_with_overlap", "prefill_per_token_s"), ("train", "fixed_s"),
            ("train", "per_token_s")]
VALUES = [-1e-4, -0.0 - 1e-300, math.nan, math.inf, "0.01", True, None]


@pytest.mark.parametrize("value", VALUES, ids=repr)
@pytest.mark.parametrize("section, key", REQUIRED, ids=[f"{s}.{k}" for s, k in REQUIRED])
def test_a_required_term_below_0_or_not_a_number_is_refused_by_name(tmp_path, section, key,
                                                                    value):
    bench = load_bench("calibrate")
    with pytest.raises(Refused) as e:
        _read(bench, tmp_path, _edited((section, key), value))
    msg = str(e.value)
    assert msg.startswith(f"--prior-fit {tmp_path / 'prior.json'}: ") and "\n" not in msg
    assert f"its fit's {section!r}: {key!r} must be a number >= 0, got {value!r}" in msg, msg


@pytest.mark.parametrize("section, key", REQUIRED, ids=[f"{s}.{k}" for s, k in REQUIRED])
def test_a_required_term_of_0_is_a_usable_prior(tmp_path, section, key):
    """The bound is >= 0, not > 0 (the fit's non-negative least squares may pin a term at 0)."""
    bench = load_bench("calibrate")
    fit = _read(bench, tmp_path, _edited((section, key), 0.0))
    assert fit[section][key] == 0.0


def test_the_command_refuses_a_negative_time_per_token_and_writes_nothing(tmp_path):
    """End to end, from a --raw file: one line on stderr, exit 2, --write's results file and
    page untouched (the old code passed the check, simulated the grid with the negative term,
    and went on: here it then failed in ``render`` on this hand-made grid, a traceback, exit 1)."""
    bench = load_bench("calibrate")
    compared, measured = _grid()
    compared["instrument"] = {"interval": "sign", "level": bench.peers.instrument.LEVEL,
                              "order_seed": 0}
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({"steps": 4, "seeds": [0, 1], "median": 8.0, "sigma": 1.5,
                               "compared": compared, "measured": measured, "shape": [2, 4]}))
    prior = _edited(("train", "per_token_s"), -1e-4)
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
    assert line.startswith("calibrate: --prior-fit ") \
        and line.endswith("its fit's 'train': 'per_token_s' must be a number >= 0, got -0.0001"), \
        line
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()} == before
