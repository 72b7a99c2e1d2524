"""Every command ends cleanly on a signal and on a closed or full output (docs/cli.md,
"Signals, pipes and exit status"): Ctrl-C exits 130 and SIGTERM 143 with one line, a closed
pipe ends quietly with 141, a full disk exits 74 with one line -- never a traceback and never
1 (check-trace's "divergence"); the study mains have simulate's range checks; an output
directory that holds an earlier run's results is refused or moved aside; output files are
written whole or not at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _vector_trace(tmp_path: Path) -> Path:
    out = tmp_path / "v.jsonl"
    with out.open("w") as f:
        subprocess.run([sys.executable, "-m", "runtime", "conformance", "--export",
                        "basic/00000"], stdout=f, check=True, env=ENV, cwd=ROOT)
    return out


def _closed_stdout(argv: list[str]) -> subprocess.CompletedProcess:
    """Run with stdout a pipe whose reader is gone before the first byte (``| head -0``)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "runtime", *argv], stdout=w,
                              stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT,
                              timeout=120)
    finally:
        os.close(w)


@pytest.mark.parametrize("argv", [
    ["simulate", "list"],
    ["check-trace", "{trace}", "--json"],
    ["check-trace", "{trace}"],
    ["conformance", "--export", "basic/00000"],
    ["conformance", "--list"],
], ids=lambda a: " ".join(a))
def test_a_closed_pipe_ends_quietly_with_141(argv, tmp_path):
    # Not a BrokenPipeError traceback, nor exit 1 (which check-trace documents as divergence).
    trace = str(_vector_trace(tmp_path)) if any("{trace}" in a for a in argv) else ""
    proc = _closed_stdout([a.replace("{trace}", trace) for a in argv])
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_a_full_disk_is_one_line_and_exit_74():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "runtime", "simulate", "list"],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=ENV,
                              cwd=ROOT, timeout=120)
    assert proc.returncode == 74
    assert proc.stderr.strip().splitlines() == [
        "reserve-occupy: cannot write the output: No space left on device"]


@pytest.mark.slow
@pytest.mark.parametrize("sig,status,word", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "terminated")])
@pytest.mark.parametrize("argv", [
    ["-m", "runtime", "faults", "--schedules", "200"],
    ["-m", "reserve_occupy_faults", "--schedules", "200"],
], ids=lambda a: " ".join(a[:3]))
def test_a_signal_ends_a_command_with_one_line(argv, sig, status, word):
    # Python's defaults: a KeyboardInterrupt traceback for Ctrl-C, and SIGTERM kills the
    # process without running its cleanup.
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # its first progress line: the command is running
    proc.send_signal(sig)
    proc.send_signal(sig)  # a second one (a terminal signals the whole group) changes nothing
    _, rest = proc.communicate(timeout=120)
    err = first + rest
    assert proc.returncode == status, err
    assert "Traceback" not in err and err.strip().endswith(word), err


def test_four_quick_ctrl_c_keep_the_clean_exit_of_faults():
    # Before: the first Ctrl-C raised KeyboardInterrupt inside a schedule's event loop
    # ("Exception ignored ... Event loop is closed", once no exit within 30 s), and one that
    # came after the command had handled the first ended it by SIGINT (-2), not 130.
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "faults", "--schedules", "1000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            cwd=ROOT, start_new_session=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # its first progress line: the command is running
    for _ in range(4):  # a terminal's Ctrl-C, pressed four times: the whole group, each time
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.02)  # apart, so that they are four signals and not one pending
    _, rest = proc.communicate(timeout=120)
    err = first + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "ignored" not in err, err
    assert err.strip().splitlines()[-1] == "reserve-occupy: interrupted", err


