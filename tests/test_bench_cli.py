"""The benches' command lines (issue 36, class 9): every bench script has its own ``--help``
(``calibrate.py --help`` printed peers_compare's; ``sim_bench.py --help`` ran the bench), and
every value is checked before anything starts: bad input is one line on stderr and exit status
2 (``--median nan`` started vLLM then failed with a traceback; a directory for ``--rows``,
``--etas 100000``, a missing or bad ``--from-raw``: tracebacks)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py")
                 if p.stem not in ("docblock", "cli", "instrument"))  # modules, not commands


def _run(script: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(BENCH / f"{script}.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def _first_line(script: str) -> str:
    """The first line of the script's docstring, whitespace collapsed (argparse rewraps it)."""
    doc = ast.get_docstring(ast.parse((BENCH / f"{script}.py").read_text())) or ""
    return " ".join(doc.splitlines()[0].split())[:50]


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_bench_has_its_own_help(script):
    p = _run(script, "--help")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith(f"usage: {script}.py "), p.stdout[:300]
    assert _first_line(script) in " ".join(p.stdout.split()), p.stdout[:600]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench_cli")
    (tmp / "a_dir").mkdir()
    (tmp / "list.json").write_text("[1, 2]\n")
    (tmp / "half.json").write_text('{"steps": 3, "seeds": [0]')
    (tmp / "old.json").write_text(json.dumps({"steps": 3, "seeds": [0], "median": 12.0,
                                              "sigma": 1.0, "runs": [], "measured": []}))
    return tmp


CASES = [
    ("peers_compare", ["--median", "nan"], "--median must be a number in (0, 96]"),
    ("peers_compare", ["--median", "inf"], "--median must be a number in (0, 96]"),
    ("peers_compare", ["--sigma", "1e300"], "--sigma must be a number in [0, 5]"),
    ("peers_compare", ["--rows", "{tmp}/a_dir"], "--rows {tmp}/a_dir: not a regular file"),
    ("peers_compare", ["--rows", "{tmp}/nowhere/rows.jsonl"], "no such folder"),
    ("peers_compare", ["--etas", "100000"], "staleness.max_staleness: Input should be less "
                                            "than or equal to 1024 (got 100000)"),
    ("peers_compare", ["--seeds", "99999999999"], "run.seed: Input should be less"),
    ("peers_compare", ["--steps", "x"], "argument --steps: 'x' is not a whole number"),
    ("peers_compare", ["--steps", "4", "--warmup-steps", "4"], "--warmup-steps must be >= 0 "
                                                                "and less than --steps"),
    ("peers_compare", ["--level", "nan"], "--level must be a number in (0, 1)"),
    ("peers_compare", ["--seeds", "1,1"], "names a seed twice"),
    ("calibrate", ["--median", "nan"], "calibrate: --median must be a number"),
    ("calibrate", ["--etas", "100000"], "Input should be less than or equal to 1024"),
    ("calibrate", ["--from-raw", "{tmp}/missing.json"], "--from-raw {tmp}/missing.json: no "
                                                        "such file"),
    ("calibrate", ["--from-raw", "{tmp}/a_dir"], "not a regular file"),
    ("calibrate", ["--from-raw", "{tmp}/list.json"], "a JSON object expected"),
    ("calibrate", ["--from-raw", "{tmp}/half.json"], "not a JSON file of --raw"),
    ("calibrate", ["--from-raw", "{tmp}/old.json"], "'compared' missing"),
    ("calibrate", ["--raw", "{tmp}/a_dir"], "--raw {tmp}/a_dir: not a regular file"),
    ("core_bench", ["--eta", "-1"], "argument --eta: -1 is out of range"),
    ("core_bench", ["--concurrency", "nan"], "argument --concurrency: nan is not a finite"),
    ("porting_bench", ["--steps", "0"], "argument --steps: 0 is out of range"),
    ("sim_bench", ["--steps", "3"], "unrecognized arguments: --steps 3"),
    ("trainer_bench", ["--median", "inf"], "argument --median: inf is not a finite"),
    ("trainer_bench", ["--sigma", "nan"], "argument --sigma: nan is not a finite"),
    ("trainer_bench", ["--out", "{tmp}/a_dir"], "argument --out: {tmp}/a_dir: not a regular"),
    ("sharded_bench", ["--worlds", "0"], "argument --worlds: 0 is out of range"),
    ("sharded_bench", ["--steps", "-3"], "argument --steps: -3 is out of range"),
    ("verl_compare", ["--eta", "one"], "argument --eta: 'one' is not a whole number"),
    ("runtime_bench", ["--etas", "100000"], "argument --etas: 100000 is out of range"),
    ("gpu_trainer", ["--budget-s", "nan"], "argument --budget-s: nan is not a finite"),
    ("openrlhf_compare", ["--train-s", "inf"], "argument --train-s: inf is not a finite"),
    ("openrlhf_compare", ["--seeds", "a"], "argument --seeds: 'a' is not a whole number"),
    ("precision_curve", ["--precisions", "fp8"], "argument --precisions: 'fp8'"),
    ("refit_compare", ["--rounds", "0"], "argument --rounds: 0 is out of range"),
    ("export_push", ["--table", "{tmp}/missing.json"], "argument --table: {tmp}/missing.json: "
                                                       "no such file"),
    ("export_push", ["--out", "{tmp}/a_dir"], "argument --out: {tmp}/a_dir: not a regular"),
]


@pytest.mark.parametrize("script, args, says", CASES,
                         ids=[f"{s}{'_'.join(a)}"[:60] for s, a, _ in CASES])
def test_bad_values_are_one_line_and_exit_2_before_anything_starts(script, args, says, files):
    args = [a.replace("{tmp}", str(files)) for a in args]
    p = _run(script, *args)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr[-2000:]
    assert lines[0].startswith(f"{script.split('_')[0]}") and says.replace(
        "{tmp}", str(files)) in lines[0], lines[0]
    assert p.stdout == ""  # nothing ran
