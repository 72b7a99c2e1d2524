"""Hypothesis state machine over the real controller (proofs/stateful.py), and trace replay."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from reserve_occupy import StalenessController, replay

from . import report
from .modelcheck import canonical, enabled, run_op
from .stateful import CONFIGS, ControllerMachine

SETTINGS = settings(max_examples=150, stateful_step_count=60, deadline=None, derandomize=True,
                    database=None, suppress_health_check=list(HealthCheck))


def test_state_machine_real_controller() -> None:
    runs = {"n": 0}

    class Counted(ControllerMachine):
        def teardown(self) -> None:
            runs["n"] += 1
            super().teardown()

    run_state_machine_as_test(Counted, settings=SETTINGS)
    report.add("Hypothesis state machine", f"real controller: {runs['n']} runs of up to "
               f"{SETTINGS.stateful_step_count} steps, every invariant after every step: OK")
    assert runs["n"] >= SETTINGS.max_examples // 2


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(config=CONFIGS, choices=st.lists(st.integers(0, 60), max_size=80))
def test_a_recorded_event_log_replays_to_the_same_snapshot(config, choices) -> None:
    c = StalenessController(config)
    for n in choices:
        ops = enabled(c, canonical(c)[1])
        _, op, unit = ops[n % len(ops)]
        run_op(c, op, unit)
    assert replay(config, c.events).snapshot() == c.snapshot()
