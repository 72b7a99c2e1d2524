"""Process helpers the tests share (no heavy imports)."""

from __future__ import annotations

import os
import signal
import time


def _states(pid: int) -> list[str]:
    """The state letter of each thread of ``pid`` (``/proc/PID/task/TID/stat``)."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                raw = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        states.append(raw[raw.rfind(b")") + 2:].split()[0].decode())
    return states


def stop(pid: int, bound_s: float = 60.0) -> None:
    """SIGSTOP ``pid`` and return once every thread of it is stopped (``kill`` returns when
    the signal is sent, not when the process has stopped). ``bound_s`` only guards against a
    hang: reaching it fails the test."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + bound_s
    while not all(s in ("T", "t") for s in _states(pid)):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not stop: {_states(pid)}")
        time.sleep(0.01)
