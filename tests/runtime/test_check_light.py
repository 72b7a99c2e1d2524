"""``train --check`` answers without importing torch when the trainer's device is the CPU (the
default): torch's import is seconds of the check's time on two cores, and nothing the check
looks at on a CPU trainer needs it (``resolve_device``, ``check_precision``,
``check_world_size`` answer ``cpu`` themselves). The check runs in a fresh interpreter, the only
place where what it imports can be seen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from runtime.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "vllm", "ray") if m in sys.modules)
print("IMPORTED", ",".join(heavy) or "-")
sys.exit(code)
"""


@pytest.mark.parametrize("backend", ["vllm", "fake"])
def test_check_on_a_cpu_trainer_imports_no_torch(tmp_path, backend):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "train", "--check", "--output-dir", str(tmp_path / "run"),
         "--set", f"rollout.backend={backend}", "--set", "trainer.device=cpu"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert ": OK" in done.stdout, done.stdout[-2000:]
    assert "IMPORTED -" in done.stdout, done.stdout[-300:]
