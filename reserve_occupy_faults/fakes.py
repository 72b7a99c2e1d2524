"""The fault harness's engine, trainer and crash switch, all on a virtual clock.

* ``CrashableRollout``: the scripted ``FakeRollout`` that can crash (every running request fails
  with ``EngineCrashed``; later requests too) and that takes its weight version from the weights
  it loads, so a replacement engine or a recovered run serves exactly the version it was given.
  Its log-probabilities encode the version (``-0.5 - 0.1 * version``), so the checks can tell,
  token by token, which weights produced a token.
* ``HashTrainer``: a trainer whose "weights" are a hash chain over the batches it trained (unit
  ids, tokens, versions, rewards) and its step count. A crash-free run and a crashed-and-recovered
  run that trained the same batches in the same order end with the same digest; a lost, doubled
  or reordered batch changes it. Checkpoints are small JSON files. It has ``world_size`` ranks,
  as the sharded trainer does: the update is the same whatever their number (the sharded
  trainer's all-reduce; tests/runtime/test_sharded_trainer.py compares the real ones), and a
  checkpoint written by one world size loads into any other.
* ``Crash``: the incarnation's fault switch. Every durable write (log line, trajectory file,
  checkpoint) passes its ``guard``; at the scheduled write it kills the "process": optionally
  writes a torn prefix, then raises ``SimulatedCrash``, and every later write of that
  incarnation raises too, like writes of a dead process that never happen. Every trainer call
  passes ``trainer_call``: at the scheduled one it kills the process the same way, or, for a
  rank loss, raises the sharded trainer's own ``RankLost``; the trainer then refuses every later
  call with ``RankLost``, as ``ShardedTrainer`` does, while the process lives on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime import atomic_io
from runtime.clock import Clock
from runtime.rollout.base import GenerationRequest, Segment
from runtime.rollout.fake import FakeRollout, Plan
from runtime.rollout.pool import EngineCrashed
from runtime.records import TrainBatch
from runtime.trainer.sharded import RankLost


class SimulatedCrash(BaseException):
    """The simulated process died here. A ``BaseException`` so that no ``except Exception`` in
    the code under test can swallow it, as nothing catches a real SIGKILL."""


@dataclass(frozen=True)
class Weights:
    version: int
    digest: str


def behaviour_logprob(version: int) -> float:
    return -0.5 - 0.1 * version


class CrashableRollout(FakeRollout):
    def __init__(self, clock: Clock, script: Callable[[GenerationRequest, int], Plan],
                 name: str = "engine") -> None:
        super().__init__(clock, script)
        self.name = name
        self.dead = False
        self.weights: Weights | None = None

    async def generate(self, request: GenerationRequest) -> Segment:
        if self.dead:
            raise EngineCrashed(f"{self.name} is dead")
        seg = await super().generate(request)
        if self.dead:  # it crashed while this request ran: the request's tokens are gone
            raise EngineCrashed(f"{self.name} crashed while serving {request.request_id}")
        return seg

    def crash(self) -> None:
        self.dead = True
        for act in self._active.values():
            act.aborted.set()

    async def load_weights(self, weights: Any,  # type: ignore[override]
                           version: int | None = None) -> None:
        if not self.paused:
            raise RuntimeError("load_weights outside pause")
        if self.dead:
            raise EngineCrashed(f"{self.name} is dead")
        self.loaded.append((self.clock.now(), weights))
        self.weights = weights
        self.version = weights.version


def batch_digest(batch: TrainBatch) -> str:
    """A canonical digest of what a batch trains on."""
    rows = [batch.version]
    for g in batch.groups:
        rows.append([g.unit_id, g.v_traj, g.staleness, list(g.prompt_ids),
                     [[list(s.token_ids), list(s.versions), s.reward, s.candidate]
                      for s in g.samples]])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def chain(digest: str, batch_hash: str) -> str:
    return hashlib.sha256(f"{digest}/{batch_hash}".encode()).hexdigest()[:16]


INITIAL = "initial"


class HashTrainer:
    """See the module docstring. Each call ("train", "train-end", "export", "save") and its
    ordinal in this incarnation pass ``crash.trainer_call``: the harness's trainer crashes and
    rank losses. After a ``RankLost`` every call raises ``RankLost`` (``broken``)."""

    def __init__(self, clock: Clock, train_s: float, crash: Crash, world_size: int = 1) -> None:
        self.clock, self.train_s, self.crash = clock, train_s, crash
        self.world_size = world_size
        self.steps = 0
        self.digest = INITIAL
        self.batches: list[TrainBatch] = []  # every batch this incarnation trained
        self.calls: dict[str, int] = {}
        self.broken: str | None = None  # why the trainer is stopped (a rank was lost)

    def _call(self, what: str) -> None:
        n = self.calls[what] = self.calls.get(what, 0) + 1
        self._fault(what, n)

    def _fault(self, what: str, n: int) -> None:
        if self.broken is not None:
            raise RankLost(f"the sharded trainer is stopped: {self.broken}")
        try:
            self.crash.trainer_call(what, n)
        except RankLost as exc:
            self.broken = str(exc)
            raise

    async def train_step(self, batch: TrainBatch) -> dict[str, float]:
        self._call("train")
        if batch.version != self.steps:
            raise AssertionError(f"trainer at version {self.steps} was given batch "
                                 f"{batch.version}")
        for _, s in batch.samples:
            if s.reward != s.reward:  # NaN
                raise AssertionError(f"batch {batch.version} holds a NaN reward")
        await self.clock.sleep(self.train_s)
        self._fault("train-end", self.calls["train"])
        self.batches.append(batch)
        self.digest = chain(self.digest, batch_digest(batch))
        self.steps += 1
        return {"loss": 0.0}

    async def export_weights(self, version: int) -> Weights:
        self._call("export")
        if version != self.steps:
            raise AssertionError(f"asked to export version {version}, but the trainer has "
                                 f"trained {self.steps} batches")
        return Weights(version, self.digest)

    async def save_checkpoint(self, path: Path) -> None:
        self._call("save")
        atomic_io.write_text(path / "trainer.json", json.dumps({
            "steps": self.steps, "digest": self.digest, "world_size": self.world_size}))
        await asyncio.sleep(0)

    async def load_checkpoint(self, path: Path) -> None:
        """Any world size's checkpoint (``world_size`` says whose it was)."""
        if self.broken is not None:
            raise RankLost(f"the sharded trainer is stopped: {self.broken}")
        state = json.loads((path / "trainer.json").read_text())
        self.steps, self.digest = state["steps"], state["digest"]


