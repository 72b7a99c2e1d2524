"""Writers never replace what is not theirs (issue 36, class 3; docs/cli.md, "Output paths").

Every output path a user names -- ``faults --json``, ``simulate --out`` (and the files it writes
there), ``conformance --regenerate --dir``, ``runtime.tasks.arithmetic --out`` -- is refused
with one line, exit 2, before any work when it exists and is not a regular file (a fifo, a
socket, a device, a symbolic link, also one to ``/dev/null``); and ``runtime.atomic_io`` itself
refuses to rename over such a name (``NotReplaceable``), whoever calls it.

No test here points a writer at the real ``/dev/null``: a symbolic link to it, in a temporary
directory, stands for it (the writer before this change renamed its file over the link).
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import atomic_io, inputs

ROOT = Path(__file__).resolve().parents[1]


def _cli(*argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _make(kind: str, path: Path, tmp: Path) -> str:
    """Put ``kind`` at ``path``; return what must still be there after (for the asserts)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(path.parent)  # a relative name: AF_UNIX paths are at most 108 bytes
        try:
            sock.bind(path.name)
        finally:
            os.chdir(here)
            sock.close()
    elif kind == "link to a file":
        (tmp / "victim.txt").write_text("keep me\n")
        path.symlink_to(tmp / "victim.txt")
    elif kind == "link to /dev/null":
        path.symlink_to(os.devnull)
    elif kind == "dangling link":
        path.symlink_to(tmp / "nowhere")
    else:  # pragma: no cover
        raise AssertionError(kind)
    return kind


def _unchanged(kind: str, path: Path, tmp: Path) -> None:
    mode = os.lstat(path).st_mode
    if kind == "fifo":
        assert stat.S_ISFIFO(mode)
    elif kind == "socket":
        assert stat.S_ISSOCK(mode)
    else:
        assert stat.S_ISLNK(mode), f"the link at {path} was replaced"
    if kind == "link to a file":
        assert (tmp / "victim.txt").read_text() == "keep me\n"


KINDS = ["fifo", "socket", "link to a file", "link to /dev/null", "dangling link"]


