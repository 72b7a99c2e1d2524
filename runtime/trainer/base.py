"""What the driver needs back from a trainer: the ``Trainer`` protocol (and the errors a trainer
raises). What the driver hands it, ``TrainBatch`` and its ``GroupSample``/``Sample`` records
(built by ``assemble``), lives with the driver's other records in ``runtime.records`` and is
re-exported here, where it was until issue 35.

A ``TrainBatch`` is one consumed staleness buffer: ``version`` is the buffer (the trainer's
weights are at that version; the step trains ``version -> version + 1``), each group carries the
controller's ``v_traj`` and staleness, and every sampled token carries the log-probability the
engine sampled it with and the weight version that engine ran. That per-token record is what
lets the loss correct bounded staleness with an importance ratio instead of ignoring it.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..records import GroupSample, Sample, TrainBatch, assemble

# What a rank's OSError must carry for the driver to raise it as the OSError it is: the
# output cannot be written (the CLI's exit 74, as for the single-process trainer). Here, below
# the trainers and the DCP helpers that both read it (runtime.trainer.dcp imported it from
# sharded, which closed an import circle dcp -> sharded -> rank -> grpo -> dcp).
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)

__all__ = ["GroupSample", "INPUT_ERRORS", "NonFiniteStep", "OUTPUT_ERRNOS", "Sample",
           "StreamingTrainer", "TrainBatch", "Trainer", "assemble"]


class NonFiniteStep(RuntimeError):
    """A loss or the gradient of a step is NaN or infinite: the step stopped before the
    optimizer (weights unchanged by it, nothing to publish). The message names the units
    (``runtime.trainer.grpo``, "A non-finite step")."""


# Errors a sharded trainer's rank raises for its input before any collective, the same on
# every rank: the driver raises them as they are, the trainer still usable (a rank sends the
# nearest of these classes of its exception: runtime.trainer.rank.error_kind). NonFiniteStep
# too: every rank raises it alike, after the step's collectives (rank.RankTrainer).
INPUT_ERRORS: dict[str, type[Exception]] = {
    "ValueError": ValueError, "FileNotFoundError": FileNotFoundError,
    "NotADirectoryError": NotADirectoryError, "NonFiniteStep": NonFiniteStep}


@runtime_checkable
class Trainer(Protocol):
    async def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimiser update on ``batch``; returns metrics (loss, ...)."""
        ...

    async def export_weights(self, version: int) -> Path:
        """Write the current weights for the rollout engine; returns the directory."""
        ...

    async def save_checkpoint(self, path: Path) -> None: ...

    async def load_checkpoint(self, path: Path) -> None: ...


@runtime_checkable
class StreamingTrainer(Trainer, Protocol):
    """A trainer that can build one update from chunks (``trainer.streaming``): ``accumulate``
    runs forward/backward on some of the batch's groups without stepping; ``finish_step``
    trains the batch's groups not accumulated yet and takes the one optimiser step, the same
    update ``train_step`` would take on the whole batch."""

    async def accumulate(self, chunk: TrainBatch) -> None: ...

    async def finish_step(self, batch: TrainBatch) -> dict[str, float]: ...
