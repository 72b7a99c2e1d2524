"""Before any actor is created: does the cluster have what the run asks for?

Ray queues an actor whose resources no node can give and waits for them for ever, printing
nothing (a run with two engine actors and a trainer of one CPU each on a two-CPU machine waited
until it was killed). ``check_cluster`` compares the run's requests with the cluster's
*totals* (``ray.cluster_resources()``, and each node's own for a single actor) and raises
``ClusterTooSmall`` naming what was asked and what exists, so ``train`` exits 2 before any
actor is queued. It is a necessary condition: actors that each fit a node and together fit the
cluster can still fail to pack onto the nodes, and other jobs on a shared cluster hold
resources the totals count; placement then waits as Ray does (docs/ray.md says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..inputs import InputError

# config resource names -> the names Ray reports them under
_RAY_NAMES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


class ClusterTooSmall(InputError):
    """The run asks for more resources than the cluster has; the message says both."""


def _ray_name(key: str) -> str:
    return _RAY_NAMES.get(key, key)


def _fmt(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(resources.items())) or "nothing"


def requests(engines: int, engine_resources: Mapping[str, float],
             trainer_resources: Mapping[str, float]) -> list[tuple[str, dict[str, float]]]:
    """One (who, resources in Ray's names) per actor the run creates."""
    engine = {_ray_name(k): float(v) for k, v in engine_resources.items() if v}
    trainer = {_ray_name(k): float(v) for k, v in trainer_resources.items() if v}
    return [(f"engine actor {i}", engine) for i in range(engines)] + [("trainer actor", trainer)]


def check(asked: Sequence[tuple[str, Mapping[str, float]]], total: Mapping[str, float],
          nodes: Sequence[Mapping[str, float]]) -> None:
    """Raise ``ClusterTooSmall`` when the actors' sum exceeds the cluster's total of some
    resource, or one actor needs more than any single node has."""
    summed: dict[str, float] = {}
    for _, res in asked:
        for k, v in res.items():
            summed[k] = summed.get(k, 0.0) + v
    short = {k: v for k, v in summed.items() if v > total.get(k, 0.0) + 1e-9}
    hint = ("lower rollout.engines or ray.engine_resources / ray.trainer_resources, or give "
            "the cluster more (ray.num_cpus for a local one)")
    if short:
        n_engines = sum(1 for who, _ in asked if who.startswith("engine"))
        have = {k: total.get(k, 0.0) for k in short}
        raise ClusterTooSmall(
            f"the Ray cluster is too small: the run asks for {_fmt(short)} in all "
            f"({n_engines} engine actor(s) x {_fmt(asked[0][1]) if n_engines else '-'} + "
            f"the trainer actor's {_fmt(asked[-1][1])}), the cluster has {_fmt(have)}; {hint}")
    for who, res in asked:
        if res and not any(all(node.get(k, 0.0) + 1e-9 >= v for k, v in res.items())
                           for node in nodes):
            raise ClusterTooSmall(f"the Ray cluster is too small: the {who} asks for "
                                  f"{_fmt(res)} and no node has that much (nodes: "
                                  f"{'; '.join(_fmt(n) for n in nodes) or 'none'}); {hint}")


def check_cluster(cfg: Any) -> None:
    """``check`` against the running cluster (``ray.init`` was called)."""
    import ray

    nodes = [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]
    check(requests(cfg.rollout.engines, cfg.ray.engine_resources, cfg.ray.trainer_resources),
          ray.cluster_resources(), nodes)


# Resources whose size Ray works out at start-up from free memory: a local cluster's share
# cannot be predicted here, so ``check_local`` leaves them to ``check_cluster``.
_UNPREDICTABLE = frozenset({"memory", "object_store_memory"})


def local_totals(num_cpus: int | None) -> dict[str, float]:
    """What the local cluster ``train --backend ray`` starts (``ray.address`` null) will have:
    ``ray.num_cpus`` CPUs, else the CPUs this process may run on; the GPUs torch sees; no
    custom resources."""
    import os

    if num_cpus is None:
        try:
            num_cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            num_cpus = os.cpu_count() or 1
    gpus = 0
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        pass
    return {"CPU": float(num_cpus), "GPU": float(gpus)}


def check_local(cfg: Any) -> None:
    """``check`` against the local cluster a run will start, before it starts (``train
    --check`` runs it): the same refusal, without starting Ray."""
    asked = [(who, {k: v for k, v in res.items() if k not in _UNPREDICTABLE})
             for who, res in requests(cfg.rollout.engines, cfg.ray.engine_resources,
                                      cfg.ray.trainer_resources)]
    total = local_totals(cfg.ray.num_cpus)
    check(asked, total, [total])
