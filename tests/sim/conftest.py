"""Small, fast settings shared by the simulator tests: 128 synthetic groups, 4 groups per batch,
the shipped Qwen3-8B/H20 cost preset (engines are not the bottleneck at eta 1 and are at eta 3,
so both regimes appear)."""

from __future__ import annotations

import pytest

from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.workload import MathReasoningShape, generate


@pytest.fixture(scope="session")
def workload():
    return generate(1, MathReasoningShape(groups=128))


@pytest.fixture(scope="session")
def cost():
    return preset("qwen3-8b-h20")
