"""What every fault-injection run must satisfy, checked from the durable log and the evidence the
harness collected. Each function returns a list of violations (empty: the property holds) and
how many individual checks it made. Every check is shown to fail on a broken variant
(``reserve_occupy_faults.variants``, tests/resilience/test_faults.py).

* ``trace`` -- the final ``events.jsonl`` passes ``check-trace`` in strict mode: every logged
  outcome is the reference controller's, and no safety invariant breaks, across every restart.
* ``conservation`` -- every admitted unit ends consumed (in exactly one batch), aborted, filtered
  or still finished; every explicit abort or filter carries a reason; nothing is in flight at the
  end; every unit a restart lost, and every unit an orderly stop (``shutdown``) aborted before a
  restart, had its prompt re-admitted.
* ``recovery`` -- at each restart, judged in that restart's own window of the log (up to the
  next crash point), the units the durable log had FINISHED were reloaded (or, only when their
  file was gone by that restart, filtered as missing), and the units it had IN_FLIGHT were
  salvaged or aborted as lost: none vanished.
* ``staleness`` -- every batch any incarnation trained respects eta by the controller's stamp and
  by each token's own version; each token was produced by the weights of the version it claims
  (the fake engine encodes its version in the log-probability); the unit's ``v_traj`` is the
  log's and no token is older than it.
* ``lineage`` -- the final trainer has trained exactly the log's batches, in order, on the data
  that was generated for them (a hash chain), and every engine only ever loaded weights that
  are a prefix of that chain at the version it was told. After a rank loss the final trainer is
  another one, of another world size: its chain must still be the log's.
* ``rank_loss`` -- an incarnation whose trainer lost a rank ended with that ``RankLost`` (the run
  stopped; it did not go on with the broken trainer), and after the loss it wrote no
  ``consume`` or ``publish`` line and began no checkpoint: nothing of the failed step became
  public or durable. (Aborts of the units still in flight, the driver's shutdown, may follow.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reserve_occupy import Batch, MoveReason, UnitId, UnitState

from runtime.recovery.durable import group_from_record
from runtime.recovery.journal import read_log, rebuild
from runtime.tasks.base import Prompt
from runtime.records import TrainBatch, assemble

from .fakes import INITIAL, Weights, batch_digest, behaviour_logprob, chain


@dataclass
class CrashPoint:
    """The durable log's view at a restart, and what recovery reported."""

    events: int  # events in the durable log at the crash
    finished: set[UnitId]
    in_flight: set[UnitId]
    deleted: set[UnitId] = field(default_factory=set)  # trajectory files a fault removed
    # FINISHED without a file, no fault involved: only a unit a truncating STUCK release placed
    # before its partial output was rewarded and written (docs/recovery.md, invariant 1)
    unwritten: set[UnitId] = field(default_factory=set)
    report: Any = None


@dataclass
class RankLoss:
    """An incarnation whose trainer lost a rank, and what the incarnation did after."""

    incarnation: int  # 1-based
    where: str  # the trainer call that raised ``RankLost``
    writes_after: list[str]  # the kinds of the incarnation's durable writes after the loss
    ended_with: str | None  # the exception that ended the incarnation; None: it finished
    rank_lost: bool  # that exception was a ``RankLost``


@dataclass
class Evidence:
    log_path: Path
    eta: int
    steps: int
    prompts: list[Prompt]
    saved: dict[UnitId, dict[str, Any]] = field(default_factory=dict)
    trained: list[TrainBatch] = field(default_factory=list)  # every incarnation's batches
    loads: list[Weights] = field(default_factory=list)  # every weight load of every engine
    crashes: list[CrashPoint] = field(default_factory=list)
    final_digest: str = INITIAL
    final_steps: int = 0
    duplicate_saves: list[UnitId] = field(default_factory=list)
    rank_losses: list[RankLoss] = field(default_factory=list)


