"""Every input from outside, every reader (issue 36, class 7; docs/cli.md, "Path arguments",
"Duplicate keys", "Standard streams").

* An empty string where a path or a name is expected is refused, not read as "not given"
  (``--output-dir ''`` wrote into the current directory, ``--resume ''`` started a fresh run,
  ``--set data.path=`` used the demo data).
* A key given twice is refused in every YAML (a config, a ``--set`` value) and every JSON a
  user hands in (data lines, ``--cost``, traces, an adapter's answers), naming the key and the
  line: the last one used to win without a word.
* A path's length and bytes are checked before use (a 300-byte name or a NUL byte was exit
  70, an internal error).
* A closed standard stream is never exit 70: a closed stdout is one line and exit 2, a closed
  stdin or stderr is carried on with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import inputs

ROOT = Path(__file__).resolve().parents[1]
LONG = "n" * 300  # one path component longer than NAME_MAX (255 bytes)


def _run(argv: list[str], cwd: Path, timeout: float = 180,
         shell_redirect: str = "") -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in ``cwd``; ``shell_redirect`` (``>&-``, ``<&-``, ``2>&-``) closes a
    standard stream of the child (through ``sh -c 'exec "$@" REDIRECT'``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, *argv]
    if shell_redirect:
        cmd = ["sh", "-c", f'exec "$@" {shell_redirect}', "sh", *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _train_check(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _run(["-m", "runtime", "train", "--check", "--no-progress",
                 "--set", "rollout.backend=fake", *extra], cwd=tmp_path)


def _one_line_2(r: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-300:], r.stderr[-1500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------ empty strings ------

@pytest.mark.parametrize("extra, expected", [
    (["--output-dir", ""], "--output-dir: the path is empty"),
    (["--resume", ""], "--resume: the path is empty"),
    (["--set", "data.path="], "--set data.path=: the value is empty"),
    (["--set", "run.output_dir="], "--set run.output_dir=: the value is empty"),
    (["--set", "run.output_dir=''"], "run.output_dir: the path is empty"),
    (["--set", "reward.name=' '", "--output-dir", "o"], "reward.name: empty"),
])
def test_train_refuses_an_empty_path_or_name(tmp_path: Path, extra: list[str],
                                             expected: str) -> None:
    """Before: each passed --check (exit 0): into the current directory, a fresh run in
    out/runtime/demo, the demo data, ..."""
    _one_line_2(_train_check(tmp_path, *extra), expected)


def test_faults_json_empty_is_refused_not_ignored(tmp_path: Path) -> None:
    """Before: ``--json ''`` ran every schedule and wrote nothing, exit 0."""
    r = _run(["-m", "reserve_occupy_faults", "--schedules", "1", "--quiet", "--json", ""], tmp_path)
    _one_line_2(r, "--json: the path is empty")


def test_conformance_dir_empty_is_refused_not_the_current_directory(tmp_path: Path) -> None:
    """Before: ``type=Path`` turned ``''`` into ``.``."""
    r = _run(["-m", "runtime", "conformance", "--save-failures", "", "--list"], tmp_path)
    assert r.returncode == 2 and "the path is empty" in r.stderr, r.stderr


@pytest.mark.parametrize("argv, expected", [
    (["simulate", "--cost", "", "--batches", "2", "--no-progress"], "--cost: the path is empty"),
    (["simulate", "--workload", "", "--batches", "2", "--no-progress"],
     "--workload: the path is empty"),
    (["conformance", "--adapter", ""], "--adapter: empty"),
    (["conformance", "--export", ""], "--export: empty"),
])
def test_an_empty_option_is_refused_not_taken_for_not_given(tmp_path: Path, argv: list[str],
                                                            expected: str) -> None:
    """Before: ``simulate --cost ''`` ran on the default preset, ``--workload ''`` on the
    synthetic workload (exit 0); ``conformance --adapter ''`` and ``--export ''`` ran the
    whole corpus against the reference (past this test's 60 s)."""
    _one_line_2(_run(["-m", "runtime", *argv], tmp_path, timeout=60), expected)


# ----------------------------------------------------------------------- duplicate keys ------

@pytest.mark.parametrize("text, key, lines", [
    ("run:\n  steps: 3\n  steps: 4\n", "steps", "lines 2 and 3"),
    ("run:\n  steps: 3\nrollout:\n  max_tokens: 4\nrun:\n  eval_prompts: 0\n", "run",
     "lines 1 and 5"),
    ("reward:\n  options: {a: 1, b: 2, a: 3}\n", "a", "lines 2 and 2"),
])
def test_a_yaml_key_given_twice_is_refused(tmp_path: Path, text: str, key: str,
                                           lines: str) -> None:
    """Before: the last one won (a second ``run:`` dropped every setting of the first)."""
    (tmp_path / "c.yaml").write_text(text)
    _one_line_2(_train_check(tmp_path, "--config", "c.yaml", "--output-dir", "o"),
                f"the key '{key}' is given twice ({lines})")


def test_a_set_value_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    _one_line_2(_train_check(tmp_path, "--set", "reward.options={x: 1, x: 2}"),
                "--set reward.options", "'x' is given twice")


def test_a_data_line_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(8)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    text += '{"prompt": "1+1=", "answer": "3", "answer": "2"}\n'
    (tmp_path / "d.jsonl").write_text(text)
    _one_line_2(_train_check(tmp_path, "--set", "data.path=d.jsonl", "--output-dir", "o"),
                "d.jsonl:9", "duplicate key 'answer'")


def test_simulate_cost_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cost.json").write_text('{\n "name": "a",\n "name": "b"\n}\n')
    r = _run(["-m", "runtime", "simulate", "--cost", "cost.json", "--batches", "2",
              "--no-progress"], tmp_path)
    _one_line_2(r, "cost.json", "duplicate key 'name' on line 3")


def test_check_trace_refuses_a_record_with_a_key_twice(tmp_path: Path) -> None:
    """Before: the header's second ``max_staleness`` silently replaced the first."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "config", "schema_version": 1, "config": {"max_staleness": 1, '
                     '"batch_size": 2, "max_staleness": 3}}\n')
    r = _run(["-m", "runtime", "check-trace", str(trace)], tmp_path)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "duplicate key 'max_staleness'" in r.stderr, r.stderr


def test_an_adapter_answer_with_a_key_twice_fails_the_vector(tmp_path: Path) -> None:
    """Before: the reference port behind a filter that repeats each answer's first key
    passed every vector (exit 0)."""
    port = ROOT / "tests" / "porting" / "json_port.py"
    (tmp_path / "port.sh").write_text(
        f"'{sys.executable}' '{port}' | sed -u 's/^{{\\(\"[a-z_]*\": [^,}}]*\\)/{{\\1, \\1/'\n")
    r = _run(["-m", "runtime", "conformance", "--adapter-cmd", "sh port.sh", "--family",
              "basic", "--stride", "500"], tmp_path)
    assert r.returncode == 1, (r.returncode, r.stdout[-500:], r.stderr[-500:])
    assert "not JSON (duplicate key" in r.stdout + r.stderr


def test_loads_bounded_names_the_key_and_the_line() -> None:
    from reserve_occupy.trace import DuplicateKeyError, loads_bounded

    with pytest.raises(DuplicateKeyError) as info:
        loads_bounded('{"a": {"b": 1,\n "c": 2,\n "b": 3}}')
    assert info.value.key == "b" and info.value.lineno == 3
    assert info.value.msg == "duplicate key 'b' on line 3"
    with pytest.raises(DuplicateKeyError, match="duplicate key 'k'"):
        loads_bounded('[{"k": 1}, {"k": 2, "k": 2}]')
    assert loads_bounded('[{"k": 1}, {"k": 2}]') == [{"k": 1}, {"k": 2}]
    with pytest.raises(inputs.FileInputError, match=r"x\.jsonl:7: not valid JSON \(duplicate "
                                                    r"key 'k'\)"):
        inputs.json_line('{"k": 1, "k": 1}', "x.jsonl", 7)


# --------------------------------------------------------------- path length and bytes ------

@pytest.mark.parametrize("argv, expected", [
    (["-m", "reserve_occupy_faults", "--schedules", "1", "--quiet", "--json", f"{LONG}/s.json"],
     "--json"),
    (["-m", "runtime", "simulate", "--out", LONG, "--batches", "2", "--no-progress"],
     "--out"),
    (["-m", "runtime", "train", "--check", "--set", "rollout.backend=fake", "--output-dir",
      f"o/{LONG}"], "--output-dir"),
    (["-m", "runtime", "train", "--check", "--set", "rollout.backend=fake", "--set",
      'run.output_dir="o\\0p"'], "run.output_dir 'o\\x00p': the path contains a NUL byte"),
])
def test_a_path_too_long_or_with_a_nul_byte_is_one_line_and_exit_2(
        tmp_path: Path, argv: list[str], expected: str) -> None:
    """Before: exit 70 (``OSError: File name too long``, ``ValueError: embedded null
    byte``), reported as an internal error."""
    line = _one_line_2(_run(argv, tmp_path), expected)
    assert "internal error" not in line


def test_path_text_limits() -> None:
    assert inputs.path_text("a/" + "b" * 255, "--x") == "a/" + "b" * 255
    with pytest.raises(inputs.InputError, match="a name in the path is 256 bytes long"):
        inputs.path_text("a/" + "b" * 256, "--x")
    assert len(inputs.path_text("/".join(["c" * 255] * 16), "--x")) == 4095
    with pytest.raises(inputs.InputError, match="the path is 4,351 bytes long"):
        inputs.path_text("/".join(["c" * 255] * 17), "--x")
    with pytest.raises(inputs.InputError, match="--x: the path is empty .blank."):
        inputs.path_text("  ", "--x")


# -------------------------------------------------------------------- standard streams ------

@pytest.mark.parametrize("argv", [
    ["-m", "reserve_occupy_faults", "--schedules", "1", "--quiet"],
    ["-m", "runtime", "simulate", "list"],
    ["-m", "reserve_occupy_porting.check_trace", "-"],
    ["-m", "reserve_occupy_sim.studies.pages", "--check"],
])
def test_a_closed_stdout_is_one_line_and_exit_2(tmp_path: Path, argv: list[str]) -> None:
    """Before: exit 70 (``AttributeError: 'NoneType' object has no attribute 'flush'``);
    ``studies.pages``, outside the common wrapper then, printed its report into nothing and
    exited 0."""
    r = _run(argv, tmp_path, shell_redirect=">&-")
    _one_line_2(r, "the standard output is closed")


@pytest.mark.parametrize("redirect", ["<&-", "2>&-"])
def test_a_closed_stdin_or_stderr_is_carried_on_with(tmp_path: Path, redirect: str) -> None:
    r = _run(["-m", "reserve_occupy_faults", "--schedules", "1", "--quiet", "--json", "s.json"],
             tmp_path, shell_redirect=redirect)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert json.loads((tmp_path / "s.json").read_text())["schedules"] == 1


def test_a_closed_stdin_reads_as_empty_in_check_trace(tmp_path: Path) -> None:
    r = _run(["-m", "runtime", "check-trace", "-"], tmp_path, shell_redirect="<&-")
    assert r.returncode == 2 and "empty trace" in r.stderr, (r.returncode, r.stderr)


# ----------------------------------------------------------------- numbers never taken ------

def test_simulate_filter_skew_nan_is_refused_at_rate_0(tmp_path: Path) -> None:
    """Before: ``--filter-skew nan`` (or ``inf``) was accepted while ``--filter-rate`` was 0."""
    for value in ("nan", "inf"):
        r = _run(["-m", "runtime", "simulate", "--filter-skew", value, "--batches", "2",
                  "--no-progress"], tmp_path)
        _one_line_2(r, "filter skew must be a number in [-10, 10]")


def test_arithmetic_checks_its_numbers(tmp_path: Path) -> None:
    """Before: ``--max-operand -1`` wrote an empty data file, exit 0."""
    r = _run(["-m", "runtime.tasks.arithmetic", "--max-operand", "-1", "--out", "d.jsonl"],
             tmp_path)
    _one_line_2(r, "--max-operand must be in [1, 999]")
    assert not (tmp_path / "d.jsonl").exists()
