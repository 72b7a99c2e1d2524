"""Audits of a run directory after a kill and a resume, from its durable files only.

``audit_run`` returns a list of problems (empty: the run is sound). It is the same judgement the
fault harness makes (``reserve_occupy_faults.properties``), restated for a real run whose engine is
not the harness's fake: the log passes ``check-trace`` strictly; every admitted unit ends consumed,
aborted or filtered with a reason (or still finished); nothing is in flight at the end; the units
the log had in flight at the kill were salvaged or aborted as lost and their prompts re-admitted;
the units it had finished were trained after the restart; and every trained unit respects eta by the
log and by each token's own weight version (read from the trajectory files, which a run with
``recovery.commit_every: 0`` keeps).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from reserve_occupy import UnitState
from reserve_occupy_faults.properties import (
    CrashPoint,
    Evidence,
    check_conservation,
    check_recovery,
)
from reserve_occupy_porting.checker import STRICT, check
from runtime.recovery.journal import read_log, rebuild
from runtime.recovery.store import unit_filename


@dataclass
class KillPoint:
    events: int
    version: int
    finished: set
    in_flight: set


def kill_point(run_dir: Path) -> KillPoint:
    """What the durable log says right after the kill (before any resume touches it)."""
    contents = read_log(run_dir / "events.jsonl")
    controller = rebuild(contents, contents.config)
    units = controller.snapshot().units
    return KillPoint(len(contents.events), controller.version,
                     {u.unit_id for u in units if u.state is UnitState.FINISHED},
                     {u.unit_id for u in units if u.state is UnitState.IN_FLIGHT})


def publishes(path: Path) -> int:
    try:
        return path.read_text(errors="replace").count('"op":"publish"')
    except FileNotFoundError:
        return 0


def audit_run(run_dir: Path, eta: int, steps: int, kills: list[KillPoint],
              token_versions: bool = True) -> tuple[list[str], dict]:
    log = run_dir / "events.jsonl"
    problems: list[str] = []
    with log.open() as f:
        report = check(f, STRICT)
    if not report.ok:
        problems.append(f"check-trace (strict) failed at line {report.problem.entry.line}")
    ev = Evidence(log, eta, steps, [])
    ev.crashes = [CrashPoint(k.events, k.finished, k.in_flight) for k in kills]
    for check_fn in (check_conservation, check_recovery):
        found, _ = check_fn(ev)
        problems += found
    contents = read_log(log)
    final = rebuild(contents, contents.config)
    consumed_after = {u for e in contents.events[kills[0].events:] if e.op == "consume"
                      for u in e.batch.unit_ids} if kills else set()
    stats = {"events": len(contents.events), "batches": 0, "units_trained": 0,
             "tokens_checked": 0, "finished_at_kill": sorted(map(str, kills[0].finished))
             if kills else [], "trained_after_restart": 0}
    for k in kills:
        for unit in k.finished:
            if final.unit_state(unit) is UnitState.CONSUMED and unit in consumed_after:
                stats["trained_after_restart"] += 1
    v_traj = {e.unit_id: e.v_traj for e in contents.events if e.op == "reserve"}
    for e in contents.events:
        if e.op != "consume":
            continue
        stats["batches"] += 1
        for u in e.batch.units:
            stats["units_trained"] += 1
            if not 0 <= u.staleness <= eta or u.v_traj != v_traj[u.unit_id]:
                problems.append(f"batch {e.batch.version}: {u.unit_id} staleness {u.staleness}")
            if not token_versions:
                continue
            path = run_dir / "trajectories" / unit_filename(u.unit_id)
            if not path.exists():
                problems.append(f"no trajectory file for trained unit {u.unit_id}")
                continue
            rec = json.loads(path.read_text())
            for smp in rec["samples"]:
                for v in smp["versions"]:
                    stats["tokens_checked"] += 1
                    if not u.v_traj <= v <= e.batch.version or e.batch.version - v > eta:
                        problems.append(f"batch {e.batch.version}: {u.unit_id} has a token of "
                                        f"version {v} (v_traj {u.v_traj}, eta {eta})")
                        break
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():  # the driver's own per-token measurement, step by step
        for line in metrics.read_text().splitlines():
            row = json.loads(line)
            stats["steps_with_metrics"] = stats.get("steps_with_metrics", 0) + 1
            if row["token_lag_max"] > eta:
                problems.append(f"step {row['step']}: a token {row['token_lag_max']} versions "
                                f"old (eta {eta})")
    return problems, stats
