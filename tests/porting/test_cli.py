"""``reserve-occupy check-trace``: exit codes 0/1/2 and one clear line, never a traceback, for
input that is missing, corrupted, truncated or not a trace."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reserve_occupy import Config
from runtime.cli import main

from .conftest import records, reference_lines

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.jsonl"
    path.write_text("\n".join(reference_lines(Config(1, 2, capacity=3), 5, steps=150)) + "\n")
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check-trace", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_conforming_and_divergent(capsys, good: Path, tmp_path: Path) -> None:
    code, out, _ = _run(capsys, str(good))
    assert code == 0 and "CONFORMING (strict)" in out
    code, out, _ = _run(capsys, str(good), "--lenient")
    assert code == 0 and "CONFORMING (lenient)" in out
    recs = records(good.read_text().splitlines())
    k = next(i for i, r in enumerate(recs) if r["op"] == "occupy" and r["moves"])
    recs[k]["slot"] = [7, 0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in recs))
    code, out, _ = _run(capsys, str(bad))
    assert code == 1 and f"line {k + 1}" in out and "buffers before" in out
    code, out, _ = _run(capsys, str(bad), "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"] and report["problem"]["line"] == k + 1
    assert report["problem"]["differences"][0]["field"] == "slot"


def test_gzip_and_stdin(capsys, good: Path, tmp_path: Path, monkeypatch) -> None:
    gz = tmp_path / "good.jsonl.gz"
    gz.write_bytes(gzip.compress(good.read_bytes()))
    assert _run(capsys, str(gz))[0] == 0
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gz.read_bytes()[: len(gz.read_bytes()) // 2])
    code, _, err = _run(capsys, str(truncated))
    assert code == 2 and "truncated or corrupted" in err
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(good.read_bytes())))
    code, out, _ = _run(capsys, "-")
    assert code == 0 and "<stdin>: CONFORMING" in out


def _bad_files(tmp_path: Path, good: Path) -> dict[str, tuple[Path, str]]:
    text = good.read_text()
    lines = text.splitlines()
    cases = {
        "missing": (tmp_path / "nope.jsonl", "cannot open"),
        "directory": (tmp_path, "cannot open"),
        "empty": ("", "empty trace"),
        "truncated": (text[: len(text) // 2 + 7], "not valid JSON"),
        "binary": (b"\x89PNG\r\n\x1a\n\xff\xfe\x00garbage", "not UTF-8"),
        "no-header": ("\n".join(lines[1:]), "line 1: op: the first line must be the header"),
        "newer": (text.replace('"schema_version":1', '"schema_version":9', 1),
                  "newer than this checker"),
        "bad-field": ("\n".join(lines[:2] + [lines[2].replace('"unit"', '"unit_id"')]),
                      "line 3: unit_id: is not a field"),
        "not-json-lines": (json.dumps([json.loads(x) for x in lines[:3]]),
                           "line 1: the first line must be the header"),
    }
    out = {}
    for name, (content, message) in cases.items():
        if isinstance(content, Path):
            out[name] = (content, message)
            continue
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        out[name] = (path, message)
    return out


def test_unreadable_input_gives_exit_2_and_a_message(capsys, good: Path, tmp_path: Path) -> None:
    for name, (path, message) in _bad_files(tmp_path, good).items():
        code, out, err = _run(capsys, str(path))
        assert code == 2, name
        assert message in err, (name, err)
        assert "Traceback" not in err + out
        code, out, _ = _run(capsys, str(path), "--json")
        assert code == 2 and message in json.loads(out)["error"]


def test_no_traceback_from_a_real_process(good: Path, tmp_path: Path) -> None:
    """The console entry point, as a user runs it (``python -m runtime`` = reserve-occupy)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(good.read_bytes()[:500])
    proc = subprocess.run([sys.executable, "-m", "runtime", "check-trace", str(cut)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
                          check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "line " in proc.stderr and "truncated" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "runtime", "check-trace", str(good)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
