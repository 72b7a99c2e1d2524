"""What the driver hands a trainer, and what it needs back: the ``Trainer`` protocol.

A ``TrainBatch`` is one consumed staleness buffer: ``version`` is the buffer (the trainer's
weights are at that version; the step trains ``version -> version + 1``), each group carries the
controller's ``v_traj`` and staleness, and every sampled token carries the log-probability the
engine sampled it with and the weight version that engine ran. That per-token record is what
lets the loss correct bounded staleness with an importance ratio instead of ignoring it.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from reserve_occupy import Batch, UnitId

# What a rank's OSError must carry for the driver to raise it as the OSError it is: the
# output cannot be written (the CLI's exit 74, as for the single-process trainer). Here, below
# the trainers and the DCP helpers that both read it (runtime.trainer.dcp imported it from
# sharded, which closed an import circle dcp -> sharded -> rank -> grpo -> dcp).
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)

if TYPE_CHECKING:
    from ..records import GroupRun


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


@dataclass(frozen=True)
class Sample:
    """One committed candidate of a group: its response, how it was generated, its reward."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # behaviour log-probabilities, one per token
    versions: tuple[int, ...]  # weight version each token was generated with
    reward: float
    finish_reason: str
    segments: int  # 1 + times it was resumed after a weight update
    candidate: int = 0  # its index among the group's candidates (engine request ids use it)


@dataclass(frozen=True)
class GroupSample:
    unit_id: UnitId
    prompt_index: int
    prompt_ids: tuple[int, ...]
    v_traj: int
    staleness: int
    samples: tuple[Sample, ...]

    @property
    def rewards(self) -> tuple[float, ...]:
        return tuple(s.reward for s in self.samples)


@dataclass(frozen=True)
class TrainBatch:
    version: int
    groups: tuple[GroupSample, ...]

    @property
    def samples(self) -> list[tuple[GroupSample, Sample]]:
        return [(g, s) for g in self.groups for s in g.samples]


def assemble(batch: Batch, groups: Mapping[UnitId, GroupRun]) -> TrainBatch:
    """The trainer's view of a consumed batch: each unit's committed samples, in the batch's
    order, with the controller's ``v_traj`` and staleness (recovery rebuilds batches with it)."""
    out = []
    for unit in batch.units:
        g = groups[unit.unit_id]
        samples = tuple(Sample(tuple(c.token_ids), tuple(c.logprobs), tuple(c.versions),
                               float(c.reward), c.finish_reason or "", c.segments, c.index)
                        for c in (g.candidates[i] for i in g.group.committed))
        out.append(GroupSample(unit.unit_id, g.prompt.index, tuple(g.prompt_ids), unit.v_traj,
                               unit.staleness, samples))
    return TrainBatch(batch.version, tuple(out))


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
