"""An asyncio event loop on simulated time, for tests whose tasks take time by sleeping.

``asyncio.sleep``, ``wait_for`` timeouts and every other timer read ``loop.time()``; here that
is a counter which, whenever no callback is ready and no I/O is pending, jumps straight to the
next timer instead of waiting for it. Tasks then wake in the order of their deadlines whatever
the machine's load, so a test of what happens *in which order* does not depend on how fast the
machine runs it. Only for code that waits on timers and on other tasks, not on threads or real
I/O (time would run ahead of them).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Selector(selectors.BaseSelector):
    """The loop's selector: polls without blocking; a wait for a timer moves time instead."""

    def __init__(self, loop_time: list[float]) -> None:
        self._real = selectors.DefaultSelector()
        self._time = loop_time

    def select(self, timeout: float | None = None) -> list[Any]:
        events = self._real.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:  # nothing scheduled and nothing ready: no task can ever wake
            raise RuntimeError("virtual time: every task waits and no timer is pending")
        self._time[0] += timeout
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> Any:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> Any:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> Any:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual_now = [0.0]
        super().__init__(_Selector(self._virtual_now))

    def time(self) -> float:
        return self._virtual_now[0]


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on simulated time."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
