"""Bad input raises the documented typed error and leaves the controller exactly as it was."""

from __future__ import annotations

import random

import pytest

from reserve_occupy import (
    Config,
    ConfigError,
    DuplicateUnit,
    IllegalOperation,
    IllegalUnitState,
    InvalidUnitId,
    Phase,
    ProtocolError,
    StalenessController,
    UnitState,
    UnknownUnit,
)

from .conftest import live_units, random_step


def unchanged(c: StalenessController, call, error):
    before, n = c.snapshot(), len(c.events)
    with pytest.raises(error) as info:
        call()
    assert c.snapshot() == before and len(c.events) == n
    c.check()
    return info.value


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"max_staleness": -1, "batch_size": 2}, "max_staleness"),
        ({"max_staleness": 1.5, "batch_size": 2}, "max_staleness"),
        ({"max_staleness": True, "batch_size": 2}, "max_staleness"),
        ({"max_staleness": 1, "batch_size": 0}, "batch_size"),
        ({"max_staleness": 1, "batch_size": "4"}, "batch_size"),
        ({"max_staleness": 1, "batch_size": 4, "capacity": 3}, "capacity"),
        ({"max_staleness": 1, "batch_size": 4, "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        Config(**kwargs)
    assert info.value.field == field and field in str(info.value)


def test_controller_requires_a_config():
    with pytest.raises(TypeError):
        StalenessController({"max_staleness": 1})  # type: ignore[arg-type]


def busy() -> StalenessController:
    """A state with a unit in every lifecycle state."""
    c = StalenessController(Config(2, 2))
    for u in ("done1", "done2", "fin", "fly", "gone"):
        c.reserve(u)
    c.occupy("done1"), c.occupy("done2")
    c.consume()
    c.occupy("fin")
    c.abort("gone")
    c.check()
    assert c.unit_state("fly") is UnitState.IN_FLIGHT and c.phase is Phase.TRAINING
    return c


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda c: c.occupy("nope"), UnknownUnit, "never reserved"),
        (lambda c: c.abort("nope"), UnknownUnit, "never reserved"),
        (lambda c: c.filter("nope"), UnknownUnit, "never reserved"),
        (lambda c: c.occupy("fin"), IllegalUnitState, "state FINISHED"),  # double occupy
        (lambda c: c.occupy("gone"), IllegalUnitState, "state ABORTED"),  # occupy after abort
        (lambda c: c.occupy("done1"), IllegalUnitState, "state CONSUMED"),
        (lambda c: c.abort("fin"), IllegalUnitState, "state FINISHED"),
        (lambda c: c.filter("fly"), IllegalUnitState, "state IN_FLIGHT"),  # filter of reserved
        (lambda c: c.filter("done1"), IllegalUnitState, "state CONSUMED"),
        (lambda c: c.reserve("fly"), DuplicateUnit, "already known"),
        (lambda c: c.reserve("gone"), DuplicateUnit, "already known"),
        (lambda c: c.reserve(1.5), InvalidUnitId, "str or int"),
        (lambda c: c.reserve(True), InvalidUnitId, "str or int"),
        (lambda c: c.occupy(None), InvalidUnitId, "str or int"),
        (lambda c: c.consume(), IllegalOperation, "can't consume when trainer=TRAINING"),
        (lambda c: c.release_stuck(), IllegalOperation, "can't release_stuck when trainer=TRAINING"),
    ],
)
def test_invalid_call_raises_and_changes_nothing(call, error, words):
    c = busy()
    err = unchanged(c, lambda: call(c), error)
    assert words in str(err)
    assert isinstance(err, ProtocolError)


def test_publish_while_idle():
    c = StalenessController(Config(1, 2))
    err = unchanged(c, c.publish, IllegalOperation)
    assert str(err) == "can't publish when trainer=IDLE"


def test_unit_state_of_unknown_unit():
    with pytest.raises(UnknownUnit):
        StalenessController(Config(1, 1)).unit_state("x")


INVALID = [
    ("occupy", UnknownUnit), ("abort", UnknownUnit), ("filter", UnknownUnit),
    ("occupy_twice", IllegalUnitState), ("occupy_aborted", IllegalUnitState),
    ("filter_reserved", IllegalUnitState), ("reserve_dup", DuplicateUnit),
    ("consume_training", IllegalOperation), ("publish_idle", IllegalOperation),
    ("bad_id", InvalidUnitId),
]


@pytest.mark.parametrize("seed", range(20))
def test_random_invalid_calls_interleaved_with_valid_ones(seed):
    """Random valid walks; at every step also try one invalid call of each applicable kind."""
    rng = random.Random(seed)
    c = StalenessController(Config(rng.randint(0, 2), rng.randint(1, 3),
                                   max_concurrency=rng.choice([None, 2, 5])))
    n = 0
    for _ in range(150):
        units = {u.unit_id: u.state for u in c.snapshot().units}
        flying, finished = live_units(c)
        ended = [u for u in range(n) if u not in units]
        for kind, error in INVALID:
            call = {
                "occupy": lambda: c.occupy(f"ghost{n}"),
                "abort": lambda: c.abort(f"ghost{n}"),
                "filter": lambda: c.filter(f"ghost{n}"),
                "occupy_twice": finished and (lambda: c.occupy(rng.choice(finished))),
                "occupy_aborted": ended and (lambda: c.occupy(rng.choice(ended))),
                "filter_reserved": flying and (lambda: c.filter(rng.choice(flying))),
                "reserve_dup": (flying or ended) and (lambda: c.reserve(rng.choice(flying + ended))),
                "consume_training": c.phase is Phase.TRAINING and c.consume,
                "publish_idle": c.phase is Phase.IDLE and c.publish,
                "bad_id": lambda: c.abort(3.0),
            }[kind]
            if call:
                unchanged(c, call, error)
        n = random_step(c, rng, n, release_p=1.0)
        c.check()
