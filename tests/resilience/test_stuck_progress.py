"""The STUCK timeout cannot livelock (docs/runtime.md, "Progress guarantees"; ``runtime.stuck``):
hung units outside the head buffer cannot starve it for good, and a release followed by no
placement does not repeat unchanged. The schedule the fault harness found, and its class: two
hung groups admitted next to each other at eta 1 and 2, one instance of 4 or 6 slots."""

from __future__ import annotations

import itertools

import pytest

from runtime.faults.sim import SimFault, SimSchedule, generate_sim, run_sim_schedule
from runtime.sim.model import core
from runtime.stuck import StuckTimeouts


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


class _Ctl:
    """What ``progress_mark`` reads, set by hand."""

    def __init__(self) -> None:
        self.head, self.admitted, self.aborted, self.in_flight = 0, 0, 0, 0

    def snapshot(self):
        return self


def test_backoff_doubles_on_fruitless_releases_and_resets_on_progress():
    ctl, t = _Ctl(), StuckTimeouts(3.0)
    assert t.released(ctl, now=10.0) is None  # the first release: nothing to compare with
    assert t.released(ctl, now=13.0) is None and t.timeout == 6.0  # fruitless: back off
    assert t.released(ctl, now=19.0) is None and t.timeout == 12.0
    assert t.released(ctl, now=31.0) == 19.0  # the third in a row escalates: units older
    assert t.timeout == 24.0                  # than the previous release are aborted
    ctl.admitted, ctl.aborted = 3, 1  # one unit placed (aborts alone would not count)
    t.refresh(ctl)
    assert t.timeout == 3.0
    assert t.released(ctl, now=60.0) is None
    ctl.aborted, ctl.admitted, ctl.in_flight = 2, 5, 1  # an abort, re-admissions: no progress
    assert t.released(ctl, now=63.0) is None and t.timeout == 6.0
    ctl.head = 1  # a batch consumed
    assert t.released(ctl, now=70.0) is None and t.timeout == 3.0
