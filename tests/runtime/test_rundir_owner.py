"""One owner per run directory (docs/cli.md, "One run per directory"): an OS-level lock held
from the first write to the last; a second ``train``, a ``--resume`` or ``run_training`` on a
held directory is refused with the holder's pid and writes nothing; the lock goes with its
process, however it dies; a resume of a finished run does nothing; a resumed run reports the
run's own start score; a run file that does not parse is named.

The holder here is a plain ``flock`` in a child process (not this project's code), so the tests
also show what a run that ignores the lock would do."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli import main

FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)  # as the runtime does: a longer pid left by the last run would stay
os.write(fd, f"{os.getpid()}\\n".encode())
print("held", flush=True)
time.sleep(600)
"""


def _train(out: Path, *extra: str, steps: int = 3) -> int:
    return main(["train", *FAKE, "--steps", str(steps), "--output-dir", str(out), *extra])


@pytest.fixture
def holder():
    procs = []

    def hold(run_dir: Path) -> subprocess.Popen:
        run_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir / ".lock")],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        procs.append(proc)
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def _err_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("reserve-occupy train:")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_second_train_on_a_held_directory_exits_2_and_writes_nothing(tmp_path, holder,
                                                                       capsys):
    out = tmp_path / "run"
    proc = holder(out)
    assert _train(out) == 2
    assert f"{out} is in use by pid {proc.pid}" in _err_line(capsys)
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing of a run written
    proc.kill()  # the holder dies without cleaning up: the kernel drops its lock
    proc.wait()
    assert _train(out) == 0


def test_resume_of_a_held_run_exits_2(tmp_path, holder, capsys):
    out = tmp_path / "run"
    assert _train(out, steps=2) == 0
    log = (out / "events.jsonl").read_bytes()
    proc = holder(out)
    capsys.readouterr()
    assert main(["train", "--no-progress", "--resume", str(out), "--steps", "4"]) == 2
    assert f"is in use by pid {proc.pid}" in _err_line(capsys)
    assert (out / "events.jsonl").read_bytes() == log


def test_run_training_refuses_a_held_directory_before_writing(tmp_path, holder):
    from runtime.config import load_config
    from runtime.recovery.rundir import RunDirInUse
    from runtime.session import run_training

    out = tmp_path / "run"
    proc = holder(out)
    cfg = load_config(None, {"rollout.backend": "fake", "run.output_dir": str(out)})
    with pytest.raises(RunDirInUse, match=f"in use by pid {proc.pid}"):
        asyncio.run(run_training(cfg, tmp_path / "no-model", [], None, out))
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


def test_two_locks_in_one_process_share_it_and_move_aside_keeps_holding(tmp_path):
    from runtime.recovery.rundir import check_not_in_use, lock_run_dir, move_aside

    out = tmp_path / "run"
    outer = lock_run_dir(out)
    inner = lock_run_dir(out)  # train holds it, then its run_training asks again
    assert inner is outer
    (out / "config.json").write_text("{}")
    moved = move_aside(out)  # --overwrite: the new, empty directory is held now
    assert (moved / "config.json").is_file() and out.is_dir()
    probe = subprocess.run([sys.executable, "-c", "import fcntl, os, sys; "
                            "fd = os.open(sys.argv[1], os.O_RDWR); "
                            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
                            str(out / ".lock")], capture_output=True, text=True)
    assert probe.returncode != 0 and "BlockingIOError" in probe.stderr
    inner.release()
    outer.release()
    check_not_in_use(out)  # released: a new owner may come


def test_resume_of_a_finished_run_does_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(out, steps=2) == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"}
    capsys.readouterr()
    assert main(["train", "--no-progress", "--resume", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "already finished all 2 steps" in printed and "nothing to do" in printed
    assert "engine" not in printed  # no engine started
    after = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"}
    assert after == before


def test_a_resumed_run_reports_its_start_score_and_labels_the_resume_point(tmp_path, capsys):
    out = tmp_path / "run"
    evals = ["--set", "run.eval_prompts=4", "--set", "run.eval_samples=1"]
    assert _train(out, *evals, steps=2) == 0
    start = json.loads((out / "eval_before.json").read_text())
    capsys.readouterr()
    assert main(["train", "--no-progress", "--resume", str(out), "--steps", "3"]) == 0
    printed = capsys.readouterr().out
    assert (f"evaluation reward before training: {start['reward']:.3f}" in printed
            and "the run's start" in printed)
    assert "evaluation reward at the resume point:" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval_before"] == start and "eval_at_resume" in summary


def test_a_run_file_that_does_not_parse_is_named(tmp_path):
    from runtime.accounting import read_log_counts
    from runtime.recovery.store import TrajectoryStore

    out = tmp_path / "run"
    assert _train(out, steps=2) == 0
    log = out / "events.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lines[3] = lines[3][:40] + "\n"  # a line in the middle cut short (two writers did this)
    log.write_text("".join(lines))
    with pytest.raises(ValueError, match=rf"{log}: line 4 is not valid JSON"):
        read_log_counts(log)
    store = TrajectoryStore(tmp_path / "t")
    store.root.mkdir(parents=True, exist_ok=True)
    store.path(7).write_text('{"samples": [')
    with pytest.raises(ValueError, match=rf"{store.path(7)}: not a readable trajectory"):
        store.load(7)


@pytest.mark.slow
@pytest.mark.parametrize("sig,status,word", [(2, 130, "interrupted"), (15, 143, "terminated")])
def test_a_signal_ends_train_with_one_line_and_frees_the_directory(tmp_path, sig, status, word):
    # Exit 1 would say the run failed, and a process killed outright leaves its engine open:
    # the run's task is cancelled, its finally blocks close the engine and release the
    # directory, and the line says how to continue.
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "train", *FAKE, "--steps", "500",
                             "--output-dir", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=root)
    assert proc.stdout is not None
    while "engine ready" not in proc.stdout.readline():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    assert "Traceback" not in err and "Task was destroyed" not in err, err
    from runtime.recovery.rundir import lock_run_dir, run_files

    # A run stopped before its first step keeps nothing (the same command starts it again);
    # one stopped later is continued with --resume. The line says which.
    if run_files(out):
        assert f"{word}; continue the run with --resume {out}" in err
    else:
        assert f"{word}; no step was trained and nothing kept; the same command starts the " \
               f"run again" in err

    lock_run_dir(out).release()  # the directory is free again


def test_the_lock_file_names_its_holder_whatever_an_earlier_holder_left(tmp_path):
    # An earlier holder with a longer pid, and a holder that wrote its line without cutting
    # the rest (the old test holder did): the first line is the pid, and the runtime's own
    # lock leaves exactly its line.
    from runtime.recovery.rundir import LOCK_NAME, _holder, lock_run_dir

    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_NAME).write_text("409\n99\n")
    assert _holder(out / LOCK_NAME) == "pid 409"
    (out / LOCK_NAME).write_text("123456789\n")
    with lock_run_dir(out):
        assert (out / LOCK_NAME).read_text() == f"{os.getpid()}\n"
