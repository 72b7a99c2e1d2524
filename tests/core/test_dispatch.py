"""The lean trigger path (reserve_occupy/dispatch.py) decides exactly as stock ``transitions``.

A controller whose operations fire through a stock ``transitions.Machine`` built from the same
``machine_config()`` runs side by side with the real one: every outcome, error, event and
snapshot must agree. ``LeanMachine`` must refuse the features its trigger path does not run.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from transitions import Machine, MachineError

from reserve_occupy import Config, IllegalOperation, Phase, StalenessController
from reserve_occupy.dispatch import LeanMachine
from reserve_occupy.machine import MACHINE, machine_config

from .conftest import live_units

STOCK = Machine(**machine_config())


class StockController(StalenessController):
    """The same controller, its triggers fired through stock ``transitions``."""

    def _fire(self, trigger: str, *args: object) -> bool:
        try:
            return STOCK.events[trigger].trigger(self, *args)
        except MachineError:
            raise IllegalOperation(trigger, self._phase) from None


def _call(c: StalenessController, op: str, *args: object) -> object:
    try:
        return getattr(c, op)(*args)
    except Exception as e:  # the error's type and text must agree too
        return (type(e).__name__, str(e))


@pytest.mark.parametrize("seed", range(12))
def test_lean_and_stock_triggers_agree_step_by_step(seed: int) -> None:
    rng = random.Random(seed)
    b = rng.randint(1, 4)
    config = Config(rng.randint(0, 3), b, b + rng.choice([0, 0, 1, 2]),
                    rng.choice([None, 1, 3, 8]))
    lean, stock = StalenessController(config), StockController(config)
    next_id = 0
    for _ in range(600):
        # mostly valid operations, some on any id in any phase: refusals and illegal calls
        # must match as well
        op = rng.choice(["reserve"] * 3 + ["occupy"] * 3 + ["abort", "filter", "consume",
                                                            "publish", "release_stuck"])
        flying, finished = live_units(lean)
        if op == "reserve":
            args: tuple = (next_id if rng.random() < 0.9 else rng.randrange(next_id + 1),)
            next_id += 1
        elif op in ("occupy", "abort", "filter"):
            pool = finished if op == "filter" else flying
            args = (rng.choice(pool) if pool and rng.random() < 0.9 else rng.randrange(99),)
        else:
            args = ()
        assert _call(lean, op, *args) == _call(stock, op, *args), (op, args)
        assert lean.phase is stock.phase
    assert lean.events == stock.events
    assert lean.snapshot() == stock.snapshot()
    lean.check()


def test_illegal_phase_raises_through_the_lean_path() -> None:
    c = StalenessController(Config(1, 1))
    with pytest.raises(IllegalOperation):
        c.publish()  # IDLE has no publish transition
    assert not MACHINE.events["publish"].transitions.get("IDLE")  # nothing was added on a miss


@pytest.mark.parametrize("extra", [
    {"queued": True},
    {"send_event": True},
    {"ignore_invalid_triggers": True},
    {"before_state_change": "x"},
    {"finalize_event": "x"},
    {"on_exception": "x"},
])
def test_lean_machine_refuses_what_its_trigger_path_skips(extra: dict) -> None:
    with pytest.raises(ValueError, match="LeanMachine does not run"):
        LeanMachine(**{**machine_config(), **extra})


def test_lean_machine_refuses_transition_callbacks_it_would_skip() -> None:
    config = machine_config()
    config["transitions"][0] = {**config["transitions"][0], "before": "_log"}
    with pytest.raises(ValueError, match="prepare/before"):
        LeanMachine(**config)
    config = machine_config()
    config["transitions"][0] = {**config["transitions"][0], "after": lambda *a: None}
    with pytest.raises(ValueError, match="names"):
        LeanMachine(**config)


def test_lean_machine_refuses_an_overridden_set_state() -> None:
    class Custom(LeanMachine):
        def set_state(self, state: Any, model: Any = None) -> None:
            super().set_state(state, model)

    with pytest.raises(ValueError, match="set_state"):
        Custom(**machine_config())


@pytest.mark.parametrize("enum_states", [False, True])
def test_a_phase_change_writes_what_set_state_writes(enum_states: bool) -> None:
    """The lean trigger writes the dest State's value itself: the name for string states, the
    member for enum states -- what the stock Machine.set_state writes."""

    class Model:
        pass

    idle, training = (Phase.IDLE, Phase.TRAINING) if enum_states else ("IDLE", "TRAINING")
    written = []
    for cls in (LeanMachine, Machine):
        model = Model()
        cls(model=model, states=[idle, training], initial=idle, auto_transitions=False,
            model_attribute="phase", transitions=[["go", idle, training]])
        assert model.go() is True  # type: ignore[attr-defined]
        written.append(model.phase)  # type: ignore[attr-defined]
    assert written[0] == written[1] == training
    assert type(written[0]) is type(written[1])
