"""``run.backend: ray``: rollout engines and the trainer as Ray actors; the controller stays a
single writer in the driver's process. The only package that imports ``ray`` (the ``ray``
extra); docs/ray.md describes placement, weight sync and multi-node use."""

from .backend import RayBackend, RayRollout, RayTrainer, RayWeights

__all__ = ["RayBackend", "RayRollout", "RayTrainer", "RayWeights"]
