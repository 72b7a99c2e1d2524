"""The driver's side of the Ray backend: engines and the trainer behind the same ``Rollout`` and
``Trainer`` interfaces the in-process run uses, so the driver (and the controller, a single
writer in the driver's process) cannot tell the difference.

* ``ActorEngine`` -- one engine actor as a ``Rollout``; a dead actor (``RayActorError``) turns
  into ``EngineCrashed``, which the ``EnginePool`` handles: the engine's requests fail (the
  controller aborts their units), a replacement actor starts, loads the current weights, and
  serves.
* ``RayRollout`` -- the ``EnginePool`` of engine actors. Weights go through the object store:
  ``load_weights`` receives a ``RayWeights`` (a reference the trainer put) or a directory (read
  and put once), and every engine actor gets the same reference.
* ``RayTrainer`` -- the trainer actor as a ``Trainer``.
* ``RayBackend.start`` -- joins or starts the cluster, starts the actors with the resources the
  config declares, and ``close`` stops them (and a cluster it started).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from ..rollout.base import GenerationRequest, Segment
from ..rollout.env import COMMON, CPU, cpu_build
from ..rollout.pool import EngineCrashed, EnginePool
from .loopback import pin as pin_loopback
from .actors import EngineActor, TrainerActor
from .preflight import check_cluster
from .refs import RayWeights, actor_options

ROOT = Path(__file__).resolve().parents[2]


def placeable(options: dict[str, Any]) -> str | None:
    """The address of a live node whose total resources hold one actor with these ``.options``
    (None: none does, so Ray would leave the actor pending until such a node joins)."""
    need = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0),
            "memory": options.get("memory", 0), **options.get("resources", {})}
    for node in ray.nodes():
        have = node.get("Resources", {})
        if node.get("Alive") and all(have.get(k, 0) >= v for k, v in need.items() if v):
            return node["NodeManagerAddress"]
    return None


class ActorEngine:
    """One ``EngineActor`` behind the ``Rollout`` protocol."""

    def __init__(self, handle: Any, tokenizer: Any, index: int) -> None:
        self.handle, self.tokenizer, self.index = handle, tokenizer, index

    async def _call(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self.handle, method).remote(*args)
        except RayActorError as exc:
            raise EngineCrashed(f"engine actor {self.index} is gone: {exc}") from exc

    async def generate(self, request: GenerationRequest) -> Segment:
        return await self._call("generate", request)

    async def abort(self, request_ids: Any) -> None:
        await self._call("abort", list(request_ids))

    async def pause(self, mode: str = "abort") -> None:
        await self._call("pause", mode)

    async def resume(self) -> None:
        await self._call("resume")

    async def load_weights(self, weights: RayWeights, version: int | None = None) -> None:
        await self._call("load_weights", weights.version, weights.ref, version)

    async def close(self) -> None:
        try:
            await self.handle.close.remote()
        except RayActorError:
            pass
        ray.kill(self.handle)


class RayRollout(EnginePool):
    """The engine actors as one pool; directories of weights are put in the store once."""

    async def load_weights(self, weights: Any, version: int | None = None) -> None:
        if not isinstance(weights, RayWeights):
            blob = (Path(weights) / "model.safetensors").read_bytes()
            import hashlib

            weights = RayWeights(-1, ray.put(blob), hashlib.sha256(blob).hexdigest()[:16])
        await super().load_weights(weights, version)


class RayTrainer:
    """The trainer actor behind the ``Trainer`` protocol."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.steps = 0

    async def train_step(self, batch: Any) -> dict[str, float]:
        metrics, self.steps = await self.handle.train_step.remote(batch)
        return metrics

    async def accumulate(self, chunk: Any) -> None:
        await self.handle.accumulate.remote(chunk)

    async def finish_step(self, batch: Any) -> dict[str, float]:
        metrics, self.steps = await self.handle.finish_step.remote(batch)
        return metrics

    async def export_weights(self, version: int) -> RayWeights:
        ref, digest = await self.handle.export.remote(version)
        return RayWeights(version, ref, digest)

    async def save_checkpoint(self, path: Path) -> None:
        self.steps = await self.handle.save_checkpoint.remote(str(path))

    async def load_checkpoint(self, path: Path) -> None:
        self.steps = await self.handle.load_checkpoint.remote(str(path))


