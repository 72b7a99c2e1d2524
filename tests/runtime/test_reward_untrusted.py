"""A user's reward is untrusted code (issue 36, class 2), through the real CLI: it runs in a
worker process (``runtime.tasks.isolated``), so a reward that hangs leaves the unit timeout,
``reward.timeout_s``, Ctrl-C and SIGTERM working; every value it returns is checked; a module
that cannot be imported, raises or calls ``sys.exit`` while importing is one line, exit 2.

Each test runs ``python -m runtime train`` with the fake engine in a directory holding the
reward module (the CLI imports ``module:function`` from the working directory)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=2", "--set", "staleness.group_size=2",
        "--set", "run.plot=false", "--steps", "2"]
PREFIX = "reserve-occupy train:"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def _module(tmp_path: Path, source: str, name: str = "user_reward") -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def _cmd(tmp_path: Path, reward: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "runtime", "train", *FAKE, "--set", f"reward.name={reward}",
            "--output-dir", str(tmp_path / "out"), *extra]


def _train(tmp_path: Path, reward: str, *extra: str, timeout: float = 300
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cmd(tmp_path, reward, *extra), cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith(PREFIX)]
    assert len(lines) == 1, err
    return lines[0]


def _no_worker_left(tmp_path: Path) -> None:
    """No worker of this test's runs is alive (they run with ``tmp_path`` as cwd)."""
    for _ in range(50):  # the kernel reaps a killed worker's parent-death signal promptly
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if b"runtime.tasks.isolated" in cmd and cwd == str(tmp_path):
                left.append(pid)
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"reward worker(s) {left} outlived the run")


# ---------------------------------------------------------------------- values ---------------


@pytest.mark.parametrize("value, shown", [
    ('"1.0" if "1" in completion else "0.0"', "'(1|0).0'"),  # a string was taken as a number
    ('"1" in completion', "(True|False)"),  # so was a bool
])
def test_a_reward_value_that_is_not_a_real_number_stops_the_run(tmp_path, value, shown):
    mod = _module(tmp_path, f"""
        def reward(prompt, completion):
            return {value}
    """)
    r = _train(tmp_path, f"{mod}:reward")
    assert r.returncode == 2, r.stderr
    line = _one_line(r.stderr)
    assert re.search(f"reward '{mod}:reward' returned {shown} for ", line), line
    assert "arithmetic.jsonl:" in line  # the prompt it scored
    assert not (tmp_path / "out" / "checkpoint").exists()  # nothing trained, nothing saved
    _no_worker_left(tmp_path)


def test_numpy_scalars_and_ints_are_rewards_and_a_print_does_not_corrupt_the_answer(tmp_path):
    mod = _module(tmp_path, """
        import numpy as np

        def reward(prompt, completion):
            print("scoring", completion)  # goes to stderr, not into the worker's answers
            return np.float32(0.5) if len(completion) % 2 else int(len(completion) % 3)
    """)
    r = _train(tmp_path, f"{mod}:reward")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    _no_worker_left(tmp_path)


# ---------------------------------------------------------------------- imports --------------


@pytest.mark.parametrize("source, expected", [
    ("def reward(prompt, completion)\n    return 1.0\n", "SyntaxError"),
    ("raise RuntimeError('no reward server')\n", "RuntimeError: no reward server"),
    ("import sys\nsys.exit(3)\n", "it called sys.exit(3)"),
    ("import no_such_package_here\n", "ModuleNotFoundError"),
])
def test_a_reward_module_that_cannot_be_imported_is_one_line_exit_2(tmp_path, source, expected):
    (tmp_path / "broken_reward.py").write_text(source)
    for check in ([], ["--check"]):
        r = _train(tmp_path, "broken_reward:reward", *check)
        assert r.returncode == 2, r.stderr
        line = _one_line(r.stderr)
        assert "reward 'broken_reward:reward': cannot import broken_reward" in line
        assert expected in line
        assert "internal error" not in r.stderr
    _no_worker_left(tmp_path)


# ---------------------------------------------------------------------- hangs ----------------

HANG_FIRST = """
    import os, time

    def reward(prompt, completion):
        if not os.path.exists("hung-once"):  # the first call hangs; the worker after it not
            open("hung-once", "w").close()
            time.sleep(3600)
        return float(len(completion) % 2)
"""


def _notes(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in
            (tmp_path / "out" / "driver_notes.jsonl").read_text().splitlines()]


