"""The STUCK timeout cannot livelock in the simulator (spec/PROTOCOL.md §6.2; the rule is
``reserve_occupy.stuck``, tested alone in tests/core/test_stuck.py): hung units outside the head
buffer cannot starve it for good, and a release followed by no placement does not repeat
unchanged. The schedule the fault harness found, and its class: two hung groups admitted next to
each other at eta 1 and 2, one instance of 4 or 6 slots."""

from __future__ import annotations

import itertools

import pytest

from reserve_occupy_faults.sim import SimFault, SimSchedule, generate_sim, run_sim_schedule
from reserve_occupy_sim.model import core


@pytest.fixture(autouse=True)
def _quick_detector(monkeypatch):
    # Without the progress rule these runs livelock; the detector then ends them after 60
    # fruitless timer expiries instead of 1,000 (seconds instead of minutes), and they fail.
    monkeypatch.setattr(core, "MAX_IDLE_TIMERS", 60)


def test_the_schedule_the_harness_found_ends():
    outcome = run_sim_schedule(generate_sim(900320))
    assert outcome.ok, outcome.violations


CLASS = list(itertools.product((1, 2), (4, 6), (2, 4, 6, 8), (900320, 1, 2)))


@pytest.mark.parametrize("eta,slots,first,seed", CLASS)
def test_two_hung_groups_side_by_side_never_livelock(eta, slots, first, seed):
    s = SimSchedule(seed, eta=eta, batch_size=2, capacity=2, instances=1, concurrency=slots,
                    batches=8, faults=(SimFault("hung", target=first),
                                       SimFault("hung", target=first + 1)))
    outcome = run_sim_schedule(s)
    assert outcome.ok, outcome.violations