def check_trace(ev: Evidence) -> tuple[list[str], int]:
    from reserve_occupy_porting.checker import STRICT, check

    with ev.log_path.open(encoding="utf-8") as f:
        report = check(f, STRICT)
    if report.ok:
        return [], report.events
    p = report.problem
    what = p.violation.invariant if p.violation else ", ".join(d.field for d in p.differences)
    return ([f"check-trace (strict) fails at line {p.entry.line}: {what} {p.expected}"],
            report.events)


def check_conservation(ev: Evidence) -> tuple[list[str], int]:
    contents = read_log(ev.log_path)
    controller = rebuild(contents, contents.config)
    out: list[str] = []
    consumed: dict[UnitId, int] = {}
    reserved: dict[UnitId, dict[str, Any]] = {}
    lost: list[UnitId] = []
    readmitted: set[UnitId] = set()
    # units an orderly stop aborted (``shutdown``) before the run was resumed: their prompts
    # were drawn and never trained, as a crash's (the last incarnation's stop is not resumed)
    stopped: list[UnitId] = []
    resumed = max((cp.events for cp in ev.crashes), default=0)
    n = 0
    for e in contents.events:
        meta = contents.metas.get(e.seq, {})
        if e.op == "reserve":
            reserved[e.unit_id] = meta  # type: ignore[index]
            if "readmit_of" in meta:
                readmitted.add(meta["readmit_of"])
            if not isinstance(meta.get("prompt"), int):
                out.append(f"reserve of {e.unit_id!r} (seq {e.seq}) does not name its prompt")
        elif e.op == "consume":
            for u in e.batch.unit_ids:  # type: ignore[union-attr]
                if u in consumed:
                    out.append(f"unit {u!r} consumed twice (batches {consumed[u]} and "
                               f"{e.batch.version})")  # type: ignore[union-attr]
                consumed[u] = e.batch.version  # type: ignore[union-attr]
        elif e.op in ("abort", "filter") and not meta.get("reason"):
            out.append(f"{e.op} of {e.unit_id!r} (seq {e.seq}) has no reason")
        if meta.get("reason") in ("lost_in_crash", "recovered") and e.op in ("abort", "occupy",
                                                                             "filter"):
            lost += ([e.unit_id] if e.op in ("abort", "filter") else []) + list(e.aborted)
        elif meta.get("reason") == "shutdown" and e.op == "abort" and e.seq < resumed:
            stopped += [e.unit_id, *e.aborted]
        n += 1
    for unit in reserved:
        state = controller.unit_state(unit)
        n += 1
        if state is UnitState.IN_FLIGHT:
            out.append(f"unit {unit!r} is still in flight at the end of the run")
        elif state is UnitState.CONSUMED and unit not in consumed:
            out.append(f"unit {unit!r} is CONSUMED but in no batch")
    for unit in lost:
        n += 1
        if unit not in readmitted:
            out.append(f"unit {unit!r} was lost in a crash but its prompt "
                       f"{reserved.get(unit, {}).get('prompt')} was never re-admitted")
    for unit in stopped:
        n += 1
        if unit not in readmitted:
            out.append(f"unit {unit!r} was aborted by an orderly stop (shutdown) before a "
                       f"restart but its prompt {reserved.get(unit, {}).get('prompt')} was "
                       f"never re-admitted")
    if controller.version != ev.steps:
        out.append(f"the run ended at version {controller.version}, not {ev.steps}")
    return out, n


