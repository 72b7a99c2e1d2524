"""A run directory's durable state and the driver's hooks into it (``RunStore``).

Layout of ``run_dir`` (docs/recovery.md argues what is durable when, and in which order)::

    events.jsonl            the controller's event log (trace format; flushed per event)
    trajectories/<unit>.json  finished units' data, written before their occupy is logged
    checkpoints/step-N/     trainer state after N published versions (N batches trained)
    recovery.jsonl          one line per resume: what recovery found and did

The driver calls ``group_finished`` before it logs an ``occupy`` and ``before_publish`` after a
batch trained and its weights were exported, before ``publish``. ``before_publish`` fsyncs the
log (the checkpoint depends on the batch's ``consume`` line) and, every ``commit_every``
versions, commits a trainer checkpoint, after which the trajectories of every batch it covers
are deleted: recovery replays only batches after the newest checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reserve_occupy import Batch, Config, Group, UnitId

from ..tasks.base import Prompt
from ..trainer.base import Trainer
from ..records import CandidateRun, GroupRun
from .journal import EventLog, Guard, JournaledController
from .store import Checkpoints, TrajectoryStore

LOG_NAME = "events.jsonl"


@dataclass(frozen=True)
class RecoverySettings:
    """``recovery.*`` of the train config. ``commit_every``: commit a trainer checkpoint
    before every N-th publish (recovery replays at most N - 1 published batches, plus the one
    that was training); ``fsync``: survive machine crashes, not only process crashes."""

    enabled: bool = True
    commit_every: int = 10
    keep_checkpoints: int = 2
    fsync: bool = True


def group_record(g: GroupRun) -> dict[str, Any]:
    """What a finished group needs to be trained after a restart."""
    samples = []
    for i in g.group.committed:
        c = g.candidates[i]
        samples.append({"candidate": c.index, "token_ids": c.token_ids, "logprobs": c.logprobs,
                        "versions": c.versions, "reward": c.reward,
                        "finish_reason": c.finish_reason or "", "segments": c.segments})
    return {"unit": g.unit_id, "seq": g.seq, "prompt": g.prompt_position,
            "prompt_ids": g.prompt_ids, "v_traj": g.v_traj, "admitted_at": g.admitted_at,
            "candidates": len(g.candidates), "size": g.group.size, "samples": samples}


def group_from_record(rec: dict[str, Any], prompts: list[Prompt]) -> GroupRun:
    """A closed, finished ``GroupRun`` rebuilt from its stored record."""
    n = rec["candidates"]
    group = Group(rec["unit"], rec["size"], n)
    candidates = [CandidateRun(i) for i in range(n)]
    for smp in rec["samples"]:
        c = candidates[smp["candidate"]]
        c.token_ids, c.logprobs, c.versions = smp["token_ids"], smp["logprobs"], smp["versions"]
        c.reward, c.finish_reason, c.segments = (smp["reward"], smp["finish_reason"],
                                                 smp["segments"])
        group.finish(c.index)
    for c in candidates:
        if c.index not in group.committed:
            c.stop = "surplus"
    g = GroupRun(rec["unit"], rec["seq"], prompts[rec["prompt"]], rec["prompt_ids"],
                 rec["v_traj"], rec["admitted_at"], group, candidates, closed=True,
                 fate="finished")
    g.prompt_position = rec["prompt"]
    return g


class RunStore:
    """The durable state of one run directory; implements the driver's ``Persistence``."""

    def __init__(self, run_dir: Path, trainer: Trainer, settings: RecoverySettings,
                 guard: Guard | None = None) -> None:
        self.run_dir = run_dir
        self.trainer = trainer
        self.settings = settings
        self.guard = guard
        self.log_path = run_dir / LOG_NAME
        self.trajectories = TrajectoryStore(run_dir / "trajectories", settings.fsync, guard)
        self.checkpoints = Checkpoints(run_dir / "checkpoints", settings.keep_checkpoints,
                                       settings.fsync, guard)
        self.log: EventLog | None = None
        # units consumed since the newest checkpoint: their trajectories are still needed
        self.uncheckpointed: list[UnitId] = []
        self.committed_steps: list[int] = []

    @classmethod
    def fresh(cls, run_dir: Path, trainer: Trainer, settings: RecoverySettings, config: Config,
              guard: Guard | None = None) -> tuple[RunStore, JournaledController]:
        """Start a new run in ``run_dir``: earlier durable state there is discarded."""
        import shutil

        for name in ("trajectories", "checkpoints"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
        (run_dir / "recovery.jsonl").unlink(missing_ok=True)
        store = cls(run_dir, trainer, settings, guard)
        store.log = EventLog.create(store.log_path, config, settings.fsync, guard)
        return store, JournaledController(config, store.log)

    # ------------------------------------------------------------------ driver hooks ---------

    def group_finished(self, g: GroupRun) -> None:
        self.trajectories.save(g.unit_id, group_record(g))

    async def before_publish(self, version: int, batch: Batch,
                             figures: tuple[int, dict[str, Any]] | None = None) -> None:
        self.uncheckpointed.extend(batch.unit_ids)
        every = self.settings.commit_every
        if not every or version % every:
            return
        if version in self.committed_steps:  # committed before a crash; recovery publishes it
            self.uncheckpointed = []
            return
        await self.checkpoint(version, figures)

    async def checkpoint(self, version: int,
                         figures: tuple[int, dict[str, Any]] | None = None) -> None:
        """Commit the trainer's state after ``version`` batches, then drop what it covers.
        ``figures`` (tokens, metrics) of batch ``version - 1``, the one just trained, go into
        ``COMMIT.json``: a crash after this commit and before that step's metrics row is
        resumed from here, retraining nothing, and the row is written from them."""
        assert self.log is not None
        self.log.sync()  # the checkpoint depends on the consume lines before it
        meta: dict[str, Any] = {"version": version}
        if figures is not None:
            meta["figures"] = {"step": version - 1, "tokens": figures[0],
                               "metrics": figures[1]}
        await self.checkpoints.commit(version, self.trainer.save_checkpoint, meta)
        self.committed_steps.append(version)
        done, self.uncheckpointed = self.uncheckpointed, []
        for unit in done:
            self.trajectories.delete(unit)

    def drop(self, units: Iterable[UnitId]) -> None:
        for unit in units:
            self.trajectories.delete(unit)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
