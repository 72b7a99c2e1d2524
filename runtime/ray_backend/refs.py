"""What the backend and the sharded trainer's rank actors share: Ray's ``.options`` for a
config's resources, and weights in the object store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_RAY_OPTIONS = ("num_cpus", "num_gpus", "memory")


def actor_options(resources: dict[str, float]) -> dict[str, Any]:
    """``{"num_cpus": 1, "GPU_A100": 1}`` -> Ray's ``.options`` keyword arguments."""
    opts: dict[str, Any] = {k: v for k, v in resources.items() if k in _RAY_OPTIONS}
    custom = {k: v for k, v in resources.items() if k not in _RAY_OPTIONS}
    if custom:
        opts["resources"] = custom
    return opts


@dataclass(frozen=True)
class RayWeights:
    """Weights in the object store: the trainer put them once; engines fetch them."""

    version: int
    ref: Any
    digest: str
