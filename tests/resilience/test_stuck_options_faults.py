"""The fault harness with the STUCK release's options (spec/PROTOCOL.md §6.2, "Options of the
release"): the driver's seeded schedules that hang a request, run with
``staleness.stuck_action=retry`` (every check of the harness, the strict ``check-trace`` of
``events.jsonl`` among them, recoveries included), and the simulator's, with ``retry`` and
``truncate`` (``check_run``; the ``restart`` faults rebuild the controller through the trace
format). Each set must see the option act, not only pass."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from reserve_occupy_faults.harness import run_schedule
from reserve_occupy_faults.schedule import generate
from reserve_occupy_faults.sim import generate_sim, run_sim_schedule

N = 12  # schedules per set, each with a hung request


def _hung(make, n: int = N) -> list:
    out, seed = [], 0
    while len(out) < n:
        s = make(seed)
        if any(f.kind == "hung" for f in s.faults):
            out.append(s)
        seed += 1
    return out


@pytest.mark.faults
def test_driver_schedules_with_retry_find_no_violation(tmp_path):
    # every schedule of the first 300 seeds that hangs a request (about 100; the STUCK head is
    # released in a few of them: seeds 178, 215, 266, 269)
    released = retried = readmitted = 0
    for s in [s for s in map(generate, range(300)) if any(f.kind == "hung" for f in s.faults)]:
        root = tmp_path / str(s.seed)
        root.mkdir()
        out = run_schedule(dataclasses.replace(s, stuck_action="retry"), root=root)
        assert out.ok, (s.describe(), out.violations)
        log = (root / "events.jsonl").read_text()
        released += log.count('"op":"release_stuck"')
        retried += log.count('"reason":"stuck_retry"')
        readmitted += log.count('"readmit_of"')
    assert released > 0 and retried == released  # every release there was a retry
    assert readmitted >= retried  # and its prompts were admitted again


@pytest.mark.faults
@pytest.mark.parametrize("action", ["retry", "truncate"])
def test_simulator_schedules_with_the_option_find_no_violation(action):
    ended: Counter[str] = Counter()
    for s in _hung(generate_sim):
        out = run_sim_schedule(dataclasses.replace(s, stuck_action=action))
        assert out.ok, (s.describe(), out.violations)
        ended.update(out.stuck)
    assert ended["retried" if action == "retry" else "truncated"] > 0, ended
