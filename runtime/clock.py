"""Time for the driver: every time-dependent decision (timeouts, idle accounting, tokens/s)
reads ``Clock.now`` and waits with ``Clock.sleep``, never ``time`` or ``asyncio.sleep`` directly.

``MonotonicClock`` is real time. ``VirtualClock`` is simulated time for deterministic tests and
seeded fault injection: ``sleep`` parks the caller on a heap of deadlines, and ``run`` advances
time to the earliest deadline whenever the event loop has nothing else ready to run. A fake
engine and a fake trainer that take time by sleeping on the same clock then give exactly
reproducible runs in milliseconds, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (the origin is arbitrary)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (<= 0: just yield); cancellable."""
        ...


class MonotonicClock:
    """Real time: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        if math.isinf(seconds):
            await asyncio.get_running_loop().create_future()  # forever, until cancelled
        await asyncio.sleep(max(0.0, seconds))


class VirtualClock:
    """Simulated time that jumps from deadline to deadline.

    Only usable through ``run`` (or with ``advance`` called by hand): time moves when every task
    is blocked, so nothing that should happen "at the same time" is skipped. A task blocked on
    something other than this clock (real I/O) while others sleep would let time run ahead; do
    not mix real engines with a virtual clock.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()  # FIFO among equal deadlines: deterministic wake order

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        if math.isinf(seconds):
            await asyncio.get_running_loop().create_future()  # forever, until cancelled
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (self._now + seconds, next(self._seq), fut))
        await fut

    def advance(self) -> bool:
        """Jump to the earliest pending deadline and wake everything due then. False: none."""
        while self._heap and self._heap[0][2].done():  # cancelled sleepers
            heapq.heappop(self._heap)
        if not self._heap:
            return False
        self._now = max(self._now, self._heap[0][0])
        while self._heap and self._heap[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)
        return True

    def run(self, main: Coroutine[Any, Any, T], settle: int = 1) -> T:
        """Run ``main`` in a fresh event loop, advancing virtual time whenever the loop idles."""
        return asyncio.run(self._drive(main, settle))

    async def _drive(self, main: Awaitable[T], settle: int) -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(main)
        while not task.done():
            # Let every ready callback run first; `_ready` is the loop's run queue (a stable
            # CPython attribute). Without it, fall back to yielding a fixed number of times.
            idle_rounds = 0
            while idle_rounds < settle and not task.done():
                await asyncio.sleep(0)
                ready = getattr(loop, "_ready", None)
                idle_rounds = idle_rounds + 1 if ready is None or not ready else 0
            if task.done():
                break
            if not self.advance():
                # Nothing will ever wake: every task waits on something outside this clock.
                task.cancel()
                raise RuntimeError("VirtualClock: deadlock, every task is blocked and no "
                                   "sleeper is pending")
        return task.result()