@pytest.mark.parametrize("argv,needle", [
    (["bound", "--batch-size", "10000000"], "--batch-size must be in [1, 100,000]"),
    (["bound", "--batches", "100000000"], "--batches must be in [1, 100,000]"),
    (["bound", "--seeds", ",".join(map(str, range(1001)))], "at most 1,000"),
    (["diagnose", "--batches", "100000000"], "--batches must be in [1, 100,000]"),
    (["diagnose", "--concurrency", "10000000"], "--concurrency must be in [1, 100,000]"),
], ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_the_study_mains_have_simulates_limits(argv, needle, capsys):
    # Upper limits too: bound --batch-size 10000000 grows to 2.5 GB with no output, and
    # --batches 100000000 runs until killed.
    import importlib

    module = importlib.import_module(f"reserve_occupy_sim.studies.{argv[0]}")
    assert module.main(argv[1:]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_simulate_out_twice_is_refused_or_moved_aside(tmp_path, capsys):
    # Overwriting results.json would leave the first run's plots beside the second's.
    out = tmp_path / "o"
    args = ["simulate", "--batches", "2", "--policy", "reserve_occupy", "--no-progress",
            "--out", str(out)]
    assert main(args) == 0
    first = (out / "results.json").read_text()
    capsys.readouterr()
    assert main(args) == 2
    assert "holds an earlier run's results (results.json" in capsys.readouterr().err
    assert (out / "results.json").read_text() == first
    assert main([*args, "--overwrite"]) == 0
    assert (tmp_path / "o.replaced-1" / "results.json").read_text() == first
    assert (out / "results.json").is_file()


def test_an_output_file_is_written_whole_or_not_at_all(tmp_path):
    from runtime import atomic_io

    target = tmp_path / "r.json"
    target.write_text("earlier")
    with pytest.raises(KeyboardInterrupt):
        with atomic_io.atomic(target) as f:
            f.write("half of it")
            raise KeyboardInterrupt  # Ctrl-C mid-write
    assert target.read_text() == "earlier" and sorted(os.listdir(tmp_path)) == ["r.json"]
    atomic_io.write_text(target, "new")
    assert target.read_text() == "new" and sorted(os.listdir(tmp_path)) == ["r.json"]


def test_faults_json_that_cannot_be_opened_is_refused_before_the_schedules(capsys):
    # Checked before the schedules run, by opening: os.access says yes to root for a /proc
    # file that cannot be opened for writing.
    assert main(["faults", "--schedules", "1", "--json", "/proc/version"]) == 2
    assert "--json /proc/version: not writable" in capsys.readouterr().err


FAKE_TRAIN = ["train", "--no-progress", "--steps", "2", "--set", "rollout.backend=fake",
              "--set", "run.eval_prompts=0", "--set", "staleness.batch_size=4",
              "--set", "staleness.group_size=4", "--set", "run.plot=false"]


def _internal_error_line(err: str, kind: str) -> Path:
    """The one line of an unexpected error; returns the traceback file it names."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "internal error (not bad input)" in lines[0] and kind in lines[0], err
    path = Path(lines[0].split("the traceback is in ")[1].split(";")[0])
    assert "Traceback (most recent call last)" in path.read_text()
    return path


def test_an_unexpected_error_during_a_run_exits_70_not_2(tmp_path, monkeypatch, capsys):
    # A ValueError from inside a run is a bug, not bad input: reporting it as exit 2 with its
    # bare message ("substring not found") would send the user hunting in their config.
    from runtime.driver import Driver

    async def broken(self):
        raise ValueError("substring not found")

    monkeypatch.setattr(Driver, "run", broken)
    assert main([*FAKE_TRAIN, "--output-dir", str(tmp_path / "run")]) == 70
    path = _internal_error_line(capsys.readouterr().err, "ValueError: substring not found")
    assert "driver" not in path.name and 'raise ValueError("substring not found")' in \
        path.read_text()
    path.unlink()


def test_an_unexpected_error_in_any_command_exits_70(capsys):
    # Exit 1 is check-trace's "the trace diverges": a bug must not read as a verdict.
    from runtime.cli import guarded

    assert guarded(lambda: {}["missing"], "reserve-occupy check-trace") == 70
    _internal_error_line(capsys.readouterr().err, "KeyError").unlink()


def test_typed_bad_input_still_exits_2_with_its_line(tmp_path, monkeypatch, capsys):
    from runtime import session
    from runtime.inputs import InputError

    def too_long(*args, **kwargs):
        raise InputError("prompt 3 is 200 tokens; it exceeds rollout.max_model_len 128")

    monkeypatch.setattr(session, "check_lengths", too_long)
    assert main([*FAKE_TRAIN, "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["reserve-occupy train: prompt 3 is 200 tokens; it exceeds "
                   "rollout.max_model_len 128"]


def test_simulate_overwrite_of_the_current_directory_is_one_line(tmp_path, monkeypatch,
                                                                  capsys):
    # "." has an empty name, so it cannot be moved aside: one line, exit 2, not a traceback.
    monkeypatch.chdir(tmp_path)
    args = ["simulate", "--batches", "2", "--policy", "reserve_occupy", "--no-progress",
            "--out", "."]
    assert main(args) == 0
    first = (tmp_path / "results.json").read_text()
    capsys.readouterr()
    for extra in ([], ["--overwrite"]):
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is the current directory" in err[0], err
    assert (tmp_path / "results.json").read_text() == first


@pytest.fixture
def loop_signals():
    """run_async in this process: its signal state is put back after the test."""
    from runtime import cli

    yield cli
    cli._signalled = cli._terminated = False
    cli._Loop.task = cli._Loop.loop = None
    cli._Loop.closing = False


def test_an_error_while_a_signalled_run_unwinds_still_ends_as_the_signal(loop_signals):
    # Before: only CancelledError became 143; a dead engine surfacing in a finally (here a
    # RuntimeError) made train print "the run failed" and exit 1.
    import asyncio

    async def run() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(60)  # cancelled by the signal
        finally:
            raise RuntimeError("the engine died with the terminal's Ctrl-C")

    with pytest.raises(loop_signals.Terminated) as caught:
        loop_signals.run_async(run())
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_signal_while_the_loop_closes_is_not_lost(loop_signals):
    # Before: the main task had ended, so the signal's cancel did nothing and the run
    # returned as if never signalled (exit 0); every later signal was ignored.
    kept = []

    async def finalised_at_close():
        try:
            yield 1
        finally:  # runs in the Runner's shutdown_asyncgens, after the main task ended
            os.kill(os.getpid(), signal.SIGTERM)

    async def run() -> str:
        gen = finalised_at_close()
        kept.append(gen)  # closed by the loop as it closes, not when run returns
        await gen.__anext__()
        return "done"

    with pytest.raises(loop_signals.Terminated):
        loop_signals.run_async(run())


def test_a_signal_once_the_loop_is_closed_is_noted_not_an_error(loop_signals):
    # Before: call_soon_threadsafe on the closed loop raised "Event loop is closed" inside the
    # handler, which train reported as "the run failed".
    import asyncio

    loop = asyncio.new_event_loop()
    task = loop.create_future()
    loop.close()
    loop_signals._Loop.loop, loop_signals._Loop.task = loop, task
    loop_signals._on_loop_signal(signal.SIGINT, None)  # raised nothing
    assert loop_signals.interrupted() and not loop_signals._terminated
