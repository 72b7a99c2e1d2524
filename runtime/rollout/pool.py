"""Several rollout engines behind one ``Rollout``, surviving the crash of any of them.

``EnginePool`` sends each request to the live engine with the fewest requests running. When an
engine dies (it raises ``EngineCrashed`` or ``RolloutDead``, or, on Ray, its actor is gone), the
pool marks it dead, its running requests fail with ``EngineCrashed`` -- an ordinary request
error, so the driver fails those candidates and the controller aborts their units -- and, when
a ``restart`` factory is given, a replacement is started, paused, loaded with the pool's current
weights (again, if a weight sync happened meanwhile) and only then put back into service. With
no live engine, requests wait for a restart; with no live engine and no way to restart, the pool
raises ``RolloutDead`` and the run stops.

Pausing (in either refit mode, ``"abort"`` or ``"keep"``) and weight loading apply to every
live engine; nothing generates between ``pause`` and ``resume`` on any of them, and each engine
reports the refits inside its own requests' segments, so the driver's per-token versions stay
exact across engines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .base import GenerationRequest, Rollout, RolloutDead, Segment, check_refit_mode


class EngineCrashed(RuntimeError):
    """The engine serving a request died; the request's tokens are lost."""


class EnginePool:
    def __init__(self, engines: Sequence[Rollout],
                 restart: Callable[[int], Awaitable[Rollout]] | None = None,
                 weights: Any = None) -> None:
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines: list[Rollout | None] = list(engines)
        self.tokenizer = engines[0].tokenizer
        self._restart = restart
        self._weights = weights  # what a replacement must load before it serves
        self._version: int | None = None  # ... and the version it is
        self._paused = False
        self._load = [0] * len(engines)
        self._where: dict[str, int] = {}
        # requests waiting for a live engine -> aborted while waiting: an abort must reach a
        # request before it has an engine too, or it would start later and run regardless
        self._waiting: dict[str, bool] = {}
        self._changed = asyncio.Event()
        self._restarts: set[asyncio.Task[Any]] = set()
        self.crashes = 0
        self.restarts = 0
        self.restart_errors: list[str] = []
        self.closed = False

    @property
    def live(self) -> list[int]:
        return [i for i, e in enumerate(self.engines) if e is not None]

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _pick(self, request_id: str) -> int | None:
        """The least-loaded live engine; waits while none is live (a restart is under way).
        None: paused or aborted meanwhile (the request returns empty, as a paused engine's
        would, or an engine's request aborted before it produced anything)."""
        self._waiting[request_id] = False
        try:
            while True:
                if self._paused or self._waiting[request_id]:
                    return None
                live = self.live
                if live:
                    return min(live, key=lambda i: (self._load[i], i))
                if not self._restarts:
                    why = f" ({'; '.join(self.restart_errors)})" if self.restart_errors else ""
                    raise RolloutDead(f"every engine of the pool is dead and none can be "
                                      f"restarted{why}")
                await self._changed.wait()
        finally:
            del self._waiting[request_id]

    async def generate(self, request: GenerationRequest) -> Segment:
        index = await self._pick(request.request_id)
        if index is None:
            return Segment(finish_reason="abort")
        engine = self.engines[index]
        assert engine is not None
        self._where[request.request_id] = index
        self._load[index] += 1
        try:
            return await engine.generate(request)
        except (EngineCrashed, RolloutDead) as exc:
            self.engine_died(index, engine)
            raise EngineCrashed(f"engine {index} died while serving {request.request_id}: "
                                f"{exc}") from exc
        finally:
            self._load[index] -= 1
            self._where.pop(request.request_id, None)

    def engine_died(self, index: int, engine: Rollout) -> None:
        """Take a dead engine out of service (once) and start its replacement."""
        if self.engines[index] is not engine:
            return  # already replaced
        self.engines[index] = None
        self.crashes += 1
        if self._restart is not None and not self.closed:
            task = asyncio.ensure_future(self._replace(index))
            self._restarts.add(task)
            task.add_done_callback(self._restarts.discard)
        self._wake()

    async def _replace(self, index: int) -> None:
        try:
            engine = await self._restart(index)  # type: ignore[misc]
        except Exception as exc:  # no replacement: the slot stays dead; say why once
            self.restart_errors.append(f"engine {index}: {exc!r}")
            self._wake()
            return
        await engine.pause()
        loaded = None
        while self._weights is not None and loaded is not self._weights:
            loaded = self._weights
            await engine.load_weights(loaded, self._version)
        if self.closed:
            await engine.close()
            return
        if not self._paused:
            await engine.resume()
        self.engines[index] = engine
        self.restarts += 1
        self._wake()

    async def settle(self) -> None:
        """Wait until no replacement is being started: each has joined the pool or failed
        (``restart_errors``). A run can end while a replacement is still loading weights; call
        this before inspecting the pool's engines."""
        while self._restarts:
            await asyncio.gather(*list(self._restarts), return_exceptions=True)

    async def abort(self, request_ids: Sequence[str]) -> None:
        by_engine: dict[int, list[str]] = {}
        woke = False
        for rid in request_ids:
            if rid in self._waiting:
                self._waiting[rid] = woke = True
            elif rid in self._where:
                by_engine.setdefault(self._where[rid], []).append(rid)
        if woke:
            self._wake()
        for index, ids in by_engine.items():
            engine = self.engines[index]
            if engine is not None:
                await engine.abort(ids)

    async def _each(self, op: str, *args: Any) -> None:
        """``op`` on every live engine at once; one that turns out dead is replaced."""

        async def one(index: int, engine: Rollout) -> None:
            try:
                await getattr(engine, op)(*args)
            except (EngineCrashed, RolloutDead):
                self.engine_died(index, engine)

        await asyncio.gather(*(one(i, self.engines[i]) for i in self.live))  # type: ignore

    async def pause(self, mode: str = "abort") -> None:
        check_refit_mode(mode)
        self._paused = True
        self._wake()  # requests waiting for an engine return empty
        await self._each("pause", mode)

    async def load_weights(self, weights: Any, version: int | None = None) -> None:
        self._weights, self._version = weights, version
        await self._each("load_weights", weights, version)

    async def resume(self) -> None:
        self._paused = False
        await self._each("resume")
        self._wake()

    async def close(self) -> None:
        self.closed = True
        for task in list(self._restarts):
            task.cancel()
        await asyncio.gather(*self._restarts, return_exceptions=True)
        for engine in self.engines:
            if engine is not None:
                await engine.close()
