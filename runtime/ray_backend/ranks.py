"""The sharded trainer's ranks as Ray actors (``run.backend: ray`` with ``trainer.world_size``
> 1): one ``RankActor`` per rank in one placement group (a bundle of ``ray.trainer_resources``
per rank, strategy ``ray.trainer_placement``), each running the same rank code as the local
sharded trainer (``runtime.trainer.rank.main``), so the update is the same one.

Rendezvous: rank 0's actor hosts the ``TCPStore`` on its node's address (127.0.0.1 on a
loopback cluster, every test's), on a port its system picks; every rank joins it and
torch.distributed (gloo on CPU) forms the group. Commands travel as actor calls: each actor
hands them to ``rank.main``, which runs in a thread of the actor's process, through a pair of
queues that stand in for the local trainer's pipe.

``RayShardedTrainer`` is the driver's side, with ``RayTrainer``'s interface (the driver cannot
tell the difference). A rank actor that dies (Ray reports ``RayActorError``) fails the call
with one line naming the rank, as the local trainer's process sentinel does; the other rank
actors are killed and the trainer refuses every later call. Exported weights are put in the
object store by rank 0's actor, like the single trainer actor's.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import ray
from ray.exceptions import RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..trainer.sharded import (
    RankLost,
    _first_line,
    answer_values,
    fatal_answer,
    output_error,
    stop_and_raise,
    write_on_ranks,
)
from .refs import RayWeights, actor_options
from .preflight import bundle

if TYPE_CHECKING:
    from ..config.schema import TrainerConfig


_PLACE_S = 120.0  # how long the placement group may take to be placed (preflight checked it)
_STOP_S = 10.0  # how long stopping waits for the killed rank actors to be gone



# Ray shows a rank actor only the GPU of its bundle (CUDA_VISIBLE_DEVICES): its cuda:0
RAY_CUDA_INDEX = 0

class _QueueConn:
    """The two ends of a pipe, as ``rank.main`` uses its connection (``send``, ``recv``)."""

    def __init__(self) -> None:
        self.inbox: queue.Queue = queue.Queue()
        self.outbox: queue.Queue = queue.Queue()

    def send(self, obj: Any) -> None:
        self.outbox.put(obj)

    def recv(self) -> Any:
        obj = self.inbox.get()
        if obj is None:
            raise EOFError
        return obj


@ray.remote
class RankActor:
    """One rank of the sharded trainer; ``rank.main`` runs in a thread of this process."""

    def __init__(self, rank: int) -> None:
        from ..rollout.env import configure

        configure()
        self.rank = rank
        self.conn = _QueueConn()
        self.store: Any = None

    def host_store(self) -> tuple[str, int]:
        """Rank 0: host the rendezvous on this node's address; returns (address, port)."""
        import torch.distributed as dist

        addr = ray.util.get_node_ip_address()
        self.store = dist.TCPStore(addr, 0, is_master=True, wait_for_workers=False)
        return addr, self.store.port

    def node(self) -> tuple[str, str, int, str | None]:
        """(node id, node address, pid, placement group id): where this rank runs."""
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ray.util.get_node_ip_address(), os.getpid(), \
            ctx.get_placement_group_id()

    def start(self, world: int, addr: str, port: int, spec: dict[str, Any]) -> tuple:
        from ..trainer import rank as rank_module

        spec = {**spec, "master_addr": addr, "cuda_index": RAY_CUDA_INDEX}
        threading.Thread(target=rank_module.main, args=(self.rank, world, port, self.conn,
                                                        spec),
                         name=f"ro-trainer-rank{self.rank}", daemon=True).start()
        return self.conn.outbox.get()

    def call(self, message: tuple[str, tuple]) -> tuple:
        self.conn.inbox.put(message)
        return self.conn.outbox.get()

    def export(self, version: int) -> tuple:
        """``export``; rank 0 also puts the weights in the object store: (answer, [ref,
        digest])."""
        answer = self.call(("export", (version,)))
        if answer[0] != "ok" or self.rank != 0:
            return answer, None
        blob = (Path(answer[1]) / "model.safetensors").read_bytes()
        return answer, [ray.put(blob), hashlib.sha256(blob).hexdigest()[:16]]


def _wait_gone(pids: list[int]) -> None:
    """Wait, up to ``_STOP_S``, until the rank actors' processes on this node are gone:
    ``ray.kill`` returns before the process has ended (measured: 0.01-0.2 s later), and the
    driver then removes what a failed save or export left (``sharded.write_on_ranks``), which
    a rank still alive could write into again. A process counts as the rank's while its title
    is the actor's (``ray::RankActor``), so a pid reused by another process, or one on another
    node, is not waited for; there a leftover is left to ``--resume`` (``checkpoints/``)."""
    import time

    deadline = time.monotonic() + _STOP_S
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read()
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:  # gone (or no /proc: nothing to wait with)
                break
            if not title.startswith(b"ray::RankActor") or \
                    stat[stat.rfind(b")") + 2:].split()[0] == b"Z":
                break
            time.sleep(0.01)


