"""A conformance pass must have checked something (issue 25, class 9): an adapter that exits
the process, a corpus directory whose files are empty or do not match MANIFEST.json, an
adapter without ``stream()`` asked for the streaming family, the streaming family left out
without a word, and an external port's over-long answer are each one line and exit 2 (or a
stated skip), never a silent exit 0 or a misleading verdict."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from reserve_occupy import StalenessController
from runtime.cli import main
from reserve_occupy_porting import vector_runner, vectors
from reserve_occupy_porting.vector_runner import AdapterError, ReferenceAdapter, SubprocessAdapter


class ExitsInPublish(ReferenceAdapter):
    """The reference core, but ``publish`` ends the process as a buggy port might."""

    def publish(self):
        raise SystemExit(0)


class GeneratorExitInPublish(ReferenceAdapter):
    """``publish`` raises ``GeneratorExit``, a ``BaseException`` as ``SystemExit`` is."""

    def publish(self):
        raise GeneratorExit("closed")


class NoStream:
    """The reference core without ``stream`` (a port without streaming consume)."""

    def start(self, config):
        self.c = StalenessController(config)

    def reserve(self, u):
        return self.c.reserve(u)

    def occupy(self, u):
        return self.c.occupy(u)

    def abort(self, u):
        return self.c.abort(u)

    def filter(self, u):
        return self.c.filter(u)

    def consume(self):
        return self.c.consume()

    def publish(self):
        return self.c.publish()

    def release_stuck(self):
        return self.c.release_stuck()


def _exit_2(capsys, argv: list[str], needle: str) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2, (rc, captured.out[-2000:], err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    return err


def test_an_adapter_that_exits_is_exit_2_not_a_silent_pass(capsys):
    err = _exit_2(capsys, ["conformance", "--family", "scenarios",
                           "--adapter", f"{__name__}:ExitsInPublish"], "SystemExit(0)")
    assert "publish()" in err


def test_an_adapter_that_raises_generator_exit_is_exit_2_not_a_traceback(capsys):
    # Before: GeneratorExit passed every handler and ended the run with a traceback, exit 1
    err = _exit_2(capsys, ["conformance", "--family", "scenarios",
                           "--adapter", f"{__name__}:GeneratorExitInPublish"], "GeneratorExit")
    assert "publish()" in err


def test_an_adapter_without_stream_is_refused_for_the_streaming_family(capsys):
    _exit_2(capsys, ["conformance", "--family", "streaming", "--adapter", f"{__name__}:NoStream"],
            "has no stream()")


def test_the_default_run_says_it_leaves_out_the_streaming_family(capsys):
    rc = main(["conformance", "--stride", "400", "--adapter", f"{__name__}:NoStream"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "not run: the streaming family (the adapter has no stream()" in out


def _copy_corpus(tmp_path: Path, family: str) -> Path:
    shutil.copy(vectors.path_for(family), tmp_path)
    shutil.copy(vectors.CORPUS_DIR / vectors.MANIFEST_NAME, tmp_path)
    return tmp_path / vectors.MANIFEST_NAME


def _edit_manifest(path: Path, family: str, **changes) -> None:
    data = json.loads(path.read_text())
    data["families"][family].update(changes)
    path.write_text(json.dumps(data))


def test_a_corpus_is_checked_against_its_manifest(tmp_path, capsys):
    argv = ["conformance", "--family", "scenarios", "--dir", str(tmp_path)]
    manifest = _copy_corpus(tmp_path, "scenarios")
    assert main(argv) == 0
    capsys.readouterr()
    _edit_manifest(manifest, "scenarios", sha256="0" * 64)
    _exit_2(capsys, argv, "its SHA-256 is not the one")
    text = vectors.read_text(vectors.path_for("scenarios"))
    _edit_manifest(manifest, "scenarios", sha256=hashlib.sha256(text).hexdigest(), vectors=14)
    _exit_2(capsys, argv, "15 vectors, but")
    _edit_manifest(manifest, "scenarios", vectors=15, events=1)
    _exit_2(capsys, argv, "events, but")
    manifest.unlink()
    _exit_2(capsys, argv, "MANIFEST.json: missing")


def test_an_empty_family_is_not_a_pass(tmp_path, capsys):
    (tmp_path / "basic.jsonl.xz").write_bytes(lzma.compress(b""))
    argv = ["conformance", "--family", "basic", "--dir", str(tmp_path)]
    _exit_2(capsys, argv, "MANIFEST.json: missing")
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"families": {"basic": {
        "file": "basic.jsonl.xz", "vectors": 0, "events": 0,
        "sha256": hashlib.sha256(b"").hexdigest()}}}))
    _exit_2(capsys, argv, "holds no vectors")


def test_regenerating_one_family_keeps_the_manifest_true(tmp_path, capsys):
    manifest = _copy_corpus(tmp_path, "scenarios")
    manifest.unlink()
    assert main(["conformance", "--regenerate", "--family", "scenarios",
                 "--dir", str(tmp_path)]) == 1  # the manifest was missing: rewritten
    assert main(["conformance", "--family", "scenarios", "--dir", str(tmp_path)]) == 0
    assert "15/15 vectors pass" in capsys.readouterr().out


class _FakeProc:
    def __init__(self, fd: int) -> None:
        self.stdout = io.FileIO(fd, closefd=False)

    def wait(self, timeout=None):
        return None


def test_an_over_long_answer_is_refused_once_it_passes_the_limit(monkeypatch):
    """An answer without a newline is refused as too long as soon as it passes the limit,
    having read no more than the limit and one chunk (the earlier reader copied and searched
    everything it had on every chunk: 38 s of CPU for 100 MB, then called it a timeout)."""
    chunk = b"x" * (1 << 20)
    reads = []

    def read(fd, n):
        reads.append(n)
        return chunk[:n]

    monkeypatch.setattr(vector_runner.os, "read", read)
    monkeypatch.setattr(vector_runner.select, "select", lambda r, w, x, t: (r, [], []))
    adapter = SubprocessAdapter("port", answer_timeout_s=3600)
    adapter.proc = _FakeProc(0)  # its fd is never read: os.read is the fake above
    with pytest.raises(AdapterError, match="longer than 64 MiB: too long for one trace record"):
        adapter._readline()
    assert sum(reads) <= vector_runner.MAX_ANSWER_BYTES + (1 << 20)


def test_an_external_port_that_sends_100_mb_without_a_newline(tmp_path, capsys):
    port = tmp_path / "port.py"
    port.write_text("import sys\nsys.stdin.readline()\nblock = b'x' * (1 << 20)\n"
                    "for _ in range(100):\n    sys.stdout.buffer.write(block)\n"
                    "sys.stdout.flush()\nsys.stdin.readline()\n")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(port))}"
    _exit_2(capsys, ["conformance", "--family", "spec", "--adapter-cmd", command],
            "too long for one trace record")


def test_the_porting_guide_lists_every_family():
    """docs/porting.md's list of families (it lacked ``streaming``)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "porting.md").read_text()
    listed = text.split("The families:", 1)[1].split("## ", 1)[0]
    for family in vectors.family_names():
        assert f"`{family}`" in listed, family
