"""The source's worked examples (spec/scenarios/) replay exactly against the real controller."""

from __future__ import annotations

import copy

import pytest

from reserve_occupy import replay

from .scenario import SCENARIOS, load, run_scenario

FILES = sorted(SCENARIOS.glob("*.json"))


def test_every_required_example_is_present():
    names = {load(p)["name"] for p in FILES}
    assert names >= {
        "reserve-occupy-B-F", "end-to-end-A-L", "timeout-7.2", "filtering-7.3",
        "grpo-group-7.4", "group-oversampling-7.5", "batch-oversampling-7.6",
        "mixed-version-ordering",
    }


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_replays_exactly(path):
    data = load(path)
    controller = run_scenario(data)
    # The event log of the run rebuilds the same state.
    rebuilt = replay(controller.config, controller.events)
    assert rebuilt.snapshot() == controller.snapshot()


def test_end_to_end_batches_are_the_blogs():
    data = load(SCENARIOS / "end-to-end-A-L.json")
    batches = [set(u for u, _ in s["batch"]) for s in data["steps"] if "batch" in s]
    assert batches == [set("ACDE"), set("BFGH"), set("IJKL")]


@pytest.mark.parametrize("field,value", [("slot", [9, 9]), ("moves", []), ("batch", [["A", 0]])])
def test_runner_notices_a_wrong_expectation(field, value):
    # The replay is only evidence if a wrong expectation fails it.
    data = copy.deepcopy(load(SCENARIOS / "end-to-end-A-L.json"))
    step = next(s for s in data["steps"] if field in s and s[field] != value)
    step[field] = value
    with pytest.raises(AssertionError):
        run_scenario(data)