def test_a_reward_past_reward_timeout_s_drops_its_group_and_the_run_goes_on(tmp_path):
    mod = _module(tmp_path, HANG_FIRST)
    r = _train(tmp_path, f"{mod}:reward", "--set", "reward.timeout_s=1")
    assert r.returncode == 0, r.stderr
    notes = _notes(tmp_path)
    timed_out = [n for n in notes if n["event"] == "reward_timeout"]
    assert len(timed_out) == 1 and "reward.timeout_s = 1 s" in timed_out[0]["error"]
    assert any(n["event"] == "abort" and n["unit"] == timed_out[0]["unit"]
               and n["reason"] == "reward_timeout" for n in notes)
    _no_worker_left(tmp_path)


def test_the_unit_timeout_fires_while_a_reward_hangs(tmp_path):
    mod = _module(tmp_path, HANG_FIRST)
    # reward.timeout_s (60 s) is beyond the unit timeout: only timeouts.unit_s ends the call
    r = _train(tmp_path, f"{mod}:reward", "--set", "timeouts.unit_s=2")
    assert r.returncode == 0, r.stderr
    aborted = [n for n in _notes(tmp_path) if n["event"] == "abort"
               and n["reason"] == "timeout"]
    assert aborted
    _no_worker_left(tmp_path)


def test_a_reward_past_reward_timeout_s_in_evaluation_stops_the_run(tmp_path):
    mod = _module(tmp_path, HANG_FIRST)
    r = _train(tmp_path, f"{mod}:reward", "--set", "reward.timeout_s=1",
               "--set", "run.eval_prompts=2", "--set", "run.eval_samples=1")
    assert r.returncode == 2, r.stderr
    line = _one_line(r.stderr)
    assert f"reward '{mod}:reward' did not return within reward.timeout_s = 1 s" in line
    _no_worker_left(tmp_path)


HANG_ALWAYS = """
    import time

    def reward(prompt, completion):
        open("scoring", "w").close()
        time.sleep(3600)
"""


@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_and_sigterm_end_a_run_whose_reward_hangs(tmp_path, sig, status, word):
    mod = _module(tmp_path, HANG_ALWAYS)
    proc = subprocess.Popen(_cmd(tmp_path, f"{mod}:reward"),
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "scoring").exists():  # the reward is hanging now
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        time.sleep(0.5)
        os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C: the whole process group
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == status, err
    assert f"{PREFIX} {word}" in err and "Traceback" not in err
    _no_worker_left(tmp_path)


def test_kill_9_of_the_run_ends_its_reward_worker(tmp_path):
    mod = _module(tmp_path, HANG_ALWAYS)
    proc = subprocess.Popen(_cmd(tmp_path, f"{mod}:reward"),
                            cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "scoring").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _no_worker_left(tmp_path)


@pytest.mark.parametrize("value, shown", [
    # the case: a group mixing inf and 0 trained a NaN checkpoint, exit 0
    ('float("inf")', "inf"),
    ("1e308", r"1e\+308"),  # overflowed the group's mean: exit 70
    ('float("nan")', "nan"),  # dropped before too: kept so
])
def test_a_reward_number_that_is_not_finite_drops_its_group_and_the_run_goes_on(
        tmp_path, value, shown):
    """The first group scored gets the bad number for its first completion and 0 for the
    other (a group mixing them, counted in the worker, whatever the completions are); every
    later group alternates 1 and 0. That group is dropped (``reward_error``, naming the value)
    and the run trains its steps on the others: exit 0, every weight finite."""
    import torch
    from safetensors.torch import load_file

    mod = _module(tmp_path, f"""
        calls = [0]

        def reward(prompt, completion):
            calls[0] += 1
            if calls[0] == 1:
                return {value}
            return float(calls[0] % 2)
    """)
    r = _train(tmp_path, f"{mod}:reward")
    assert r.returncode == 0, r.stderr
    notes = [json.loads(x) for x in
             (tmp_path / "out" / "driver_notes.jsonl").read_text().splitlines() if x]
    dropped = [n for n in notes if n.get("event") == "reward_error"]
    assert [n["unit"] for n in dropped] == ["g0"], notes
    assert re.search(f"returned {shown} for ", dropped[0]["error"]), dropped[0]
    assert {"event": "abort", "unit": "g0", "reason": "reward_error"}.items() <= next(
        n for n in notes if n.get("event") == "abort" and n.get("unit") == "g0").items()
    weights = sorted((tmp_path / "out" / "weights").glob("v*/model.safetensors"))
    assert weights, list((tmp_path / "out").iterdir())
    for t in load_file(str(weights[-1])).values():
        assert torch.isfinite(t).all()
    _no_worker_left(tmp_path)


# ---------------------------------------------------------------------- without the CLI ------