def check_recovery(ev: Evidence) -> tuple[list[str], int]:
    """Judged from the final log, not from recovery's own report, each restart in its own window
    of the log (from its crash point to the next restart's, or to the end): right after the
    restart, every unit the log had IN_FLIGHT is occupied as recovered or aborted as lost (or
    dropped by the closing rule of such an operation) before anything else happens to it; every
    unit it had FINISHED is, when the window ends, filtered as missing if a fault had removed its
    file by this restart, and otherwise consumed or still finished. A unit the window left
    untouched because the next crash fell inside recovery is still IN_FLIGHT or FINISHED at the
    next crash point, and that restart judges it. A file removed at a later restart says nothing
    about this one."""
    contents = read_log(ev.log_path)
    events = contents.events
    out: list[str] = []
    n = 0
    for k, cp in enumerate(ev.crashes, 1):
        last = k == len(ev.crashes)
        end = len(events) if last else ev.crashes[k].events
        at_end = rebuild(replace(contents, events=events[:end]), contents.config)
        first: dict[UnitId, str] = {}
        filtered: dict[UnitId, Any] = {}
        for e in events[cp.events:end]:
            meta = contents.metas.get(e.seq, {})
            recovery = meta.get("reason") in ("recovered", "lost_in_crash")
            for unit in ([e.unit_id] if e.unit_id is not None else []) + list(e.aborted):
                if unit in cp.in_flight and unit not in first:
                    first[unit] = "ok" if recovery else f"{e.op} (seq {e.seq})"
            if e.op == "filter":
                filtered.setdefault(e.unit_id, meta.get("reason"))  # type: ignore[arg-type]
        for unit in sorted(cp.in_flight, key=str):
            n += 1
            deferred = (not last and unit not in first
                        and at_end.unit_state(unit) is UnitState.IN_FLIGHT)
            if first.get(unit) != "ok" and not deferred:
                out.append(f"restart {k}: unit {unit!r} was IN_FLIGHT at the crash; next in "
                           f"its window of the log: {first.get(unit, 'nothing')}, not a "
                           f"recovery abort or occupy")
        truncated = {m.unit_id for e in events[:cp.events] if e.op == "release_stuck"
                     for m in e.moves if m.reason is MoveReason.TRUNCATE}
        for unit in sorted(cp.finished, key=str):
            n += 1
            state = at_end.unit_state(unit)
            reason = filtered.get(unit)
            if unit in cp.unwritten:
                deferred = not last and state is UnitState.FINISHED
                if unit not in truncated:
                    out.append(f"restart {k}: unit {unit!r} was FINISHED at the crash without "
                               f"its trajectory file, and no truncating STUCK release placed "
                               f"it (the file comes before the occupy line)")
                elif not deferred and (state is not UnitState.FILTERED
                                       or reason != "lost_in_crash"):
                    out.append(f"restart {k}: truncated unit {unit!r} was FINISHED at the "
                               f"crash before its file was written, and was {state.value} "
                               f"when this restart's window of the log ended (filter reason "
                               f"{reason!r}, not lost_in_crash)")
            elif unit in cp.deleted:
                deferred = not last and state is UnitState.FINISHED
                if not deferred and (state is not UnitState.FILTERED
                                     or reason != "trajectory_missing"):
                    out.append(f"restart {k}: unit {unit!r} lost its trajectory file but was "
                               f"{state.value} when this restart's window of the log ended "
                               f"(filter reason {reason!r})")
            elif state not in (UnitState.CONSUMED, UnitState.FINISHED):
                out.append(f"restart {k}: unit {unit!r} was FINISHED at the crash, with its "
                           f"file on disk, and was {state.value} when this restart's window of "
                           f"the log ended (reason {reason!r})")
    return out, n


