from __future__ import annotations

import pytest

from reserve_occupy import Config, StalenessController


class Checked:
    """Wraps a controller and runs every invariant after each call, like the spec demands."""

    def __init__(self, config: Config) -> None:
        self.c = StalenessController(config)
        self.c.check()

    def __getattr__(self, name):
        attr = getattr(self.c, name)
        if not callable(attr) or name.startswith("_") or name in ("snapshot", "check", "clone"):
            return attr

        def call(*args):
            result = attr(*args)
            self.c.check()
            return result

        return call


@pytest.fixture
def make():
    def factory(eta=1, batch=4, capacity=None, concurrency=None, streaming=False) -> Checked:
        return Checked(Config(eta, batch, capacity, concurrency, streaming))

    return factory


def render(c) -> dict[int, str]:
    return {b.v_buffer: b.render() for b in c.snapshot().buffers}


def live_units(c):
    """(in-flight ids, finished ids) of a controller, from its snapshot."""
    from reserve_occupy import UnitState

    units = {u.unit_id: u.state for u in c.snapshot().units}
    return ([u for u, s in units.items() if s is UnitState.IN_FLIGHT],
            [u for u, s in units.items() if s is UnitState.FINISHED])


WALK_OPS = ["reserve"] * 4 + ["occupy"] * 4 + ["abort", "filter", "tick", "tick"]


def random_step(c, rng, next_id: int, release_p: float = 0.3) -> int:
    """One random valid operation (reserve, occupy, abort, filter, or a trainer tick: publish,
    consume, or release_stuck with probability ``release_p``); returns the next unused id."""
    from reserve_occupy import Phase

    flying, finished = live_units(c)
    op = rng.choice(WALK_OPS)
    if op == "reserve":
        if c.reserve(next_id) is not None:
            next_id += 1
    elif op == "occupy" and flying:
        c.occupy(rng.choice(flying))
    elif op == "abort" and flying:
        c.abort(rng.choice(flying))
    elif op == "filter" and finished:
        c.filter(rng.choice(finished))
    elif op == "tick":
        if c.phase is Phase.TRAINING:
            c.publish()
        elif c.consume() is None and rng.random() < release_p:
            c.release_stuck()
    return next_id