class RayShardedTrainer:
    """The rank actors behind the ``Trainer`` protocol (``RayTrainer``'s, for a sharded run)."""

    def __init__(self, model_path: str | Path, settings: TrainerConfig, out_dir: str | Path,
                 temperature: float, seed: int, keep_weights: int, total_steps: int | None,
                 resources: dict[str, float], strategy: str = "STRICT_PACK",
                 rank_class: str = "runtime.trainer.rank:RankTrainer") -> None:
        """Place ``settings.world_size`` rank actors, rendezvous, load and shard the model;
        raises ``RankLost`` if a rank fails to start."""
        self.world = int(settings.world_size)
        self.out_dir = Path(out_dir)
        self.steps = 0
        self._broken: str | None = None
        self.strategy = strategy
        self.pg = placement_group([bundle(resources)] * self.world, strategy=strategy)
        self.handles: list[Any] = []
        try:
            ray.get(self.pg.ready(), timeout=_PLACE_S)
            opts = actor_options(resources)
            self.handles = [RankActor.options(  # type: ignore[attr-defined]
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.pg, placement_group_bundle_index=r), **opts).remote(r)
                for r in range(self.world)]
            addr, port = ray.get(self.handles[0].host_store.remote())
            self.master = addr
            spec = {"model_path": str(model_path), "settings": settings,
                    "out_dir": str(out_dir), "temperature": temperature, "seed": seed,
                    "keep_weights": keep_weights, "total_steps": total_steps,
                    "timeout_s": float(settings.collective_timeout_s), "rank_class": rank_class}
            # each rank answers ("ok", pid), as to the local trainer: the pids alone
            self.pids = [a[1] for a in self._gather(
                [h.start.remote(self.world, addr, port, spec) for h in self.handles],
                "starting", startup=True)]
        except BaseException:
            self._stop()
            raise

    def placement(self) -> list[tuple[str, str, int, str | None]]:
        """Each rank's (node id, node address, pid, placement group id)."""
        return ray.get([h.node.remote() for h in self.handles])

    def _gather(self, refs: list[Any], what: str, startup: bool = False) -> list[Any]:
        """The answers of every rank, in rank order; a rank actor that dies raises ``RankLost``
        at once, naming it."""
        answers: dict[int, Any] = {}
        index = {ref: r for r, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            r = index[ready[0]]
            try:
                answer = answers[r] = ray.get(ready[0])
            except RayActorError as exc:
                self._fail(f"trainer rank {r} (Ray actor) died while {what}: "
                           f"{_first_line(str(exc), 200)}")
            a = answer[0] if isinstance(answer[0], tuple) else answer
            reason = fatal_answer(r, a, startup, [s for s in range(self.world)
                                                  if s not in answers])
            if reason is not None:
                self._fail(reason, output_error(a))
        return [answers[r] for r in range(self.world)]

    def _unwrap(self, answers: list[tuple]) -> list[Any]:
        return answer_values(answers, self._fail)

    def _run(self, cmd: str, *args: Any) -> Any:
        if self._broken is not None:
            raise RankLost(f"the sharded trainer is stopped: {self._broken}")
        answers = self._gather([h.call.remote((cmd, args)) for h in self.handles],
                               f"in '{cmd}'")
        return self._unwrap(answers)[0]

    def _fail(self, reason: str, cause: OSError | None = None) -> NoReturn:
        """As ``ShardedTrainer._fail``: stop the ranks, raise ``RankLost`` or the rank's
        output error (a full disk): ``sharded.stop_and_raise``."""
        stop_and_raise(self, reason, cause)

    def _stop(self) -> None:
        for h in self.handles:
            try:
                ray.kill(h)
            except Exception:  # noqa: BLE001 - already gone
                pass
        _wait_gone(getattr(self, "pids", []))
        try:
            remove_placement_group(self.pg)
        except Exception:  # noqa: BLE001 - already removed
            pass

    def close(self) -> None:
        if self._broken is None:
            self._broken = "closed"
            refs = [h.call.remote(("close", ())) for h in self.handles]
            ray.wait(refs, num_returns=len(refs), timeout=10.0)
        self._stop()

    # ------------------------------------------------------------------ the Trainer --------

    async def _async(self, fn: Any, *args: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(fn, *args)

    def _train(self, batch: Any) -> dict[str, float]:
        metrics, self.steps = self._run("train", batch)
        return metrics

    def _finish(self, batch: Any) -> dict[str, float]:
        metrics, self.steps = self._run("finish", batch)
        return metrics

    def _export(self, version: int) -> RayWeights:
        if self._broken is not None:
            raise RankLost(f"the sharded trainer is stopped: {self._broken}")

        def run() -> list[Any]:
            answers = self._gather([h.export.remote(version) for h in self.handles],
                                   "in 'export'")
            self._unwrap([a for a, _ in answers])
            return answers

        # a failed export leaves no temporary directory (as the local ranks)
        answers = write_on_ranks(self, self.out_dir / "weights" / f"v{version}", run)
        ref, digest = answers[0][1]
        return RayWeights(version, ref, digest)

    def _set_steps(self, cmd: str, path: Path) -> None:
        if cmd == "save":  # a failed save leaves no temporary directory (as the local ranks)
            self.steps = write_on_ranks(self, path, lambda: self._run(cmd, str(path)))
        else:
            self.steps = self._run(cmd, str(path))

    async def train_step(self, batch: Any) -> dict[str, float]:
        return await self._async(self._train, batch)

    async def accumulate(self, chunk: Any) -> None:
        await self._async(self._run, "accumulate", chunk)

    async def finish_step(self, batch: Any) -> dict[str, float]:
        return await self._async(self._finish, batch)

    async def export_weights(self, version: int) -> RayWeights:
        return await self._async(self._export, version)

    async def save_checkpoint(self, path: Path) -> None:
        await self._async(self._set_steps, "save", Path(path))

    async def load_checkpoint(self, path: Path) -> None:
        await self._async(self._set_steps, "load", Path(path))