@dataclass
class Crash:
    """When this incarnation dies: at durable write number ``at_write`` (1-based, counted over
    log lines, trajectory files, checkpoint saves and commits, deletions), tearing a log line
    after ``torn`` characters when set; or at the trainer call ``(what, n)``, where with
    ``rank_loss`` the trainer raises ``RankLost`` instead and the process lives on (``lost``
    says where, ``lost_after`` how many durable writes the incarnation had made by then)."""

    at_write: int | None = None
    torn: int | None = None
    trainer: tuple[str, int] | None = None
    rank_loss: bool = False
    writes: int = 0
    dead: bool = False
    tore: bool = False  # the crash left a torn log line
    where: str = ""
    kinds: list[str] = field(default_factory=list)
    lost: str = ""
    lost_after: int = 0

    def die(self, where: str) -> None:
        self.dead, self.where = True, where
        raise SimulatedCrash(where)

    def guard(self, kind: str, detail: str, partial: Callable[[int], None]) -> None:
        if self.dead:
            raise SimulatedCrash(f"write after the crash ({kind})")
        self.writes += 1
        if kind == "log":  # name the operation: "log:publish"
            start = detail.find('"op":"') + 6
            kind = "log:" + detail[start:detail.find('"', start)]
        self.kinds.append(kind)
        if self.at_write is not None and self.writes >= self.at_write:
            if self.torn is not None and kind.startswith("log"):
                partial(min(self.torn, max(0, len(detail) - 1)))
                self.tore = True
            self.die(f"before write {self.writes} ({kind} {detail[:40]!r})")

    def trainer_call(self, what: str, n: int) -> None:
        if self.dead:
            raise SimulatedCrash("trainer call after the crash")
        if self.trainer == (what, n):
            if not self.rank_loss:
                self.die(f"trainer {what} #{n}")
            if not self.lost:
                self.lost, self.lost_after = f"trainer {what} #{n}", len(self.kinds)
                raise RankLost(f"a trainer rank (simulated) was lost while in '{what}' "
                               f"(call #{n} of this incarnation)")

    @property
    def ended(self) -> bool:
        """The scheduled fault ended this incarnation: the process died or a rank was lost."""
        return self.dead or bool(self.lost)
