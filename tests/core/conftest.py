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
    def factory(eta=1, batch=4, capacity=None, concurrency=None) -> Checked:
        return Checked(Config(eta, batch, capacity, concurrency))

    return factory


def render(c) -> dict[int, str]:
    return {b.v_buffer: b.render() for b in c.snapshot().buffers}
