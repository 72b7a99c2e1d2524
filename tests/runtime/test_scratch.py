"""No leftovers (docs/cli.md, "Signals, pipes and exit status"): a scratch folder
(``/dev/shm/ro-engine-PID-*`` of an engine actor) is removed when its process ends, killed
runs included -- at exit, or, after a SIGKILL, by the next scratch folder of its kind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from runtime.scratch import remove, scratch_dir, sweep

ROOT = Path(__file__).resolve().parents[2]
MAKE = """
import sys, time
from pathlib import Path
from runtime.cli import guarded
from runtime.scratch import scratch_dir

def body():
    path = scratch_dir("ro-engine", Path(sys.argv[1]))
    (path / "model.safetensors").write_bytes(b"x" * 4096)
    print(path, flush=True)
    if sys.argv[2] == "wait":
        time.sleep(600)
    sys.stdin.readline()  # "exit": the parent has seen the folder; now end normally
    return 0

raise SystemExit(guarded(body, "scratch"))
"""


def _child(root: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", MAKE, str(root), mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    assert path.is_dir() and path.name.startswith(f"ro-engine-{proc.pid}-")
    return proc, path


def test_a_folder_goes_with_its_process_on_every_exit_path(tmp_path):
    # The folder's name carries its owner's pid, so a folder whose process died (SIGKILL: a
    # killed actor) is found and removed, not left in /dev/shm with its weights for good.
    proc, path = _child(tmp_path, "exit")  # waits on stdin until the folder was seen
    proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0 and not path.exists()  # a normal exit
    for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        proc, path = _child(tmp_path, "wait")
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == status and not path.exists()
    proc, killed = _child(tmp_path, "wait")
    proc.kill()  # SIGKILL: nothing in the process runs
    proc.wait(timeout=60)
    assert killed.exists()
    mine = scratch_dir("ro-engine", tmp_path)  # the next one of its kind sweeps it
    assert not killed.exists() and mine.is_dir()
    remove(mine)
    assert not mine.exists()


def test_the_sweep_spares_live_owners_and_other_kinds(tmp_path):
    live = tmp_path / f"ro-engine-{os.getpid()}-abc"
    other = tmp_path / "ro-faults-1-abc"
    for p in (live, other):
        p.mkdir()
    assert sweep("ro-engine", tmp_path) == [] and live.is_dir() and other.is_dir()
