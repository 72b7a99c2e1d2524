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


def bundle(resources: Mapping[str, float]) -> dict[str, float]:
    """Config resources (``num_cpus``, custom names) in Ray's names: a placement group bundle."""
    return {_ray_name(k): float(v) for k, v in resources.items() if v}


def requests(engines: int, engine_resources: Mapping[str, float],
             trainer_resources: Mapping[str, float],
             world: int = 1) -> list[tuple[str, dict[str, float]]]:
    """One (who, resources in Ray's names) per actor the run creates: the engines, then the
    trainer actor, or ``world`` > 1 rank actors."""
    engine = bundle(engine_resources)
    trainer = bundle(trainer_resources)
    ranks = ([("trainer actor", trainer)] if world <= 1
             else [(f"trainer rank {r}", trainer) for r in range(world)])
    return [(f"engine actor {i}", engine) for i in range(engines)] + ranks


def check_placement(world: int, resources: Mapping[str, float], strategy: str,
                    nodes: Sequence[Mapping[str, float]]) -> None:
    """Raise ``ClusterTooSmall`` when the rank actors' placement group cannot be placed on
    these nodes (their totals): ``STRICT_PACK`` needs one node with ``world`` bundles,
    ``STRICT_SPREAD`` ``world`` nodes with one each (the soft strategies place anywhere)."""
    if world <= 1:
        return
    one = bundle(resources)

    def holds(node: Mapping[str, float], n: int) -> bool:
        return all(node.get(k, 0.0) + 1e-9 >= n * v for k, v in one.items())

    if strategy == "STRICT_PACK" and not any(holds(n, world) for n in nodes):
        raise ClusterTooSmall(
            f"ray.trainer_placement STRICT_PACK puts the {world} trainer ranks on one node, "
            f"{world} x {_fmt(one)}, and no node has that much (nodes: "
            f"{'; '.join(_fmt(n) for n in nodes) or 'none'}); use SPREAD or fewer ranks")
    if strategy == "STRICT_SPREAD":
        fit = sum(1 for n in nodes if holds(n, 1))
        if fit < world:
            raise ClusterTooSmall(
                f"ray.trainer_placement STRICT_SPREAD puts the {world} trainer ranks on "
                f"{world} different nodes, and {fit} node(s) hold a rank's {_fmt(one)}; "
                f"add nodes, or use STRICT_PACK or SPREAD")


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
        n_ranks = sum(1 for who, _ in asked if who.startswith("trainer rank"))
        trainer_part = (f"{n_ranks} trainer rank(s) x {_fmt(asked[-1][1])}" if n_ranks
                        else f"the trainer actor's {_fmt(asked[-1][1])}")
        raise ClusterTooSmall(
            f"the Ray cluster is too small: the run asks for {_fmt(short)} in all "
            f"({n_engines} engine actor(s) x {_fmt(asked[0][1]) if n_engines else '-'} + "
            f"{trainer_part}), the cluster has {_fmt(have)}; {hint}")
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
    world = cfg.trainer.world_size if cfg.trainer.sharded else 1
    check(requests(cfg.rollout.engines, cfg.ray.engine_resources, cfg.ray.trainer_resources,
                   world), ray.cluster_resources(), nodes)
    check_placement(world, cfg.ray.trainer_resources, cfg.ray.trainer_placement, nodes)


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
    world = cfg.trainer.world_size if cfg.trainer.sharded else 1
    asked = [(who, {k: v for k, v in res.items() if k not in _UNPREDICTABLE})
             for who, res in requests(cfg.rollout.engines, cfg.ray.engine_resources,
                                      cfg.ray.trainer_resources, world)]
    total = local_totals(cfg.ray.num_cpus)
    check(asked, total, [total])
    check_placement(world, {k: v for k, v in cfg.ray.trainer_resources.items()
                            if _ray_name(k) not in _UNPREDICTABLE}, cfg.ray.trainer_placement,
                    [total])