@pytest.mark.parametrize("kind", KINDS)
def test_faults_json_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """Before: the link became a regular file holding the summary (exit 0), and a fifo hung
    the check (``open(fifo, "ab")`` waits for a reader)."""
    target = tmp_path / "summary.json"
    _make(kind, target, tmp_path)
    r = _cli("-m", "reserve_occupy_faults", "--schedules", "2", "--quiet", "--json", str(target),
             cwd=tmp_path, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--json" in lines[0] and "not a regular file" in lines[0], lines
    assert r.stdout == ""  # refused before the first schedule
    _unchanged(kind, target, tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/null"])
def test_simulate_out_refuses_a_result_file_that_is_not_regular(tmp_path: Path,
                                                                 kind: str) -> None:
    """``--out DIR`` is a directory of ours, but ``DIR/results.json`` (written at the end of
    the run) is checked too. Before: the run ran, then replaced it (or, for a fifo there, the
    earlier-results check called it a result and asked for --overwrite, which then moved it
    aside with the directory)."""
    out = tmp_path / "out"
    out.mkdir()
    _make(kind, out / "throughput.png", tmp_path)
    r = _cli("-m", "runtime", "simulate", "--policy", "reserve_occupy", "--eta", "1",
             "--batches", "2", "--groups", "64", "--no-progress", "--out", str(out),
             "--overwrite", cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    assert "throughput.png" in r.stderr and "not a regular file" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (out / "results.json").exists() and out.is_dir()
    _unchanged(kind, out / "throughput.png", tmp_path)


def test_conformance_regenerate_refuses_a_linked_manifest(tmp_path: Path) -> None:
    """Before: the family ran, then MANIFEST.json (a link to a file elsewhere) became a
    regular file and the file it pointed to was left as it was."""
    d = tmp_path / "corpus"
    d.mkdir()
    _make("link to a file", d / "MANIFEST.json", tmp_path)
    # (no --stride: --regenerate writes whole families and refuses it; the link is refused
    # before any vector is generated)
    r = _cli("-m", "runtime", "conformance", "--regenerate", "--family", "basic",
             "--dir", str(d), cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    assert "MANIFEST.json" in r.stderr and "symbolic link" in r.stderr, r.stderr
    assert sorted(p.name for p in d.iterdir()) == ["MANIFEST.json"]
    _unchanged("link to a file", d / "MANIFEST.json", tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "link to a file"])
def test_arithmetic_out_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "data.jsonl"
    _make(kind, target, tmp_path)
    r = _cli("-m", "runtime.tasks.arithmetic", "--max-operand", "2", "--out", str(target),
             cwd=tmp_path, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "not a regular file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    _unchanged(kind, target, tmp_path)


@pytest.mark.parametrize("option", [["--out"], ["--results-dir"]])
def test_an_empty_output_path_is_refused_not_taken_for_the_default(tmp_path: Path,
                                                                    option: list[str]) -> None:
    """``simulate --out ''`` ran without writing anything; ``experiments --results-dir ''``
    wrote to the default directory."""
    mode = ["run", "--batches", "2", "--groups", "64", "--policy", "reserve_occupy"] \
        if option == ["--out"] else ["experiments", "--tiny", "--only", "3"]
    r = _cli("-m", "runtime", "simulate", *mode, "--no-progress", *option, "", cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-600:])
    assert "the path is empty" in r.stderr
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------- atomic_io, the last guard ------

@pytest.mark.parametrize("kind", KINDS)
def test_atomic_write_never_renames_over_what_is_not_a_regular_file(tmp_path: Path,
                                                                    kind: str) -> None:
    target = tmp_path / "out.txt"
    _make(kind, target, tmp_path)
    with pytest.raises(atomic_io.NotReplaceable, match="not a regular file") as info:
        atomic_io.write_text(target, "new\n")
    assert info.value.filename == str(target)
    _unchanged(kind, target, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if atomic_io.is_temp(p.name)] == []


def test_atomic_write_still_replaces_a_regular_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    atomic_io.write_text(target, "new\n")
    assert target.read_text() == "new\n"


def test_atomic_dir_never_replaces_a_link_or_a_file(tmp_path: Path) -> None:
    """Before: a link to a directory (or a file) at the name was renamed aside and the new
    directory put in its place."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    for name, make in (("linked", lambda p: p.symlink_to(elsewhere)),
                       ("a-file", lambda p: p.write_text("file"))):
        target = tmp_path / name
        make(target)
        with pytest.raises(atomic_io.NotReplaceable, match="not a directory"):
            with atomic_io.atomic_dir(target) as tmp:
                (tmp / "model.safetensors").write_text("w")
        assert not target.is_dir() or target.is_symlink()
    assert (tmp_path / "linked").is_symlink() and (elsewhere / "keep").read_text() == "x"
    assert (tmp_path / "a-file").read_text() == "file"


def test_a_device_is_refused_without_touching_it() -> None:
    """The check functions only look (lstat): safe on the real /dev/null."""
    with pytest.raises(atomic_io.NotReplaceable, match="a character device"):
        atomic_io.check_replaceable(os.devnull)
    with pytest.raises(inputs.InputError, match="a character device, not a regular file"):
        inputs.output_file(os.devnull, "--json")
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)


def test_the_command_reports_a_refused_write_as_exit_74(tmp_path: Path) -> None:
    """A writer that meets a fifo where it writes, past the up-front checks, is one line and
    exit 74 ("cannot write the output"), not an internal error (70)."""
    os.mkfifo(tmp_path / "late.json")
    script = ("from runtime import atomic_io\n"
              "from runtime.cli import script\n"
              "script(lambda: atomic_io.write_text('late.json', '{}'), 'writer')\n")
    r = _cli("-c", script, cwd=tmp_path, timeout=60)
    assert r.returncode == 74, (r.returncode, r.stderr)
    assert r.stderr.strip() == (f"writer: cannot write the output: late.json: exists and is a "
                                f"fifo, not a regular file: not replaced")


@pytest.mark.parametrize("name", ["metrics.jsonl", "summary.json", "weights"])
def test_train_refuses_a_run_directory_entry_that_is_a_link(tmp_path: Path, name: str) -> None:
    """A run appends to ``metrics.jsonl``, replaces ``summary.json``, writes into
    ``weights/``: a link there pointing to nothing was not seen as a run's file (``exists``
    follows it), so the run wrote through it or replaced it. Before: ``--check`` said OK
    (exit 0). (A link that points to something was already refused as "holds a run".)"""
    run = tmp_path / "run"
    run.mkdir()
    _make("dangling link", run / name, tmp_path)
    r = _cli("-m", "runtime", "train", "--check", "--set", "rollout.backend=fake",
             "--output-dir", str(run), cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    assert f"run.output_dir {run}: {name}" in r.stderr and "symbolic link" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert os.path.islink(run / name) and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("study", ["bound", "frontier"])
def test_the_studies_refuse_a_linked_result_file_before_running(tmp_path: Path,
                                                                 study: str) -> None:
    """Before: the study ran, then renamed its file over the link (exit 0)."""
    results, img = tmp_path / "results", tmp_path / "img"
    results.mkdir()
    img.mkdir()
    if study == "bound":
        name, where = "tables.md", results
        argv = ["--batches", "2", "--seeds", "0", "--eta", "1", "--results-dir", str(results)]
    else:
        name, where = "sim_frontier_tiny.png", img
        argv = ["--tiny", "--results-dir", str(results), "--img-dir", str(img)]
    _make("link to /dev/null", where / name, tmp_path)
    r = _cli("-m", f"reserve_occupy_sim.studies.{study}", *argv, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    assert name in r.stderr and "symbolic link" in r.stderr and r.stdout == ""
    _unchanged("link to /dev/null", where / name, tmp_path)
    assert list(results.iterdir()) == ([] if study == "frontier" else [results / name])
