"""The transition table is data, drives the machine, and is what spec/ shows."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from reserve_occupy import (
    OPERATIONS,
    Config,
    Phase,
    ReplayDivergence,
    StalenessController,
    replay,
)
from reserve_occupy.diagram import document
from reserve_occupy.machine import MACHINE

from .conftest import random_step

ROOT = Path(__file__).resolve().parents[2]


def test_state_diagram_in_spec_is_generated_from_the_machine():
    committed = (ROOT / "spec" / "state-machine.md").read_text(encoding="utf-8")
    assert committed == document(), "spec/state-machine.md is stale: run `make spec`"


def test_machine_has_no_auto_transitions_and_matches_the_table():
    assert set(MACHINE.events) == {op.trigger for op in OPERATIONS}
    for op in OPERATIONS:
        sources = set(MACHINE.events[op.trigger].transitions)
        assert sources == {p.value for p in op.sources}


def test_core_imports_no_io_or_heavy_modules():
    import ast

    banned = {"os", "io", "socket", "threading", "asyncio", "time", "torch", "vllm", "random",
              "subprocess", "pathlib", "datetime"}
    for path in (ROOT / "reserve_occupy").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module.split(".")[0]]
            assert not banned & set(names), f"{path.name} imports {banned & set(names)}"


def random_walk(seed: int, steps: int = 300) -> StalenessController:
    rng = random.Random(seed)
    b = rng.randint(1, 4)
    c = StalenessController(Config(rng.randint(0, 3), b, b + rng.choice([0, 0, 1, 2]),
                                   rng.choice([None, 1, 3, 8])))
    n = 0
    for _ in range(steps):
        n = random_step(c, rng, n)
        c.check()
    return c


@pytest.mark.parametrize("seed", range(40))
def test_random_walks_keep_every_invariant_and_replay(seed):
    c = random_walk(seed)
    assert replay(c.config, c.events).snapshot() == c.snapshot()


def test_replay_detects_a_tampered_log():
    c = random_walk(1)
    events = list(c.events)
    i = next(i for i, e in enumerate(events) if e.op == "occupy")
    bad = events[i]._replace(slot=(99, 0))
    events[i] = bad
    with pytest.raises(ReplayDivergence) as info:
        replay(c.config, events)
    assert info.value.seq == bad.seq


def test_clone_is_independent():
    c = random_walk(2, steps=50)
    d = c.clone()
    before = c.snapshot()
    d.reserve("fresh") or (d.phase is Phase.TRAINING and d.publish())
    assert c.snapshot() == before
    c.check(), d.check()


def test_events_are_append_only_copies():
    c = StalenessController(Config(1, 1))
    c.reserve("a")
    log = c.events
    c.occupy("a")
    assert len(log) == 1 and len(c.events) == 2
    assert [e.seq for e in c.events] == [0, 1]


def test_last_event_and_count_track_the_log():
    c = StalenessController(Config(1, 1))
    assert c.last_event is None and c.event_count == 0
    c.reserve("a")
    c.reserve("b")
    assert c.event_count == 2 and c.last_event == c.events[-1] and c.last_event.unit_id == "b"


def test_events_since_returns_the_unseen_tail():
    c = StalenessController(Config(1, 1))
    c.reserve("a")
    c.reserve("b")
    assert c.events_since(0) == c.events
    assert [e.unit_id for e in c.events_since(1)] == ["b"]
    assert c.events_since(2) == () and c.events_since(5) == ()
    for bad in (-1, True, "1", 1.0):
        with pytest.raises(ValueError):
            c.events_since(bad)