def _env() -> dict[str, str]:
    """What every actor process needs: vLLM's settings (as ``rollout.env`` sets them for an
    in-process run) and this project on the import path."""
    env = dict(COMMON)
    if cpu_build():
        env.update(CPU)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                        if p)
    return env


class RayBackend:
    def __init__(self, rollout: RayRollout, trainer: RayTrainer, trainer_handle: Any,
                 owns_cluster: bool) -> None:
        self.rollout, self.trainer = rollout, trainer
        self.trainer_handle = trainer_handle
        self.owns_cluster = owns_cluster

    @classmethod
    async def start(cls, cfg: Any, model_path: Path, out_dir: Path) -> RayBackend:
        owns = False
        if not ray.is_initialized():
            r = cfg.ray
            if r.address is None:  # a cluster of our own: on 127.0.0.1 only
                pin_loopback()
            ray.init(address=r.address, num_cpus=r.num_cpus if r.address is None else None,
                     include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": _env()})
            owns = r.address is None
        try:
            check_cluster(cfg)  # before any actor is queued: Ray would wait for ever
            return await cls._start_actors(cfg, model_path, out_dir, owns)
        except BaseException:
            if owns:
                ray.shutdown()
            raise

    @classmethod
    async def _start_actors(cls, cfg: Any, model_path: Path, out_dir: Path,
                            owns: bool) -> RayBackend:
        r = cfg.rollout
        spec = {"backend": r.backend, "model": str(model_path), "seed": cfg.run.seed,
                "fake_token_s": r.fake_token_s, "max_tokens": r.max_tokens,
                "engine_args": dict(max_model_len=r.max_model_len, max_num_seqs=r.max_num_seqs,
                                    dtype=r.dtype, seed=cfg.run.seed, kv_cache_gib=r.kv_cache_gib,
                                    gpu_memory_utilization=r.gpu_memory_utilization,
                                    extra=r.engine_args)}
        if r.backend == "fake":
            from ..rollout.fake import CharTokenizer

            tokenizer: Any = CharTokenizer()
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        options = actor_options(cfg.ray.engine_resources)
        restarts_left = [cfg.ray.max_engine_restarts]

        async def new_engine(index: int) -> ActorEngine:
            handle = EngineActor.options(**options).remote(spec)  # type: ignore[attr-defined]
            await handle.start.remote()
            return ActorEngine(handle, tokenizer, index)

        async def restart(index: int) -> ActorEngine:
            if restarts_left[0] <= 0:
                raise RuntimeError("ray.max_engine_restarts is used up")
            if placeable(options) is None:  # Ray would keep the actor pending, the run waiting forever
                raise RuntimeError(
                    f"no live Ray node has the resources of an engine "
                    f"(ray.engine_resources={dict(cfg.ray.engine_resources)}): the node that "
                    f"ran engine {index} is gone; add a node with them and continue the run "
                    f"with --resume")
            restarts_left[0] -= 1
            return await new_engine(index)

        engines = await asyncio.gather(*(new_engine(i) for i in range(r.engines)))
        if cfg.trainer.sharded:  # the ranks as actors in a placement group (ranks.py)
            from .ranks import RayShardedTrainer

            rollout = RayRollout(engines, restart)
            try:
                sharded = await asyncio.to_thread(
                    RayShardedTrainer, model_path, cfg.trainer, out_dir, r.temperature,
                    cfg.run.seed, cfg.run.keep_weights, cfg.run.steps,
                    dict(cfg.ray.trainer_resources), cfg.ray.trainer_placement)
            except BaseException:
                await rollout.close()
                raise
            return cls(rollout, sharded, None, owns)
        trainer_handle = TrainerActor.options(  # type: ignore[attr-defined]
            **actor_options(cfg.ray.trainer_resources)).remote(
            str(model_path), cfg.trainer, str(out_dir), r.temperature, cfg.run.seed,
            cfg.run.keep_weights, cfg.run.steps)
        await trainer_handle.steps.remote()  # wait until the model is loaded
        return cls(RayRollout(engines, restart), RayTrainer(trainer_handle), trainer_handle,
                   owns)

    async def close(self) -> None:
        await self.rollout.close()
        if self.trainer_handle is not None:
            ray.kill(self.trainer_handle)
        else:  # the sharded trainer's rank actors
            await asyncio.to_thread(self.trainer.close)
        if self.owns_cluster:
            ray.shutdown()
