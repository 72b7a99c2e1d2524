"""Crash recovery with ``staleness.stuck_action=truncate``: a truncating STUCK release logs the
unit FINISHED before its partial output is rewarded and its trajectory file written (the file
normally comes before the ``occupy`` line, docs/recovery.md invariant 1). A crash in that
window leaves a FINISHED unit without its file; recovery must treat it as lost in the crash
(filtered with reason ``lost_in_crash``, its prompt re-admitted), not as a file the disk lost
(``trajectory_missing``, a WARNING, the prompt never trained). Run on the fault harness
(``reserve_occupy_faults.harness``: the production driver, store and recovery on a virtual
clock, every check of ``reserve_occupy_faults.properties`` at the end, the strict check-trace
among them)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

from reserve_occupy_faults.harness import Run, Variant
from reserve_occupy_faults.schedule import Fault, Schedule

# eta 0, two groups per batch: g1's candidate 0 hangs, so the head is STUCK with one missing
TRUNCATE = Schedule(seed=3, eta=0, batch_size=2, group_size=2, candidates=2, capacity=2,
                    engines=1, steps=4, commit_every=2, faults=(Fault("hung", target=1, arg=0),),
                    stuck_action="truncate")


def _run(tmp_path, schedule, name):
    root = tmp_path / name
    root.mkdir()
    run = Run(schedule, root, Variant())
    return run, run.run()


def _writes(tmp_path):
    run, out = _run(tmp_path, TRUNCATE, "clean")
    assert out.ok, out.violations
    return run.crash_log[0].kinds


def test_a_crash_before_the_truncated_units_file_loses_it_and_readmits_its_prompt(tmp_path):
    kinds = _writes(tmp_path)
    at = kinds.index("log:release_stuck") + 1  # the next durable write, the window's end
    crashing = replace(TRUNCATE, faults=TRUNCATE.faults + (Fault("crash", target=at + 1),))
    run, out = _run(tmp_path, crashing, "crashed")
    assert out.ok, out.violations
    assert out.incarnations == 2
    report = run.reports[0]
    assert report.lost == ["g1"] and report.missing == [] and report.readmit == 1
    records = [json.loads(line) for line in run.ev.log_path.read_text().splitlines()]
    assert [(r["op"], r["meta"]) for r in records if r.get("unit") == "g1"][-1] \
        == ("filter", {"reason": "lost_in_crash"})
    again = [r for r in records if r["op"] == "reserve" and r["meta"].get("readmit_of") == "g1"]
    first = next(r for r in records if r["op"] == "reserve" and r["unit"] == "g1")
    assert len(again) == 1 and again[0]["meta"]["prompt"] == first["meta"]["prompt"]


def test_a_crash_before_any_durable_write_of_a_truncating_run_recovers(tmp_path):
    kinds = _writes(tmp_path)
    assert "log:release_stuck" in kinds
    tried: Counter[str] = Counter()
    for k, kind in enumerate(kinds):
        for torn in ((None, 7) if kind.startswith("log") else (None,)):
            crashing = replace(TRUNCATE, faults=TRUNCATE.faults
                               + (Fault("crash", target=k + 1, arg=torn),))
            _, out = _run(tmp_path, crashing, f"w{k}-{torn}")
            assert out.ok, (k, kind, torn, out.violations)
            tried[kind] += 1
    assert sum(tried.values()) > 50
