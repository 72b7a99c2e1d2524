"""Whatever a run starts dies with it (docs/cli.md, "Orphans"): four Ctrl-Cs in a row keep the
clean exit 130 with no traceback; a Ctrl-C while the engine starts ends the run at once, not
when the engine is up. That after ``kill -9`` of ``train`` no process it started (vLLM's
``VLLM::EngineCore``) is left running is checked on the vLLM run that
tests/resilience/test_kill_resume.py kills (its watchdog, not the test, must end them), which
saves this file an engine start-up of its own.

Each test runs the real command (the embedded demo, vLLM on CPU) in a session of its own, as a
terminal would, and waits on what the run prints or on its process tree, never on a guess of
how long something takes."""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ..procs import stop

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PATIENCE_S = 300  # a generous bound on a start-up: reaching it fails the test, it paces nothing


class Run:
    """``reserve-occupy train`` in a new session; its output lines on a queue."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime", "train", "--steps", "500", "--output-dir",
             str(out), "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
        self.lines: list[str] = []
        self.seen: list[psutil.Process] = []  # every process of its tree looked at (cleanup)
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while not any(text in line for line in self.lines):
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the run never printed {text!r}:\n"
                                     + "".join(self.lines)) from None
            if line is None:
                raise AssertionError(f"the run ended before {text!r}:\n" + "".join(self.lines))
            self.lines.append(line)

    def tree(self) -> list[psutil.Process]:
        found = psutil.Process(self.proc.pid).children(recursive=True)
        self.seen += found
        return found

    def finish(self, bound_s: float = PATIENCE_S) -> tuple[int, str]:
        """The exit status and all output; ``bound_s`` only guards against a hang."""
        code = self.proc.wait(timeout=bound_s)
        while (line := self._queue.get(timeout=bound_s)) is not None:
            self.lines.append(line)
        return code, "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _gone(tree: list[psutil.Process]) -> list[psutil.Process]:
    """Waits for each process of ``tree`` to end; returns those still alive after the bound
    (the watchdog sends SIGTERM, then SIGKILL after 5 s)."""
    _, alive = psutil.wait_procs(tree, timeout=120)
    return alive


def _engine(tree: list[psutil.Process]) -> list[psutil.Process]:
    named = []
    for p in tree:
        try:
            if "EngineCore" in p.name():
                named.append(p)
        except psutil.NoSuchProcess:
            pass
    return named


@pytest.fixture
def run(tmp_path):
    runs: list[Run] = []

    def start() -> Run:
        runs.append(Run(tmp_path / f"run{len(runs)}"))
        return runs[-1]

    yield start
    for r in runs:  # a failed test leaves nothing running either
        if r.proc.poll() is None:
            r.tree()
        r.kill()
        for p in r.seen:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def test_four_ctrl_c_keep_the_clean_exit(run):
    # Before: the second Ctrl-C raised KeyboardInterrupt wherever the run was closing (asyncio's
    # handler), and one during the interpreter's exit ended it by SIGINT, not 130, at times
    # with a traceback from multiprocessing's exit handler; vLLM logged its engine's death.
    r = run()
    r.wait_for("evaluation reward before training")  # generating: the engine is in use
    tree = r.tree()
    rng = random.Random(4)
    for k in range(4):  # a user pressing Ctrl-C four times: the terminal signals the group
        try:
            os.killpg(r.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        if k < 3:
            time.sleep(rng.uniform(0.3, 1.5))  # the scenario's own spacing, not a wait
    code, out = r.finish()
    assert code == 130, out
    assert "Traceback" not in out and "ERROR" not in out and "Exception ignored" not in out, out
    assert out.rstrip().splitlines()[-1].startswith("reserve-occupy train: interrupted; "), out
    alive = _gone(tree)
    assert not alive, [(p.pid, p.name()) for p in alive]


def test_ctrl_c_during_engine_start_up_ends_the_run_at_once(run):
    # Before: the first Ctrl-C only took effect once the engine was up (~15 s on 2 cores, and
    # for ever here, where the engine process is held stopped before it can answer).
    r = run()
    r.wait_for("starting the vllm engine")
    deadline = time.monotonic() + PATIENCE_S
    while not (engine := _engine(r.tree())):
        assert time.monotonic() < deadline and r.proc.poll() is None, "no engine process"
        time.sleep(0.05)
    tree = r.tree()
    stop(engine[0].pid)  # SIGSTOP, returns once it is stopped: it cannot finish starting
    r.proc.send_signal(signal.SIGINT)  # to the run alone, as `kill -INT` would
    code, out = r.finish(bound_s=120)  # the old code waited here for ever
    assert code == 130, out
    assert "engine ready" not in out and "Traceback" not in out, out
    alive = _gone(tree)
    assert not alive, [(p.pid, p.name()) for p in alive]
