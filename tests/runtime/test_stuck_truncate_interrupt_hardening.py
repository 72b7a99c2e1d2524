"""Ctrl-C (and SIGTERM) while a truncating STUCK release's units are being rewarded
(``staleness.stuck_action=truncate``, docs/runtime.md "The STUCK release's truncate"): the
run ends at once, exit 130 (143), however long the user's reward would take. Before, the
driver's shutdown waited for those units' rewards (an orderly stop wrote them), so a reward
that hangs held the Ctrl-C for up to ``reward.timeout_s`` per group (60 s by default, the
groups one after another in the one worker): with the reward below and ``reward.timeout_s``
3600, the run was still there a minute after the SIGINT, while this test waits 120 s at most.

Now the interruption cancels their scoring, which ends the reward's worker, and each such
unit (FINISHED in the log since the release, without its trajectory file) is filtered with
reason ``shutdown``; the log strict-checks and ``--resume`` re-admits their prompts, as it
does the units an orderly stop aborted (docs/recovery.md, step 3).

Through the real CLI with the fake engine (``rollout.backend=fake``), the reward a
``module:function`` in the test's directory: it hangs (``time.sleep(3600)``, then it would
write ``returned``) on every call once the run has trained a step (``out/metrics.jsonl`` not
empty), until the test creates ``released`` for the resumed run. Nothing here is timed: the
SIGINT is sent once the log shows a truncating release whose units are still unwritten while
the reward hangs, and what is asserted is the log, the files and the processes after."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from reserve_occupy_porting.checker import STRICT, check

from .test_reward_untrusted import PREFIX, _cmd, _env, _module, _no_worker_left

HANG_AFTER_A_STEP = """
    import os, time

    def reward(prompt, completion):
        metrics = os.path.join("out", "metrics.jsonl")
        if (os.path.exists(metrics) and os.path.getsize(metrics) > 0
                and not os.path.exists("released")):
            open("scoring", "a").close()
            time.sleep(3600)
            open("returned", "a").close()  # never reached: the worker is ended first
        return float(len(completion) % 2)
"""
TRUNCATE = ["--set", "staleness.stuck_action=truncate", "--set", "timeouts.stuck_s=1",
            "--set", "reward.timeout_s=3600"]


def _records(out: Path) -> list[dict]:
    text = (out / "events.jsonl").read_text() if (out / "events.jsonl").exists() else ""
    return [json.loads(x) for x in text.splitlines() if x.endswith("}")]


def _units_of(record: dict) -> set[str]:
    units = {record.get("unit")} | {m["unit"] for m in record.get("moves", ())}
    units |= {u["unit"] for u in (record.get("batch") or {}).get("units", ())}
    return units - {None}


def _truncating_now(tmp_path: Path) -> set[str]:
    """The units of a truncating release that are still being rewarded while the reward
    hangs: truncated, no line of the log after the release names them, and no trajectory
    file of theirs (a unit a release truncated before the reward began to hang was rewarded
    and written). Empty if there are none (yet)."""
    if not (tmp_path / "scoring").exists():
        return set()
    out = tmp_path / "out"
    records = _records(out)
    for k, r in enumerate(records):
        if r["op"] != "release_stuck":
            continue
        cut = {m["unit"] for m in r["moves"] if m["reason"] == "truncate"}
        later = set().union(*(_units_of(x) for x in records[k + 1:]))
        if cut and not cut & later and not any(
                (out / "trajectories" / f"s-{u}.json").exists() for u in cut):
            return cut
    return set()


def signal_when(tmp_path: Path, cmd: list[str], ready, sig: int) -> tuple[object, int, str]:
    """Run ``cmd`` in a process group of its own; once ``ready(tmp_path)`` returns something
    true (read from the run's files: nothing timed), send ``sig`` to the whole group, as a
    terminal's Ctrl-C does. Returns what ``ready`` returned, the exit status and stderr. The
    group is killed if the run is still there after the test (the reward sleeps 3600 s)."""
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (found := ready(tmp_path)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return found, proc.returncode, err


def check_then_resume(tmp_path: Path, cmd: list[str], records: list[dict], cut: set,
                      resume: bool) -> None:
    """The stopped run's log passes the strict check; with ``resume``, ``--resume`` (the
    reward released) re-admits each of ``cut``'s prompts once, ends its steps, and its log
    passes the strict check too, no reward worker left."""
    out = tmp_path / "out"
    report = check(io.StringIO((out / "events.jsonl").read_text()), STRICT)
    assert report.ok, report.problem
    if not resume:
        return
    # --resume: their prompts are re-admitted, each once, and the run ends its steps
    (tmp_path / "released").touch()
    prompt = {r["unit"]: r["meta"]["prompt"] for r in records if r["op"] == "reserve"}
    r = subprocess.run([*cmd, "--resume", str(out)], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    again = [x for x in _records(out)[len(records):] if x["op"] == "reserve"
             and x["meta"].get("readmit_of") in cut]
    assert sorted(x["meta"]["readmit_of"] for x in again) == sorted(cut)
    assert all(x["meta"]["prompt"] == prompt[x["meta"]["readmit_of"]] for x in again)
    report = check(io.StringIO((out / "events.jsonl").read_text()), STRICT)
    assert report.ok, report.problem
    _no_worker_left(tmp_path)


@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated")])
def test_an_interrupt_while_truncated_units_are_rewarded_ends_the_run_and_filters_them(
        tmp_path, sig, status, word):
    mod = _module(tmp_path, HANG_AFTER_A_STEP)
    cmd = _cmd(tmp_path, f"{mod}:reward", *TRUNCATE)
    steps = cmd.index("--steps")
    cmd[steps + 1] = "4"  # 3 steps after the first: the reward hangs before the run can end
    cut, returncode, err = signal_when(tmp_path, cmd, _truncating_now, sig)
    assert returncode == status, err
    assert f"{PREFIX} {word}; continue the run with --resume" in err and "Traceback" not in err
    # the reward's worker was ended, its sleep never returned, no worker is left
    assert not (tmp_path / "returned").exists()
    _no_worker_left(tmp_path)
    out = tmp_path / "out"
    records = _records(out)
    for unit in cut:  # filtered with reason shutdown, the last word on it; no file
        last = [r for r in records if unit in _units_of(r)][-1]
        assert (last["op"], last["unit"], last["meta"]) \
            == ("filter", unit, {"reason": "shutdown"}), last
        assert not (out / "trajectories" / f"s-{unit}.json").exists()
    check_then_resume(tmp_path, cmd, records, cut, resume=sig == signal.SIGINT)
