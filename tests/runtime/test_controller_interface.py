"""The driver's controller interface, declared (issue 35): ``runtime.controller.Controller``
names every call the driver makes; Reserve–Occupy's controller and a peer's rule both answer all
of it (Reserve–Occupy the peers' calls empty), so the driver probes nothing; the controller is
built outside ``Driver.__init__``; and the peers' unit lifecycle is the core's table.

Before: ``runtime/driver.py`` asked ``getattr(self.controller, "take_dropped" | "timer")`` three
times, built the controller itself, and ``PeerController._live`` restated the lifecycle."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from pathlib import Path

import pytest

from reserve_occupy import UNIT_LIFECYCLE, Config, StalenessController, UnitState
from reserve_occupy.errors import IllegalUnitState, InvalidUnitId, UnknownUnit
from runtime import driver as driver_module
from runtime.controller import Controller, make_controller
from runtime.driver import Driver
from runtime.peers import PeerController
from runtime.records import DriverSettings
from runtime.recovery.journal import JournaledController

from .helpers import PROMPTS, make, parity_reward, run

ROOT = Path(__file__).resolve().parents[2]


def members(proto: type) -> set[str]:
    names: set[str] = set()
    for cls in proto.__mro__:
        if cls is object or cls.__name__ in ("Protocol", "Generic"):
            continue
        names.update(getattr(cls, "__annotations__", {}))
        names.update(n for n, v in vars(cls).items()
                     if not n.startswith("_") and (callable(v) or isinstance(v, property)))
    return names


CONTROLLER = members(Controller)


def _controllers():
    config = Config(max_staleness=1, batch_size=2)
    return [JournaledController(config), PeerController("nemo_in_order", config, 2,
                                                        now=lambda: 0.0)]


def test_the_protocol_names_the_peer_calls():
    assert {"take_dropped", "take_aborted", "take_admission_moved", "timer",
            "fire_timer"} <= CONTROLLER
    assert {"reserve", "occupy", "abort", "stream", "consume", "publish", "release_stuck",
            "unit_state", "check", "version", "head", "head_status", "events",
            "events_since"} <= CONTROLLER


@pytest.mark.parametrize("ctl", _controllers(), ids=lambda c: type(c).__name__)
def test_both_controllers_answer_every_call_with_its_parameters(ctl):
    for name in sorted(CONTROLLER):
        assert hasattr(ctl, name), name
        declared = getattr(Controller, name)
        if inspect.isfunction(declared):
            want = list(inspect.signature(declared).parameters)[1:]
            have = list(inspect.signature(getattr(ctl, name)).parameters)
            assert have == want, (name, have, want)


def test_reserve_occupy_answers_the_peer_calls_empty():
    ctl = JournaledController(Config(max_staleness=1, batch_size=2))
    assert ctl.timer == math.inf
    assert ctl.take_dropped() == [] and ctl.take_aborted() == []
    assert ctl.take_admission_moved() is False
    ctl.fire_timer()
    assert ctl.events == ()  # nothing happened


def _probes(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and node.args \
                and "controller" in ast.unparse(node.args[0]):
            found.append(ast.unparse(node))
    return found


def test_the_driver_probes_nothing_of_its_controller():
    assert _probes(ast.parse(Path(driver_module.__file__).read_text())) == []
    # the scan sees a probe where there is one
    assert _probes(ast.parse("getattr(self.controller, 'timer', 0)"))


def test_the_driver_builds_no_controller():
    init = ast.parse(textwrap.dedent(inspect.getsource(Driver.__init__)))
    names = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)}
    assert not names & {"JournaledController", "PeerController", "make_controller"}, names
    with pytest.raises(TypeError, match="controller"):
        Driver(DriverSettings(max_staleness=1, batch_size=2, group_size=2, steps=1, max_tokens=4),
               None, None, parity_reward, PROMPTS)  # type: ignore[arg-type]


def test_make_controller_builds_what_the_policy_names():
    reference = DriverSettings(max_staleness=1, batch_size=2, group_size=2, steps=1, max_tokens=4)
    assert type(make_controller(reference, lambda: 0.0)) is JournaledController
    peer = DriverSettings(max_staleness=1, batch_size=2, group_size=2, steps=1, max_tokens=4,
                          policy="areal")
    ctl = make_controller(peer, lambda: 7.0)
    assert type(ctl) is PeerController and ctl.now == 7.0


@pytest.mark.parametrize("policy", ["reserve_occupy", "nemo_in_order", "areal"])
def test_a_run_through_the_declared_interface_trains(policy):
    driver, _, trainer, clock = make(steps=3, policy=policy)
    assert len(run(driver, clock)) == 3 and len(trainer.batches) == 3


# ------------------------------------------------------- the peers' lifecycle: the core's ------

def _peer() -> PeerController:
    return PeerController("unbounded", Config(max_staleness=1, batch_size=2), 2)


def test_a_peer_refuses_what_the_core_refuses_with_the_same_error():
    core = StalenessController(Config(max_staleness=1, batch_size=2))
    peer = _peer()
    for ctl in (core, peer):
        assert ctl.reserve("u") is not None
    for op, unit, error in [("occupy", "nope", UnknownUnit), ("abort", True, InvalidUnitId),
                            ("occupy", ("t",), InvalidUnitId)]:
        for ctl in (core, peer):
            with pytest.raises(error):
                getattr(ctl, op)(unit)
    for ctl in (core, peer):
        ctl.occupy("u")
        with pytest.raises(IllegalUnitState) as caught:
            ctl.abort("u")
        assert str(caught.value) == "can't abort unit 'u' in state FINISHED"
        assert ctl.unit_state("u") is UnitState.FINISHED  # unchanged by the refusal


def test_the_peer_lifecycle_is_read_from_the_core_table(monkeypatch):
    """A change to the core's table is a change to the peers' lifecycle: nothing restates
    it. (On the old code the peer occupied the unit, its own copy unchanged.)"""
    monkeypatch.setitem(UNIT_LIFECYCLE, "occupy", {UnitState.FINISHED: UnitState.FINISHED})
    peer = _peer()
    peer.reserve("u")
    with pytest.raises(IllegalUnitState):
        peer.occupy("u")
    assert peer.unit_state("u") is UnitState.IN_FLIGHT
