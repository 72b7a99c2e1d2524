"""The fault harness ends every schedule: a driver that never finishes is a violation, not a
hang (``reserve_occupy_faults.harness``, "Termination")."""

from __future__ import annotations

import dataclasses

import pytest

from runtime.driver import Driver
from reserve_occupy_faults import harness
from reserve_occupy_faults.harness import Run, Variant, run_schedule
from reserve_occupy_faults.schedule import generate


class NeverDone(Driver):
    async def run(self):  # waits on the virtual clock forever, as a timeout livelock does
        while True:
            await self.clock.sleep(1.0)


class NeverDoneVariant(Variant):
    name = "never_done"

    def driver_class(self):
        return NeverDone


@pytest.mark.timeout(60)
def test_a_driver_that_never_finishes_is_reported(tmp_path):
    out = run_schedule(dataclasses.replace(generate(0), faults=()), NeverDoneVariant(),
                       root=tmp_path)
    assert not out.ok
    assert any("no progress" in v for v in out.violations), out.violations


@pytest.mark.timeout(60)
def test_units_that_always_time_out_end_the_schedule(tmp_path, monkeypatch):
    # Every generation outlasts the unit timeout: each group times out and is re-admitted. The
    # harness must end the schedule (the driver's own guard, or the clock's bound, whichever
    # fires first) instead of running forever.
    monkeypatch.setattr(harness, "MAX_WAKEUPS", 100)
    run = Run(dataclasses.replace(generate(0), faults=()), tmp_path, Variant())
    run.settings = dataclasses.replace(run.settings, unit_s=0.001)
    out = run.run()
    assert not out.ok
