"""The fault harness with ``staleness.stuck_action=truncate`` on the driver (spec/PROTOCOL.md
§6.2, "Options of the release"; docs/runtime.md, "The STUCK release's truncate"): the seeded
schedules that hang a request, run with the option. Every check of the harness holds (the
strict ``check-trace`` of ``events.jsonl``, conservation of prompts, the staleness bound on the
trained tokens, recoveries included), and the option must be seen acting, not only passing:
releases that truncate, and truncated groups that train. (The simulator's schedules with
truncate are in test_stuck_options_faults.py.)"""

from __future__ import annotations

import dataclasses
import json

import pytest

from reserve_occupy_faults.harness import run_schedule
from reserve_occupy_faults.schedule import generate


@pytest.mark.faults
def test_driver_schedules_with_truncate_find_no_violation(tmp_path):
    # every schedule of the first 300 seeds that hangs a request (about 100; the STUCK head is
    # released in a few of them: seeds 178, 215, 266, 269)
    released = truncating = truncated = trained = 0
    for s in [s for s in map(generate, range(300)) if any(f.kind == "hung" for f in s.faults)]:
        root = tmp_path / str(s.seed)
        root.mkdir()
        out = run_schedule(dataclasses.replace(s, stuck_action="truncate"), root=root)
        assert out.ok, (s.describe(), out.violations)
        records = [json.loads(line) for line in
                   (root / "events.jsonl").read_text().splitlines() if line.strip()]
        cut: set[str] = set()
        for r in records:
            if r.get("op") == "release_stuck":
                released += 1
                units = {m["unit"] for m in r.get("moves", ()) if m["reason"] == "truncate"}
                truncating += bool(units)
                cut |= units
        truncated += len(cut)
        trained += sum(1 for r in records if r.get("op") == "consume"
                       for u in r["batch"]["units"] if u["unit"] in cut)
    assert released > 0 and truncating == released  # every release there truncated
    assert trained > 0  # and truncated groups trained
    assert truncated >= trained
