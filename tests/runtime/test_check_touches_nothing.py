"""``train --check`` validates without running: it leaves the run directory, every file in it
and the folder a new run would be made in as they were -- the same names, bytes and
modification times -- and creates nothing. Before, its probe of whether the output directory
is writable (``check_output_dir``) made and removed a file in it (a new run: a directory in
its parent), which moved the directory's mtime and ctime on every ``--check``.

The run is the fake engine with the real GRPO trainer on the tiny model, in-process
(``runtime.cli.main``), a few seconds."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.recovery import rundir

FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]


def _tmpfile_works(where: Path) -> bool:
    """Whether ``where``'s filesystem makes unnamed files (``O_TMPFILE``), which the probe uses
    and which change nothing of the directory, its ctime included."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return False
    try:
        os.close(os.open(where, flag | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    except OSError:
        return False
    return True


def _state(root: Path, ctime: bool) -> dict[str, tuple]:
    """Every path under ``root`` (``root`` itself included): its kind, size, mtime (and ctime),
    and the bytes of a file or the target of a link."""
    out = {}
    for here, dirs, files in os.walk(root):
        for p in [Path(here)] + [Path(here) / n for n in dirs + files]:
            st = os.lstat(p)
            body = (os.readlink(p) if p.is_symlink() else
                    p.read_bytes() if p.is_file() else None)
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns,
                                             st.st_ctime_ns if ctime else None, body)
    return out


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model):
    """A finished 2-step run (its lock file, events, checkpoints, weights, trajectories)."""
    out = tmp_path_factory.mktemp("runs") / "run"
    assert main(["train", *FAKE, "--steps", "2", "--output-dir", str(out)]) == 0
    return out


@pytest.mark.parametrize("how, status", [
    (["--resume", "{run}"], 0),                      # resume it
    (["--output-dir", "{run}", "--overwrite"], 0),   # move it aside and start anew
    (["--output-dir", "{run}"], 2),                  # refused: it holds a run
    (["--resume", "{run}", "--steps", "3"], 0),      # train it further
])
def test_check_leaves_the_run_directory_as_it_was(finished_run, capsys, how, status):
    run = finished_run
    ctime = _tmpfile_works(run)
    before = _state(run.parent, ctime)
    assert main(["train", *FAKE, "--check", *(a.format(run=run) for a in how)]) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    after = _state(run.parent, ctime)
    assert after == before, [k for k in set(before) | set(after)
                             if before.get(k) != after.get(k)]


def test_check_of_a_new_run_creates_nothing_and_leaves_its_parent_as_it_was(tmp_path,
                                                                              tiny_model):
    parent = tmp_path / "runs"
    parent.mkdir()
    (parent / "other").write_text("a neighbour\n")
    ctime = _tmpfile_works(parent)
    before = _state(parent, ctime)
    assert main(["train", *FAKE, "--check", "--output-dir", str(parent / "new" / "run")]) == 0
    assert _state(parent, ctime) == before


def test_without_unnamed_files_the_probe_puts_the_directory_s_times_back(tmp_path,
                                                                       monkeypatch):
    """A filesystem without ``O_TMPFILE`` (overlayfs before Linux 6.6, some FUSE): the probe
    makes and removes a named file, then gives the directory back its atime and mtime; a
    directory that cannot take a file is still refused."""
    real_open = os.open

    def no_tmpfile(path, flags, *args, **kwargs):
        tmpfile = getattr(os, "O_TMPFILE", 0)
        if tmpfile and flags & tmpfile == tmpfile:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(rundir.os, "open", no_tmpfile)
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text("{}\n")
    before = _state(tmp_path, ctime=False)
    rundir.check_output_dir(run)
    rundir.check_output_dir(tmp_path / "new")
    assert _state(tmp_path, ctime=False) == before
    if os.path.isdir("/proc"):  # (root may write anywhere else: os.access says yes)
        with pytest.raises(rundir.RunDirError, match="not writable"):
            rundir.check_output_dir(Path("/proc"))
