"""``conformance --adapter-cmd`` runs the port under the run's watchdog (runtime/watchdog.py):
``kill -9`` of the conformance process ends the port too. Before, a port that did not exit
when its input closed (busy, or waiting on something else) ran on, reparented to init."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
# Acknowledges the header, says its pid, then never answers again and never reads its input
# (so the closing of its stdin at the runner's death is not seen).
PORT = """
import os, sys, time
sys.stdin.readline()
print("ok", flush=True)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


def test_kill_9_of_conformance_ends_its_adapter_command(tmp_path):
    port, pid_file = tmp_path / "port.py", tmp_path / "port.pid"
    port.write_text(PORT)
    command = " ".join(shlex.quote(x) for x in (sys.executable, str(port), str(pid_file)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "conformance", "--family", "spec",
         "--adapter-cmd", command, "--adapter-timeout", "600"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    adapter = None
    try:
        deadline = time.monotonic() + 120
        while adapter is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
            text = pid_file.read_text() if pid_file.exists() else ""
            if text:
                adapter = psutil.Process(int(text))
            else:
                time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _, alive = psutil.wait_procs([adapter], timeout=60)
        assert not alive, "the adapter command outlived kill -9 of the conformance run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if adapter is not None and adapter.is_running():
            adapter.kill()
