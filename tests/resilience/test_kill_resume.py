"""Kill a real training run with SIGKILL at a seeded point, resume it with ``--resume``, and
audit the run directory (tests/resilience/audit.py): the log passes ``check-trace`` strictly,
eta holds for every trained unit by the log and by each token's version across the restart, no
admitted unit is lost, and the units that had finished before the kill are trained after it.

Two runs: the fake engine with the real GRPO trainer (fast; no checkpoints, so recovery retrains
every batch from the log and the trajectory files stay for the per-token audit), and real vLLM
with periodic checkpoints.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from runtime.recovery.store import unit_filename

from ..procs import stop
from .audit import audit_run, kill_point, publishes

ROOT = Path(__file__).resolve().parents[2]


def _cmd(out: Path, settings: dict[str, object]) -> list[str]:
    cmd = [sys.executable, "-m", "runtime", "train", "--no-progress", "--output-dir", str(out)]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def _some_finished(out: Path) -> bool:
    try:
        return bool(kill_point(out).finished)
    except Exception:  # the log's last line is being written: look again
        return False


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.NoSuchProcess:
        return "(gone)"


def _kill_at(cmd: list[str], out: Path, after_publishes: int, delay: float,
             timeout: float, watchdog: bool = False) -> float:
    """Start the run, SIGKILL it ``delay`` s after its log shows ``after_publishes``
    publishes and some finished unit waiting to be trained (still so when it is stopped for
    the kill); returns when it is dead (seconds it ran). ``watchdog``: the run's own watchdog
    must end what it started (vLLM's engine process among it), not the test."""
    t0 = time.monotonic()
    tree: list[psutil.Process] = []
    names: list[str] = []
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        while True:
            while publishes(out / "events.jsonl") < after_publishes or not _some_finished(out):
                if proc.poll() is not None:
                    raise AssertionError(f"the run ended before the kill point:\n"
                                         f"{proc.stdout.read().decode()[-3000:]}")  # type: ignore
                if time.monotonic() - t0 > timeout:
                    raise AssertionError("the run never reached the kill point")
                time.sleep(0.02)
            time.sleep(delay)
            # Frozen, the run cannot change its log between this look and the kill: the kill
            # point has a finished unit by construction, not by winning a race with the trainer.
            stop(proc.pid)  # returns once it is stopped, not when the signal is sent
            if _some_finished(out):
                break
            proc.send_signal(signal.SIGCONT)  # it trained them meanwhile: wait for more
        tree = psutil.Process(proc.pid).children(recursive=True)
        names = [_name(child) for child in tree]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The run's watchdog ends what a SIGKILLed run started (runtime/watchdog.py; vLLM's engine
    # process would outlive it): with ``watchdog``, the test waits for it to do so (SIGTERM,
    # SIGKILL 5 s later), as test_orphans.py did in a run of its own. Otherwise, as a dead
    # machine or container takes the whole tree at once, the test does too, by pid.
    left: list[psutil.Process] = []
    if watchdog:
        _, left = psutil.wait_procs(tree, timeout=120)
    for child in tree:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"processes of the killed run still alive: {alive}"
    if watchdog:
        assert any("EngineCore" in name for name in names), names
        assert not left, f"the watchdog left processes of the killed run: {left}"
    return time.monotonic() - t0


def _resume(cmd: list[str], out: Path, timeout: float) -> str:
    done = subprocess.run(cmd + ["--resume", str(out)], check=False, cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def _kill_and_resume(tmp_path: Path, seed: int, settings: dict[str, object], steps: int,
                     eta: int, timeout: float, token_versions: bool,
                     watchdog: bool = False) -> dict:
    rng = random.Random(seed)
    out = tmp_path / "run"
    cmd = _cmd(out, {**settings, "run.steps": steps, "staleness.max_staleness": eta,
                     "run.seed": seed})
    after, delay = rng.randint(2, steps - 4), rng.uniform(0.0, 0.02)
    ran = _kill_at(cmd, out, after, delay, timeout, watchdog)
    shutil.copytree(out, tmp_path / "killed")  # the state the kill left, for a second resume
    point = kill_point(out)
    assert point.version < steps, "killed after the last step: make the run slower"
    assert point.finished, "nothing had finished at the kill point: pick another seed"
    resumed = _resume(cmd, out, timeout)
    assert "recovery:" in resumed
    problems, stats = audit_run(out, eta, steps, [point], token_versions)
    assert problems == [], "\n".join(problems[:20])
    finished_then = len(point.finished)
    assert stats["trained_after_restart"] >= 1
    # the summary counts every trained batch, the one recovery published included (issue 13)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == steps == publishes(out / "events.jsonl")
    print(f"\nkilled after {after} publishes + {delay:.2f} s ({ran:.1f} s into the run): "
          f"{finished_then} finished and {len(point.in_flight)} in-flight units at the kill; "
          f"after the resume {stats['trained_after_restart']} of the finished ones trained; "
          f"{stats['batches']} batches, {stats['units_trained']} units, "
          f"{stats['tokens_checked']} token versions checked")
    return stats


# Generation is fast and training slower (8 groups x 4, two epochs), so buffers ahead of the
# trainer hold finished units at most instants: the kill finds some to carry across.
FAKE = {"rollout.backend": "fake", "rollout.fake_token_s": 0.003, "run.eval_prompts": 0,
        "run.plot": False, "staleness.batch_size": 8, "staleness.group_size": 4,
        "trainer.epochs": 2,
        "reward.name": "tests.resilience.rewards:parity", "recovery.commit_every": 0,
        "recovery.fsync": False, "trainer.lr": 0.001}


@pytest.mark.slow
def test_sigkill_and_resume_on_the_fake_engine(tmp_path):
    t0 = time.monotonic()
    _kill_and_resume(tmp_path, seed=11, settings=FAKE, steps=12, eta=2, timeout=180,
                     token_versions=True)
    print(f"kill-and-resume (fake engine, GRPO trainer): {time.monotonic() - t0:.1f} s")

    # The same killed state, but one finished unit's trajectory file is gone (a disk lost it):
    # the resume filters that unit and says so, and the audit, which knows of no loss, flags
    # it -- the audit is not blind to a lost unit.
    killed = tmp_path / "killed"
    point = kill_point(killed)
    victim = min(point.finished, key=str)
    (killed / "trajectories" / unit_filename(victim)).unlink()
    cmd = _cmd(killed, {**FAKE, "run.steps": 12, "staleness.max_staleness": 2, "run.seed": 11})
    output = _resume(cmd, killed, 180)
    assert "WARNING 1 finished units had no trajectory file" in output and repr(victim) in output
    problems, _ = audit_run(killed, 2, 12, [point], token_versions=True)
    assert any(repr(victim) in p and "FILTERED" in p for p in problems), problems


@pytest.mark.slow
def test_sigkill_and_resume_with_keep_refit_on_the_fake_engine(tmp_path):
    # In-flight refit: requests run across weight syncs in one segment; the kill and the
    # resume keep every token's version (the audit checks them) and the bound.
    t0 = time.monotonic()
    # Slower tokens than FAKE's, so that syncs find requests decoding.
    settings = {**FAKE, "rollout.refit": "keep", "rollout.fake_token_s": 0.03}
    _kill_and_resume(tmp_path, seed=11, settings=settings, steps=12,
                     eta=2, timeout=180, token_versions=True)
    print(f"kill-and-resume (fake engine, refit keep): {time.monotonic() - t0:.1f} s")
    samples = [smp for path in (tmp_path / "run" / "trajectories").iterdir()
               for smp in json.loads(path.read_text())["samples"]]
    assert all(smp["segments"] == 1 for smp in samples)  # no sync ended a request
    assert any(len(set(smp["versions"])) > 1 for smp in samples)  # some ran across one


VLLM = {"run.eval_prompts": 0, "run.plot": False, "staleness.batch_size": 8,
        "staleness.group_size": 4, "recovery.commit_every": 2, "rollout.max_num_seqs": 32}


@pytest.mark.slow
@pytest.mark.vllm
def test_sigkill_and_resume_on_vllm(tmp_path):
    # Also what test_orphans.py checked in a run (an engine start-up) of its own: after kill -9
    # of train, its watchdog ends every process the run started, vLLM's EngineCore included
    # (before the watchdog, EngineCore was reparented to init and ran on for good).
    t0 = time.monotonic()
    _kill_and_resume(tmp_path, seed=5, settings=VLLM, steps=8, eta=1, timeout=300,
                     token_versions=False, watchdog=True)
    print(f"kill-and-resume (vLLM, GRPO trainer): {time.monotonic() - t0:.1f} s")


# The one combination of three properties that `make test` shows in pairs: kill and resume on
# vLLM (the test above), kill and resume with refit keep (the fake engine's, which also checks
# every token's version), refit keep on vLLM (tests/runtime/test_vllm_refit.py: no sync ends a
# request, one runs across a sync, the trace conforms). Two engine start-ups, about two minutes
# of the suite on two loaded cores: it runs in `make test-deep` (RO_TEST_DEEP=1).
@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.deep
@pytest.mark.skipif(os.environ.get("RO_TEST_DEEP") != "1", reason="make test-deep runs it")
def test_sigkill_and_resume_with_keep_refit_on_vllm(tmp_path):
    # Longer answers than VLLM's, so that syncs find requests decoding (refit keep); the
    # parity reward keeps variance in the groups whatever the tiny model writes.
    t0 = time.monotonic()
    settings = {**VLLM, "rollout.refit": "keep", "rollout.max_tokens": 24,
                "reward.name": "tests.resilience.rewards:parity"}
    _kill_and_resume(tmp_path, seed=5, settings=settings, steps=8, eta=1, timeout=300,
                     token_versions=False)
    print(f"kill-and-resume (vLLM, refit keep): {time.monotonic() - t0:.1f} s")
    run = tmp_path / "run"
    notes = [json.loads(x) for x in (run / "driver_notes.jsonl").read_text().splitlines()]
    assert [n for n in notes if n.get("event") == "refit_kept"]  # the syncs kept, not ended
    # no sync ended a decoding request: the only ones restarted are those a load found in the
    # engine without a token yet (aborted so they get the new prefix-cache salt)
    assert all(n["kept"] == 0 for n in notes if n.get("event") == "resume")
    # Not shown here: that a sync carried a decoding request. The saved trajectories would
    # show it (tokens of two versions in one sample, as the fake test checks), but recovery
    # deletes a unit's file once it is committed, and with commit_every 2 about one survives
    # the run; the refit_kept count is the requests still running after the load, not proof
    # they were decoding. The carry on vLLM is shown in tests/runtime/test_vllm_refit.py.
