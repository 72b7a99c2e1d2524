"""The sharded trainer's checkpoint format on disk (``runtime.trainer.rank``): model and AdamW
state as a ``torch.distributed.checkpoint`` directory, ``sharded/``, inside a checkpoint
directory that also holds the consolidated model. Read here by both trainers.

A failed save or load is raised as the error behind it, never as torch's
``CheckpointException`` (``checkpoint_error``): that class derives from ``BaseException``, not
``Exception``, so it would pass every ``except Exception`` on its way out (a rank's command
loop, the CLI's exit codes) and end a rank with a traceback. A write the disk refuses is the
``OSError`` it is (``save_dcp``'s file system), so a full disk is the CLI's exit 74 as
everywhere else."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .base import OUTPUT_ERRNOS

SHARDED_DIR = "sharded"  # the torch.distributed.checkpoint directory inside a checkpoint


def checkpoint_error(exc: BaseException) -> BaseException:
    """What to raise for ``exc``. A ``CheckpointException`` (torch gathers every rank's
    failure of a save or load into one, raised on every rank) becomes the error behind it:
    the first rank's ``OSError`` whose errno says the output cannot be written (``ENOSPC``,
    ``EDQUOT``, ``EIO``, ``EFBIG``: the CLI's exit 74), else the lowest failed rank's error,
    itself unwrapped; one that names no failure, a ``RuntimeError`` with its message. Any
    other exception is returned as it is."""
    from torch.distributed.checkpoint.api import CheckpointException

    if not isinstance(exc, CheckpointException):
        return exc
    inner = [checkpoint_error(failure[0]) for _, failure in sorted(exc.failures.items())
             if isinstance(failure, tuple) and failure and isinstance(failure[0], BaseException)]
    for e in inner:
        if isinstance(e, OSError) and e.errno in OUTPUT_ERRNOS:
            return e
    if inner:
        return inner[0]
    return RuntimeError(f"checkpoint failed in {exc.args[0] if exc.args else 'a step'!s} "
                        f"(torch named no rank's error)")


class _KeepWriteError:
    """A file open for writing that keeps the first ``OSError`` a write raised (``error``),
    everything else passed through (``tell``, ``flush``, ``fileno``: what DCP's writer
    uses). ``atomic_io.KeepWriteError`` is an ``io.RawIOBase``, which has no ``tell`` of the
    file's, and whose finalizer would flush the file after it is closed."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def _errno_file_system() -> Any:
    """DCP's local file system (``FileSystem``), except that a write the disk refused is raised
    as that ``OSError``. DCP writes each tensor with ``torch.save``, whose zip writer reports a
    failed write as ``RuntimeError('[enforce fail ...] unexpected pos ...')``, the errno lost: a
    full disk would read as a rank that failed for no known reason (exit 1, not 74). Made here,
    not at import, so that importing this module does not import DCP."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    class ErrnoFileSystem(FileSystem):
        @contextlib.contextmanager
        def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
            with super().create_stream(path, mode) as stream:
                kept = _KeepWriteError(stream)
                try:
                    yield kept if "r" not in mode else stream
                except Exception as exc:
                    if kept.error is not None and kept.error is not exc:
                        raise kept.error from exc
                    raise

    return ErrnoFileSystem()


def save_dcp(state: dict[str, Any], path: Path) -> None:
    """``torch.distributed.checkpoint.save(state)`` into the directory ``path`` (a collective:
    every rank calls it), a write the disk refuses raised as its ``OSError``, any failure as
    the error behind torch's ``CheckpointException`` (``checkpoint_error``), on every rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    writer = dcp.FileSystemWriter(path)
    writer.fs = _errno_file_system()  # the writer's own, as it sets it; only the streams differ
    try:
        dcp.save(state, checkpoint_id=path, storage_writer=writer)
    except CheckpointException as exc:
        raise checkpoint_error(exc) from exc


def load_dcp(model: torch.nn.Module, opt: torch.optim.Optimizer, path: Path) -> None:
    """Model and optimizer state from a checkpoint's ``sharded/`` directory, resharded to this
    process group's world size, or into a plain model in one process without a process group
    (``GRPOTrainer._load``: a sharded run resumed by the single-process trainer). A failure
    (a missing or cut shard file) is raised as the error behind torch's
    ``CheckpointException`` (``checkpoint_error``)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    try:
        dcp.load(state, checkpoint_id=path / SHARDED_DIR)
    except CheckpointException as exc:
        raise checkpoint_error(exc) from exc
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