def test_reward_value_takes_finite_real_numbers_within_the_limit_only():
    import fractions

    import numpy as np

    from runtime.tasks.base import (REWARD_LIMIT, Prompt, RewardNotFinite, RewardValueError,
                                     reward_value)

    p = Prompt("1+1=", "2", index=4, source="data.jsonl:5")
    for ok in (0, 1, -3, 0.25, np.float32(0.5), np.float64(-2.0), np.int64(7),
               fractions.Fraction(1, 4), REWARD_LIMIT, -REWARD_LIMIT):
        assert reward_value(ok, "r", p) == float(ok)
    assert REWARD_LIMIT == 2.0 ** 126  # |r - mean| <= 2**127 < float32's max (3.4e38)
    assert 2 * REWARD_LIMIT < float(np.finfo(np.float32).max)

    class Loud:
        def __repr__(self):
            raise RuntimeError("no")

    for bad in (math.nan, math.inf, -math.inf, 1e308, np.nextafter(REWARD_LIMIT, math.inf),
                10 ** 400, np.float32("inf")):
        with pytest.raises(RewardNotFinite, match=r"^reward 'r' returned .* for "
                                                  r"data\.jsonl:5: not a finite number"):
            reward_value(bad, "r", p)
    for bad in (True, np.bool_(True), "1.0", None, [1.0], complex(1, 0), Loud()):
        with pytest.raises(RewardValueError, match=r"^reward 'r' returned .* for "
                                                   r"data\.jsonl:5: a reward must be"):
            reward_value(bad, "r", p)


def test_an_isolated_reward_keeps_its_counters_and_answers_checks_across_a_restart(
        tmp_path, monkeypatch):
    import asyncio

    from runtime.tasks.base import (
        Prompt,
        RewardAborted,
        RewardCrashed,
        RewardError,
        RewardRaised,
        RewardTimeout,
        check_answers,
    )
    from runtime.tasks.isolated import IsolatedReward

    (tmp_path / "counting_reward.py").write_text(textwrap.dedent("""
        import time

        class Counting:
            needs_answer = True

            def __init__(self, slow="never"):
                self.slow, self.n = slow, 0

            def check_answer(self, answer):
                if not answer.isdigit():
                    raise ValueError(f"{answer!r} is not a number")

            def metrics(self):
                return {"scored": self.n}

            def __call__(self, prompt, completion):
                self.n += 1
                if completion == self.slow:
                    time.sleep(3600)
                if completion == "raise":
                    raise KeyError("no such answer")
                if completion == "exit":
                    raise SystemExit(0)
                if completion == "die":
                    import os
                    os._exit(9)
                return float(completion == prompt.answer)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    r = IsolatedReward("counting_reward:Counting", "counting_reward:Counting",
                       {"slow": "hang"}, timeout_s=1.0)
    try:
        assert r.needs_answer
        prompts = [Prompt("a", "1", index=0, source="f:1"), Prompt("b", "x", index=1,
                                                                    source="f:2")]
        with pytest.raises(RewardError, match=r"^f:2: reward 'n' cannot score against this "
                                              r"answer \('x' is not a number\)"):
            check_answers(r, "n", prompts, "answer")

        async def go():
            assert await r.score(prompts[0], ["1", "2", "1"]) == [1.0, 0.0, 1.0]
            assert r.metrics() == {"scored": 3.0}
            with pytest.raises(RewardTimeout, match="reward.timeout_s = 1 s .* f:1"):
                await r.score(prompts[0], ["1", "hang"])
            assert r._proc is None  # the hung worker was ended
            assert await r.score(prompts[0], ["1"]) == [1.0]  # a fresh one answers
            # a raise is the group's (every answer is read: the worker stays usable)
            with pytest.raises(RewardRaised, match="KeyError"):
                await r.score(prompts[0], ["raise", "1"])
            assert r._proc is not None and await r.score(prompts[0], ["1"]) == [1.0]
            with pytest.raises(RewardAborted, match=r"raised SystemExit\(0\)"):
                await r.score(prompts[0], ["exit"])
            with pytest.raises(RewardCrashed, match=r"exited \(status 9\) while scoring f:1"):
                await r.score(prompts[0], ["die"])

        asyncio.run(go())
        # the ended workers' last reported counts are kept (the calls of the hung and the
        # dead request died with them): 3 by the first, 1 + 2 + 1 + 1 by the second; only
        # the hang needed a restart (a raise and a SystemExit leave the worker serving)
        assert r.metrics() == {"scored": 8.0} and r.restarts == 1
        # the RewardFn interface outside an event loop: one call, a fresh worker
        assert r(prompts[0], "1") == 1.0
        assert r.metrics() == {"scored": 9.0} and r.restarts == 2
    finally:
        r.close()
    assert r._proc is None
