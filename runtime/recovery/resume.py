"""Recovery: rebuild a crashed run from its run directory and hand the driver where to go on.

``recover`` follows docs/recovery.md step by step:

1. Read ``events.jsonl`` (a torn last line is dropped and reported; any other bad line stops
   recovery) and replay it through the reference controller, insisting on every outcome.
2. Load the newest committed trainer checkpoint (``step-c``: ``c`` batches trained) and retrain,
   in log order, every batch consumed after it from the stored trajectories. The trainer is then
   exactly one version ahead of each batch the log consumed, as before the crash.
3. Units the log has IN_FLIGHT lost their generation with the process: a unit whose complete
   trajectory reached the store (the crash fell between that write and its ``occupy`` line) is
   occupied now; every other one is aborted (``meta.reason = "lost_in_crash"``) and its prompt
   is queued for re-admission. So are the prompts of the units an orderly stop aborted
   (``meta.reason = "shutdown"``): however the run stopped, no drawn prompt is skipped.
4. Units the log has FINISHED get their data back from the store; a unit whose file is missing
   is filtered (``meta.reason = "trajectory_missing"``) and reported, never silently dropped.
   A unit a truncating STUCK release placed (``staleness.stuck_action=truncate``) is FINISHED
   in the log before its file exists (its partial output is rewarded after the release): one
   without its file was lost in the crash, not by the disk; it is filtered with reason
   ``lost_in_crash`` and its prompt re-admitted, as an in-flight unit's.
   With streaming, units the log has STREAMED (handed to the trainer before the crash) get their
   data back the same way: their partial gradients died with the trainer, so they are trained
   again at the next consume (``report.restream``). One without its file cannot be filtered (the
   protocol forbids it) and stops recovery.
5. If the crash fell while a batch was training (the log ends in TRAINING), that batch is
   trained (or was, by the checkpoint) and published now, so the controller is IDLE.
6. The trainer exports the weights of the controller's version for the engines.

Every operation recovery performs goes through the controller and into the log with a reason,
so the log stays one continuous trace that ``check-trace`` accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reserve_occupy import Batch, MoveReason, Phase, UnitId, UnitState

from ..tasks.base import Prompt
from ..trainer.base import Trainer
from ..records import DriverSettings, GroupRun, ResumePoint, assemble
from .durable import RecoverySettings, RunStore, group_from_record
from .journal import (
    EmptyLog,
    EventLog,
    Guard,
    JournaledController,
    LogContents,
    read_log,
    rebuild,
)
from .rundir import remove_interrupted


class RecoveryError(RuntimeError):
    """The run directory cannot be resumed; the message says why and what to do."""


@dataclass
class RecoveryReport:
    events: int = 0
    version_logged: int = 0  # the controller's version in the log
    version: int = 0  # after recovery
    torn: str | None = None
    checkpoint: int | None = None  # step of the checkpoint loaded
    retrained: list[int] = field(default_factory=list)  # batch versions trained again
    # batch version -> (response tokens trained, the trainer's metrics) of each retrained
    # batch, and of the batch the loaded checkpoint recorded it had just trained (its
    # COMMIT.json): the metrics row of a step the crash cut short is written from these
    retrained_figures: dict[int, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    published: bool = False  # recovery published the batch that was training
    salvaged: list[UnitId] = field(default_factory=list)  # IN_FLIGHT, data complete: occupied
    lost: list[UnitId] = field(default_factory=list)  # IN_FLIGHT: aborted, prompt re-admitted
    # aborted by the previous incarnation's orderly stop (``shutdown``): prompt re-admitted
    stopped: list[UnitId] = field(default_factory=list)
    finished: list[UnitId] = field(default_factory=list)  # FINISHED, data loaded
    restream: list[UnitId] = field(default_factory=list)  # STREAMED: data loaded, train again
    missing: list[UnitId] = field(default_factory=list)  # FINISHED, no data: filtered
    missing_retrain: list[UnitId] = field(default_factory=list)  # consumed, no data to retrain
    deleted: int = 0  # orphaned or no longer needed files removed
    readmit: int = 0
    fresh: bool = False  # nothing to recover: the log had no complete header

    def lines(self) -> list[str]:
        if self.fresh:
            return ["recovery: the event log had no complete header; starting afresh"]
        out = [f"recovery: {self.events} events replayed, version {self.version_logged}"
               + (f" -> {self.version}" if self.version != self.version_logged else "")]
        if self.torn:
            out.append(f"recovery: {self.torn}")
        ck = ("none (training from the initial weights)" if self.checkpoint is None
              else f"step {self.checkpoint}")
        out.append(f"recovery: checkpoint {ck}; retrained batches {self.retrained or 'none'}"
                   + ("; published the batch that was training" if self.published else ""))
        if self.restream:
            out.append(f"recovery: {len(self.restream)} units handed to the crashed trainer "
                       f"(streaming) reloaded; they train again at the next consume")
        out.append(f"recovery: {len(self.finished)} finished units reloaded, {len(self.salvaged)}"
                   f" in-flight units salvaged (complete on disk), {len(self.lost)} in-flight "
                   f"units aborted as lost ({self.readmit} prompts to re-admit)")
        if self.stopped:
            out.append(f"recovery: {len(self.stopped)} units in flight when the run last "
                       f"stopped (aborted as shutdown) have their prompts re-admitted, among "
                       f"the {self.readmit}")
        if self.missing:
            out.append(f"recovery: WARNING {len(self.missing)} finished units had no trajectory "
                       f"file and were filtered: {self.missing[:8]}")
        if self.missing_retrain:
            out.append(f"recovery: WARNING {len(self.missing_retrain)} consumed units had no "
                       f"trajectory file; their batches were retrained without them: "
                       f"{self.missing_retrain[:8]}")
        return out


@dataclass
class Recovered:
    store: RunStore
    controller: JournaledController
    resume: ResumePoint
    weights: Any  # what the engines must load (None: the initial weights)
    report: RecoveryReport


_SEQ = re.compile(r"^g(\d+)$")


class Recovery:
    """The recovery procedure, one overridable method per step (the fault harness's broken
    variants override one each and must be caught). ``run`` composes them in the order the
    module docstring gives."""

    def __init__(self, run_dir: Path, settings: DriverSettings, recovery: RecoverySettings,
                 trainer: Trainer, prompts: list[Prompt], guard: Guard | None = None,
                 check_every_op: bool = False, log: Callable[[str], None] = print) -> None:
        self.config = settings.controller_config()
        self.recovery, self.trainer, self.prompts = recovery, trainer, prompts
        self.guard, self.check_every_op, self.say = guard, check_every_op, log
        self.run_dir = run_dir
        self.store = RunStore(run_dir, trainer, recovery, guard)
        self.report = RecoveryReport()
        self.groups: dict[UnitId, GroupRun] = {}
        self.controller: JournaledController = None  # type: ignore[assignment]
        self.batches: list[Batch] = []
        self.checkpoint = 0

    async def run(self) -> Recovered:
        try:
            contents = read_log(self.store.log_path)
        except EmptyLog:
            return self.fresh()
        self.replay(contents)
        await self.restore_trainer()
        self.order = [e.unit_id for e in self.controller.events if e.op == "reserve"]
        self.settle_in_flight()
        self.reload_finished()
        await self.retrain()
        await self.publish_training()
        self.report.version = self.controller.version
        self.collect_garbage()
        return await self.finish()

    def fresh(self) -> Recovered:
        store, controller = RunStore.fresh(self.run_dir, self.trainer, self.recovery,
                                           self.config, self.guard)
        controller.check_every_op = self.check_every_op
        self.store, self.report.fresh = store, True
        _report(store, self.report, self.say)
        return Recovered(store, controller, ResumePoint(), None, self.report)

    def load(self, unit: UnitId) -> GroupRun | None:
        """The unit's stored data (cached), or None if its file is missing."""
        if unit not in self.groups:
            rec = self.store.trajectories.load(unit)
            if rec is None:
                return None
            self.groups[unit] = group_from_record(rec, self.prompts)
        return self.groups[unit]

    def replay(self, contents: LogContents) -> None:
        """1. The controller as the log left it; the log reopened for appending."""
        store, report = self.store, self.report
        self.controller = rebuild(contents, self.config, self.check_every_op)
        self.reserve_meta = {e.unit_id: contents.metas.get(e.seq, {}) for e in contents.events
                             if e.op == "reserve"}
        report.events, report.torn = len(contents.events), contents.torn
        report.version_logged = self.controller.version
        store.log = EventLog.reopen(store.log_path, contents.good_bytes, self.recovery.fsync,
                                    self.guard)
        self.controller.log = store.log
        report.deleted += store.trajectories.remove_partial() + store.checkpoints.remove_partial()
        report.deleted += len(remove_interrupted(self.run_dir))  # weights/, saved models
        self.batches = [e.batch for e in contents.events if e.op == "consume"]  # type: ignore

    async def restore_trainer(self) -> None:
        """2a. The newest committed checkpoint into the trainer."""
        latest = self.store.checkpoints.latest()
        if latest is not None:
            c, path = latest
            if c > len(self.batches):
                raise RecoveryError(
                    f"checkpoint step {c} is ahead of the event log, which consumed only "
                    f"{len(self.batches)} batches: the log lost lines a checkpoint depends on "
                    f"(was recovery.fsync off during a machine crash?)")
            await self.trainer.load_checkpoint(path)
            self.checkpoint = self.report.checkpoint = c
            try:
                meta = self.store.checkpoints.meta(c)
            except (OSError, ValueError):  # its record unreadable: the figures are unknown
                meta = None
            recorded = _recorded_figures(meta, c)
            if recorded is not None:
                self.report.retrained_figures[c - 1] = recorded
        self.store.committed_steps = self.store.checkpoints.committed()

    def settle_in_flight(self) -> None:
        """3. Salvage in-flight units whose data is complete; abort the others as lost."""
        controller, report = self.controller, self.report
        for unit in self.order:
            if controller.unit_state(unit) is not UnitState.IN_FLIGHT:
                continue  # (the closing rule may have aborted it a moment ago)
            if self.load(unit) is not None:
                placement = controller.occupy(unit, meta={"reason": "recovered"})
                report.salvaged.append(unit)
                report.lost.extend(placement.aborted)
            else:
                removal = controller.abort(unit, meta={"reason": "lost_in_crash"})
                report.lost.append(unit)
                report.lost.extend(removal.aborted)

    def reload_finished(self) -> None:
        """4. Finished units get their data back; a missing file is filtered and reported."""
        controller, report = self.controller, self.report
        truncated = {m.unit_id for e in controller.events if e.op == "release_stuck"
                     for m in e.moves if m.reason is MoveReason.TRUNCATE}
        for unit in self.order:
            state = controller.unit_state(unit)
            if state is UnitState.STREAMED:
                if self.load(unit) is None:
                    raise RecoveryError(f"unit {unit!r} was handed to the trainer (streaming) "
                                        f"but its trajectory file is missing: the run directory "
                                        f"is damaged (the file is written before the unit's "
                                        f"occupy line)")
                report.finished.append(unit)
                report.restream.append(unit)
                continue
            if state is not UnitState.FINISHED or unit in report.salvaged:
                continue
            if self.load(unit) is not None:
                report.finished.append(unit)
            elif unit in truncated:  # the crash fell before its file: lost with the process
                controller.filter(unit, meta={"reason": "lost_in_crash"})
                report.lost.append(unit)
            else:
                controller.filter(unit, meta={"reason": "trajectory_missing"})
                report.missing.append(unit)

    async def retrain(self) -> None:
        """2b. Retrain, in log order, every consumed batch the checkpoint does not cover."""
        published = self.controller.version
        for k in range(self.checkpoint, len(self.batches)):
            batch = self.batches[k]
            present = tuple(u for u in batch.units if self.load(u.unit_id) is not None)
            self.report.missing_retrain += [u.unit_id for u in batch.units if u not in present]
            if not present:
                raise RecoveryError(f"batch {k} cannot be retrained: none of its units' "
                                    f"trajectories is on disk")
            train_batch = assemble(Batch(batch.version, present), self.groups)
            metrics = await self.trainer.train_step(train_batch)
            self.report.retrained.append(k)
            self.report.retrained_figures[k] = (
                sum(len(s.token_ids) for _, s in train_batch.samples),
                dict(metrics) if isinstance(metrics, dict) else {})
            if k < published:
                self.store.uncheckpointed.extend(batch.unit_ids)

    async def publish_training(self) -> None:
        """5. A batch that was training when the process died is published now."""
        if self.controller.phase is not Phase.TRAINING:
            return
        batch = self.batches[-1]
        await self.trainer.export_weights(batch.version + 1)
        await self.store.before_publish(batch.version + 1, batch,
                                        self.report.retrained_figures.get(batch.version))
        self.controller.publish(meta={"reason": "recovered"})
        self.report.published = True

    def collect_garbage(self) -> None:
        """Files no longer needed: consumed and checkpointed, aborted, filtered, or never
        logged (a crash between the file and its ``occupy`` line, for a unit then aborted)."""
        report = self.report
        keep = set(self.store.uncheckpointed) | set(report.finished) | set(report.salvaged)
        for unit in self.store.trajectories.units():
            if unit not in keep:
                self.store.trajectories.delete(unit)
                report.deleted += 1

    async def finish(self) -> Recovered:
        """6. Where the driver goes on, and the weights the engines must load."""
        controller, report = self.controller, self.report
        pending = _pending_readmits(controller, self.reserve_meta)
        report.readmit = len(pending)
        stopped = {u for _, u in _pending_readmits(controller, self.reserve_meta, ("shutdown",))}
        report.stopped = [u for _, u in pending if u in stopped]
        seqs = [int(m.group(1)) for u in self.order if isinstance(u, str)
                and (m := _SEQ.match(u))]
        draws = [m["draw"] for m in self.reserve_meta.values() if isinstance(m.get("draw"), int)]
        finished = {u: self.groups[u] for u in self.order
                    if controller.unit_state(u) in (UnitState.FINISHED, UnitState.STREAMED)}
        resume = ResumePoint(next_seq=max(seqs, default=-1) + 1,
                             draws=max(draws, default=-1) + 1, readmit=pending, groups=finished,
                             step=controller.version)
        weights = (await self.trainer.export_weights(controller.version)
                   if controller.version else None)
        _report(self.store, report, self.say)
        return Recovered(self.store, controller, resume, weights, report)


