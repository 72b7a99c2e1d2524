"""Durable files of a run besides the event log: finished trajectories and trainer checkpoints.

Both are written so that a crash at any instant leaves either the old state or the new one:

* ``TrajectoryStore``: one JSON file per finished unit (``trajectories/<unit>.json``), written
  through ``runtime.atomic_io`` (a temporary name, fsynced when asked, renamed into place)
  *before* the unit's
  ``occupy`` is logged. A unit FINISHED in the log therefore always has its file; a file whose
  unit is not FINISHED in the log is an orphan of a crash (or of a consumed unit whose deletion
  was interrupted) and recovery deletes it.
* ``Checkpoints``: the trainer saves into ``checkpoints/.tmp-step-N``; ``COMMIT.json`` is written
  last, every file gets the usual mode and, when asked, is fsynced (``atomic_io.settle``), and
  the directory is renamed to ``checkpoints/step-N``. Only
  renamed directories with a ``COMMIT.json`` count. A save that fails (an exception: a full
  disk, a lost rank) removes its ``.tmp-`` directory before the error propagates; a crash or an
  interrupt mid-save leaves it (and the sharded trainer's ``..tmp-step-N.tmp-PID``), and
  recovery deletes them.

Every write first calls ``guard(kind, detail, partial)`` when one is set: the fault-injection
harness uses it to crash the "process" between (or inside) any two durable writes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from reserve_occupy import UnitId
from reserve_occupy.trace import loads_bounded

from .. import atomic_io
from .journal import Guard


def unit_filename(unit_id: UnitId) -> str:
    """``g12`` -> ``s-g12.json``, ``12`` -> ``i-12.json``: ids of both types stay distinct."""
    if isinstance(unit_id, int):
        return f"i-{unit_id}.json"
    return f"s-{quote(unit_id, safe='')}.json"


def unit_from_filename(name: str) -> UnitId | None:
    if not name.endswith(".json"):
        return None
    stem = name[:-5]
    if stem.startswith("i-"):
        try:
            return int(stem[2:])
        except ValueError:
            return None
    if stem.startswith("s-"):
        return unquote(stem[2:])
    return None


class TrajectoryStore:
    def __init__(self, root: Path, fsync: bool = True, guard: Guard | None = None) -> None:
        self.root = root
        self.fsync = fsync
        self.guard = guard
        root.mkdir(parents=True, exist_ok=True)

    def path(self, unit_id: UnitId) -> Path:
        return self.root / unit_filename(unit_id)

    def save(self, unit_id: UnitId, record: dict[str, Any]) -> None:
        text = json.dumps(record, separators=(",", ":"))
        final = self.path(unit_id)
        if self.guard is not None:  # what a crash in the middle of the write leaves
            tmp = atomic_io.temp_path(final)
            self.guard("trajectory", str(unit_id), lambda n: tmp.write_text(text[:n]))
        atomic_io.write_text(final, text, fsync=self.fsync)

    def load(self, unit_id: UnitId) -> dict[str, Any] | None:
        """The unit's record, or None if there is no complete file for it."""
        path = self.path(unit_id)
        try:
            return loads_bounded(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a readable trajectory record ({exc})") from None

    def delete(self, unit_id: UnitId) -> None:
        if self.guard is not None:
            self.guard("delete", str(unit_id), lambda n: None)
        try:
            self.path(unit_id).unlink()
        except FileNotFoundError:
            pass

    def units(self) -> list[UnitId]:
        """Units with a complete file (temporary files of interrupted writes are not listed)."""
        out = []
        for p in sorted(self.root.iterdir()):
            unit = unit_from_filename(p.name)
            if unit is not None:
                out.append(unit)
        return out

    def remove_partial(self) -> int:
        """Delete the temporary files of interrupted writes; returns how many."""
        n = 0
        for p in self.root.iterdir():  # NAME.tmp: what releases before atomic_io left
            if atomic_io.is_temp(p.name) or p.name.endswith(".json.tmp"):
                p.unlink(missing_ok=True)
                n += 1
        return n


class Checkpoints:
    """Trainer checkpoints committed by rename; ``keep`` most recent are kept."""

    def __init__(self, root: Path, keep: int = 2, fsync: bool = True,
                 guard: Guard | None = None) -> None:
        self.root = root
        self.keep = max(1, keep)
        self.fsync = fsync
        self.guard = guard
        root.mkdir(parents=True, exist_ok=True)

    def path(self, step: int) -> Path:
        return self.root / f"step-{step:06d}"

    async def commit(self, step: int, save: Callable[[Path], Awaitable[None]],
                     meta: dict[str, Any]) -> Path:
        """Save a checkpoint of ``step`` published versions' worth of training, atomically."""
        tmp = self.root / f".tmp-step-{step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self.guard is not None:
            self.guard("checkpoint", str(step), lambda n: None)
        try:
            await save(tmp)
            atomic_io.write_text(tmp / "COMMIT.json", json.dumps({"step": step, **meta}))
            atomic_io.settle(tmp, self.fsync)
        except Exception:
            # A failed save (a full disk, a lost rank: the trainer has stopped writing) leaves
            # nothing behind. An interrupt (Ctrl-C, SIGTERM: not an Exception) may leave the
            # trainer's thread still writing here; that, like a kill -9, is remove_partial's.
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        final = self.path(step)
        if self.guard is not None:
            self.guard("checkpoint-commit", str(step), lambda n: None)
        if final.exists():  # a checkpoint of the same step from an earlier incarnation
            shutil.rmtree(final)
        os.rename(tmp, final)
        if self.fsync:
            atomic_io.fsync_dir(self.root)
        self.prune()
        return final

    def committed(self) -> list[int]:
        steps = []
        for p in self.root.iterdir():
            if p.name.startswith("step-") and (p / "COMMIT.json").is_file():
                try:
                    steps.append(int(p.name[5:]))
                except ValueError:
                    continue
        return sorted(steps)

    def latest(self) -> tuple[int, Path] | None:
        steps = self.committed()
        return (steps[-1], self.path(steps[-1])) if steps else None

    def meta(self, step: int) -> dict[str, Any]:
        path = self.path(step) / "COMMIT.json"
        try:
            return loads_bounded(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not readable JSON ({exc})") from None

    def prune(self) -> None:
        for step in self.committed()[:-self.keep]:
            shutil.rmtree(self.path(step), ignore_errors=True)

    def remove_partial(self) -> int:
        """Remove what interrupted saves left (a kill -9, a machine crash): ``.tmp-step-N``
        directories, and the temporary directories a trainer writes one through
        (``atomic_io.atomic_dir``: ``..tmp-step-N.tmp-PID``, the sharded trainer's rank 0);
        returns how many."""
        n = 0
        for p in self.root.iterdir():
            if p.name.startswith((".tmp-step-", "..tmp-step-")):
                shutil.rmtree(p, ignore_errors=True)
                n += 1
        return n
