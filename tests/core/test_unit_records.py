"""Finished units are recorded by their buffer and read CONSUMED once it was consumed.

Consume writes no per-unit record (machine.py, "Unit records"); these tests pin that the public
answers are those of explicit per-unit states, and that ``check`` catches records, watermark or
consumed counter out of step with the slot table.
"""

from __future__ import annotations

import random

import pytest

from reserve_occupy import (
    Config,
    DuplicateUnit,
    IllegalUnitState,
    InvariantViolation,
    StalenessController,
    UnitState,
)

from .conftest import random_step


def consumed_once(config: Config = Config(1, 2)) -> tuple[StalenessController, list]:
    c = StalenessController(config)
    ids = [f"u{i}" for i in range(config.batch_size)]
    for u in ids:
        assert c.reserve(u) is not None
    for u in ids:
        c.occupy(u)
    assert c.consume() is not None
    return c, ids


def test_consumed_units_read_consumed_everywhere():
    c, ids = consumed_once()
    for u in ids:
        assert c.unit_state(u) is UnitState.CONSUMED
        for op in (c.occupy, c.abort, c.filter):
            with pytest.raises(IllegalUnitState, match="CONSUMED"):
                op(u)
        with pytest.raises(DuplicateUnit, match="CONSUMED"):
            c.reserve(u)
    s = c.snapshot()
    assert s.consumed == len(ids) and not s.units and s.admitted == len(ids)
    c.publish()
    assert all(c.unit_state(u) is UnitState.CONSUMED for u in ids)
    c.check()


@pytest.mark.parametrize("seed", range(6))
def test_records_read_as_the_states_the_log_reports(seed):
    """Per-unit states rebuilt from the event log's outcomes equal the controller's answers."""
    rng = random.Random(seed)
    c = StalenessController(Config(2, 3, 4, 6))
    want: dict = {}
    n = 0
    for _ in range(400):
        seen = c.event_count
        n = random_step(c, rng, n)
        for e in c.events[seen:]:
            if e.op == "reserve":
                want[e.unit_id] = UnitState.IN_FLIGHT
            elif e.op == "occupy":
                want[e.unit_id] = UnitState.FINISHED
            elif e.op == "abort":
                want[e.unit_id] = UnitState.ABORTED
            elif e.op == "filter":
                want[e.unit_id] = UnitState.FILTERED
            elif e.op == "consume":
                want.update((bu.unit_id, UnitState.CONSUMED) for bu in e.batch.units)
            want.update((u, UnitState.ABORTED) for u in e.aborted)
        assert {u: c.unit_state(u) for u in want} == want
        c.check()


def test_check_catches_a_record_naming_the_wrong_buffer():
    c = StalenessController(Config(1, 2))
    c.reserve("a"), c.reserve("b")
    c.occupy("a")
    assert c._units["a"] == 0
    c._units["a"] = 1  # still open, but "a" is not there
    with pytest.raises(InvariantViolation, match="recorded in buffer 1"):
        c.check()


def test_check_catches_a_watermark_out_of_step():
    c, _ = consumed_once()
    c._consumed_below -= 1  # the batch would read FINISHED again
    with pytest.raises(InvariantViolation):
        c.check()


def test_check_catches_consumed_records_the_counter_missed():
    c, _ = consumed_once()
    c._consumed -= 1
    c._aborted += 1  # the total still adds up: only the cross-check sees it
    with pytest.raises(InvariantViolation, match="recorded consumed"):
        c.check()


def test_check_refuses_finished_or_consumed_stored_as_a_state():
    """Both read the same as the buffer record they replace, but are tied to no buffer."""
    c = StalenessController(Config(1, 2))
    c.reserve("a"), c.reserve("b")
    c.occupy("a")
    c._units["a"] = UnitState.FINISHED
    with pytest.raises(InvariantViolation, match="conservation"):
        c.check()
    c, ids = consumed_once()
    c._units[ids[0]] = UnitState.CONSUMED
    with pytest.raises(InvariantViolation, match="has record"):
        c.check()