async def recover(run_dir: Path, settings: DriverSettings, recovery: RecoverySettings,
                  trainer: Trainer, prompts: list[Prompt], guard: Guard | None = None,
                  check_every_op: bool = False, log: Callable[[str], None] = print,
                  recovery_class: type[Recovery] = Recovery) -> Recovered:
    """Rebuild the run in ``run_dir`` (see the module docstring). ``trainer`` must hold the
    run's initial weights; recovery loads the checkpoint into it and retrains from there."""
    return await recovery_class(run_dir, settings, recovery, trainer, prompts, guard,
                                check_every_op, log).run()


# The reasons of the operations whose aborted units lost their prompt because the run stopped,
# not because of anything about the unit: a crash (``lost_in_crash``; units the closing rule
# dropped when recovery occupied or aborted, ``recovered``) or an orderly stop (``shutdown``:
# the driver stopped on an error, a Ctrl-C, or at the end of its steps); and the groups a
# STUCK release with ``staleness.stuck_action=retry`` released (``stuck_retry``), whose prompts
# the driver admits again. Their prompts were drawn and never trained, so the resumed run
# re-admits them (docs/recovery.md, step 3).
READMIT_REASONS = ("lost_in_crash", "recovered", "shutdown", "stuck_retry")


def _pending_readmits(controller: JournaledController,
                      reserve_meta: dict[UnitId, dict[str, Any]],
                      reasons: tuple[str, ...] = READMIT_REASONS) -> list[tuple[int, UnitId]]:
    """(prompt position, unit) for every unit a crash or an orderly stop lost (an ``abort``
    with one of ``reasons``, and the units its closing rule dropped; the units a recovery
    ``occupy`` dropped) that no later reservation re-admitted, in the order they were lost."""
    lost: list[UnitId] = []
    readmitted: set[UnitId] = set()
    for e in controller.events:
        meta = controller.metas.get(e.seq, {})
        if e.op == "reserve" and "readmit_of" in meta:
            readmitted.add(meta["readmit_of"])
            reserve_meta.setdefault(e.unit_id, meta)  # type: ignore[arg-type]
        elif meta.get("reason") in reasons and e.op in ("abort", "occupy", "release_stuck",
                                                        "filter"):
            if e.op in ("abort", "filter"):  # filter: a truncated unit the crash left unwritten
                lost.append(e.unit_id)  # type: ignore[arg-type]
            lost.extend(e.aborted)
    out = []
    for unit in lost:
        position = reserve_meta.get(unit, {}).get("prompt")
        if unit not in readmitted and isinstance(position, int):
            out.append((position, unit))
    return out


def _report(store: RunStore, report: RecoveryReport, log: Callable[[str], None]) -> None:
    for line in report.lines():
        log(line)
    with (store.run_dir / "recovery.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(report), default=str) + "\n")


def _recorded_figures(meta: Any, step: int) -> tuple[int, dict[str, Any]] | None:
    """(tokens, metrics) of batch ``step - 1`` as checkpoint ``step`` recorded them, or None
    (a checkpoint written before figures were kept, or one whose record is not this shape:
    its step's row then says ``tokens_unknown``, as before)."""
    figures = meta.get("figures") if isinstance(meta, dict) else None
    if not isinstance(figures, dict) or figures.get("step") != step - 1:
        return None
    tokens, metrics = figures.get("tokens"), figures.get("metrics")
    if not (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
            and isinstance(metrics, dict)):
        return None
    return tokens, metrics
