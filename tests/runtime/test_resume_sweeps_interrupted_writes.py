"""A resume removes what an interrupted write of the run's earlier process left: the exported
weights' ``weights/.vN.tmp-PID`` and a saved model's ``.checkpoint-N.tmp-PID`` (each as large
as the model) stayed forever before, since only the recovery store's own folders were swept.
The run uses the fake engine with the real GRPO trainer on the tiny model, in-process."""

from __future__ import annotations

import os
from pathlib import Path

from runtime.atomic_io import TEMP_MARK
from runtime.cli import main
from runtime.recovery.rundir import remove_interrupted

FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]
DEAD = 2**22 + 12345  # above Linux's default pid_max (2**22): no live process has it


def _plant(out: Path) -> list[Path]:
    """What a killed writer leaves: a half-exported version, a half-saved model, a half-written
    run file."""
    left = [out / "weights" / f".v9{TEMP_MARK}{DEAD}", out / f".checkpoint-9{TEMP_MARK}{DEAD}"]
    for d in left:
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"\0" * 1024)
    f = out / f".metrics.jsonl{TEMP_MARK}{DEAD}"
    f.write_text("{")
    return [*left, f]


def test_resume_removes_the_earlier_process_s_interrupted_writes(tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["train", *FAKE, "--steps", "2", "--output-dir", str(out)]) == 0
    left = _plant(out)
    keep = out / "weights" / ".notes"  # a hidden name that is not a temporary: kept
    keep.write_text("mine")
    assert main(["train", *FAKE, "--steps", "3", "--resume", str(out)]) == 0
    assert [p for p in left if p.exists()] == []
    assert keep.read_text() == "mine"
    assert len([x for x in (out / "metrics.jsonl").read_text().splitlines() if x]) == 3


def test_only_temporary_names_of_other_processes_are_removed(tmp_path):
    (tmp_path / "weights").mkdir()
    mine = tmp_path / "weights" / f".v3{TEMP_MARK}{os.getpid()}"  # this process writing it
    mine.mkdir()
    theirs = tmp_path / "weights" / f".v2{TEMP_MARK}{DEAD}"
    theirs.mkdir()
    done = tmp_path / "weights" / "v1"  # a finished version
    done.mkdir()
    other = tmp_path / "trajectories" / f".x{TEMP_MARK}{DEAD}"  # not this sweep's folder
    other.parent.mkdir()
    other.write_text("")
    link = tmp_path / f".link{TEMP_MARK}{DEAD}"  # a link is removed, its target is not
    target = tmp_path / "target"
    target.mkdir()
    link.symlink_to(target)
    assert remove_interrupted(tmp_path) == [f".link{TEMP_MARK}{DEAD}",
                                            f"weights/.v2{TEMP_MARK}{DEAD}"]
    assert mine.is_dir() and done.is_dir() and other.exists() and target.is_dir()
    assert not theirs.exists() and not link.is_symlink()
    assert remove_interrupted(tmp_path / "absent") == []
