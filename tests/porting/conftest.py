"""Shared helpers for the porting kit's tests: reference traces as lines, and edits of them."""

from __future__ import annotations

import json

import pytest

from reserve_occupy import Config, StalenessController
from reserve_occupy.trace import dumps
from reserve_occupy_porting.drive import Profile, drive

CONFIGS = [
    Config(0, 2),
    Config(1, 2),
    Config(2, 3, max_concurrency=4),
    Config(1, 2, capacity=3),
    Config(2, 2, capacity=4, max_concurrency=5),
]


def reference_lines(config: Config, seed: int, **profile: object) -> list[str]:
    rec = drive(StalenessController(config), seed, Profile(**profile), reraise=True)
    return [dumps(r) for r in rec.lines()]


def records(lines: list[str]) -> list[dict]:
    return [json.loads(x) for x in lines]


def lines_of(recs: list[dict]) -> list[str]:
    return [dumps(r) for r in recs]


@pytest.fixture
def seed_trace() -> list[str]:
    """A reference trace with shifts, consumes, publishes and oversampling aborts."""
    return reference_lines(Config(1, 2, capacity=3), 5, steps=200)