def check_staleness(ev: Evidence) -> tuple[list[str], int]:
    contents = read_log(ev.log_path)
    v_traj = {e.unit_id: e.v_traj for e in contents.events if e.op == "reserve"}
    members = {e.batch.version: set(e.batch.unit_ids)  # type: ignore[union-attr]
               for e in contents.events if e.op == "consume"}
    out: list[str] = []
    n = 0
    for batch in ev.trained:
        for g in batch.groups:
            n += 1
            if g.unit_id not in members.get(batch.version, ()):
                out.append(f"batch {batch.version}: trained {g.unit_id!r}, which the log's "
                           f"batch {batch.version} does not hold")
            if g.v_traj != v_traj.get(g.unit_id):
                out.append(f"batch {batch.version}: {g.unit_id!r} trained with v_traj "
                           f"{g.v_traj}, the log reserved it at {v_traj.get(g.unit_id)}")
            if not 0 <= g.staleness == batch.version - g.v_traj <= ev.eta:
                out.append(f"batch {batch.version}: {g.unit_id!r} staleness {g.staleness} "
                           f"outside [0, {ev.eta}]")
            for s in g.samples:
                for v, lp in zip(s.versions, s.logprobs, strict=True):
                    n += 1
                    if not g.v_traj <= v <= batch.version or batch.version - v > ev.eta:
                        out.append(f"batch {batch.version}: {g.unit_id!r} has a token of version "
                                   f"{v} (v_traj {g.v_traj}, eta {ev.eta})")
                        break
                    if not math.isclose(lp, behaviour_logprob(v)):
                        out.append(f"batch {batch.version}: {g.unit_id!r} has a token stamped "
                                   f"version {v} that other weights produced")
                        break
    return out, n


def check_lineage(ev: Evidence) -> tuple[list[str], int]:
    """The expected weights of each version, from the log's batches and the data generated."""
    contents = read_log(ev.log_path)
    batches: list[Batch] = [e.batch for e in contents.events if e.op == "consume"]  # type: ignore
    out: list[str] = []
    digests = [INITIAL]
    groups = {}
    for batch in batches:
        for unit in batch.unit_ids:
            if unit not in ev.saved:
                out.append(f"batch {batch.version} consumed {unit!r}, whose data was never "
                           f"written to the trajectory store")
                return out, 1
            groups[unit] = group_from_record(ev.saved[unit], ev.prompts)
        digests.append(chain(digests[-1], batch_digest(assemble(batch, groups))))
    n = 2 + len(ev.loads)
    if ev.duplicate_saves:
        out.append(f"units saved to the trajectory store twice: {ev.duplicate_saves[:5]}")
    if ev.final_steps != len(batches) or ev.final_digest != digests[-1]:
        out.append(f"the final trainer trained {ev.final_steps} batches (digest "
                   f"{ev.final_digest}); the log consumed {len(batches)} (digest {digests[-1]})")
    for w in ev.loads:
        if w.version >= len(digests) or digests[w.version] != w.digest:
            out.append(f"an engine loaded weights claiming version {w.version} that are not "
                       f"the log's version {w.version}")
            break
    return out, n


# Writes of a training step (its consume, its checkpoint, its publish): none may follow a rank
# loss in the same incarnation (a checkpoint's first write, the directory, comes before the
# trainer's save: the run went on using the broken trainer).
AFTER_RANK_LOSS = {"log:consume": "a consume line", "log:publish": "a publish line",
                   "checkpoint": "the start of a checkpoint save",
                   "checkpoint-commit": "a checkpoint commit"}


def check_rank_loss(ev: Evidence) -> tuple[list[str], int]:
    out: list[str] = []
    n = 0
    for r in ev.rank_losses:
        n += 2
        k = r.incarnation
        if r.ended_with is None:
            out.append(f"incarnation {k}: the trainer lost a rank ({r.where}) and the "
                       f"incarnation still finished the run, with a trainer that refuses work")
        elif not r.rank_lost:
            out.append(f"incarnation {k}: the trainer lost a rank ({r.where}) and the "
                       f"incarnation ended with {r.ended_with}, not with the RankLost")
        bad = [AFTER_RANK_LOSS[w] for w in r.writes_after if w in AFTER_RANK_LOSS]
        if bad:
            out.append(f"incarnation {k}: after the trainer lost a rank ({r.where}) it wrote "
                       f"{', '.join(dict.fromkeys(bad))} ({len(bad)} such writes)")
    return out, n


CHECKS = (("trace", check_trace), ("conservation", check_conservation),
          ("recovery", check_recovery), ("staleness", check_staleness),
          ("lineage", check_lineage), ("rank_loss", check_rank_loss))
