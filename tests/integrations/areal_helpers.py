"""A toy AReaL training loop on CPU: AReaL's real WorkflowExecutor and dispatcher, toy tasks.

The workflow sleeps for a duration given by the task's index (the *task schedule*) and returns
a trajectory recording the weight version it started with; the trainer loop does what AReaL's
trainers do between batches (``prepare_batch``, train, ``pause``, ``set_version(v + 1)``,
``resume``) and measures each trained trajectory's staleness where the batch is trained.
The same schedule runs with AReaL's own staleness manager or with Reserve–Occupy installed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field

import pytest

from . import areal_import  # noqa: E402,F401  (skips without AReaL; keeps asyncio's policy)

from areal.api.cli_args import InferenceEngineConfig  # noqa: E402
from areal.api.workflow_api import RolloutWorkflow  # noqa: E402
from areal.infra.workflow_executor import WorkflowExecutor  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


class ToyEngine:
    """The version provider AReaL's executor reads (``RemoteInfEngine`` without servers)."""

    def __init__(self) -> None:
        self._version = 0
        self.lock = threading.Lock()

    def get_version(self) -> int:
        with self.lock:
            return self._version

    def set_version(self, version: int) -> None:
        with self.lock:
            self._version = version


class SleepWorkflow(RolloutWorkflow):
    """Generation is a sleep of the scheduled length; rejects the scheduled task indexes."""

    def __init__(self, durations, rejected=frozenset()) -> None:
        self.durations = durations
        self.rejected = rejected

    async def arun_episode(self, engine, data):
        i = data["i"]
        v_start = engine.get_version()  # weights at the start: the oldest that generated it
        await asyncio.sleep(self.durations(i))
        if i in self.rejected:
            return None
        return {"i": i, "v_start": v_start}


@dataclass
class Run:
    staleness: list[int] = field(default_factory=list)  # one per trained trajectory
    trained: list[int] = field(default_factory=list)  # task indexes, in training order
    batches: list[list[int]] = field(default_factory=list)
    seconds: float = 0.0
    live: set = field(default_factory=set)  # Reserve–Occupy: units in flight or finished
    events: tuple = ()  # Reserve–Occupy: the controller's event log at the end

    @property
    def max_staleness(self) -> int:
        return max(self.staleness)

    def histogram(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for s in self.staleness:
            out[s] = out.get(s, 0) + 1
        return dict(sorted(out.items()))


def straggler_schedule(every: int = 6, long_s: float = 0.6, short_s: float = 0.01):
    """Task ``i`` takes ``long_s`` when ``i % every == 1`` (a straggler), else ``short_s``."""
    return lambda i: long_s if i % every == 1 else short_s


def run_toy_training(*, reserve_occupy: bool, steps: int, batch_size: int = 4, eta: int = 1,
                     max_concurrent: int | None = None, durations=None, rejected=frozenset(),
                     train_s: float = 0.03) -> Run:
    """``steps`` training steps of AReaL's executor on the toy schedule; returns what trained."""
    durations = durations or straggler_schedule()
    engine = ToyEngine()
    config = InferenceEngineConfig(consumer_batch_size=batch_size, max_head_offpolicyness=eta,
                                   max_concurrent_rollouts=max_concurrent)
    executor = WorkflowExecutor(config, engine)
    executor.initialize(logger=logging.getLogger("toy-areal"), train_data_parallel_size=1)
    manager = None
    if reserve_occupy:
        from reserve_occupy.integrations.areal import install

        manager = install(executor)
    data = [{"i": i} for i in range(100_000)]
    loader = DataLoader(data, batch_size=batch_size, collate_fn=lambda xs: xs, shuffle=False)
    workflow = SleepWorkflow(durations, rejected)
    run = Run()
    t0 = time.perf_counter()
    try:
        for _ in range(steps):
            batch = executor.prepare_batch(loader, workflow)
            version = engine.get_version()
            run.staleness += [version - traj["v_start"] for traj in batch]
            run.batches.append(sorted(traj["i"] for traj in batch))
            run.trained += run.batches[-1]
            time.sleep(train_s)  # the optimizer step
            executor.pause()  # AReaL's weight update: pause, load, bump the version, resume
            engine.set_version(version + 1)
            executor.resume()
    finally:
        run.seconds = time.perf_counter() - t0
        if manager is not None:  # before shutdown cancels (and so aborts) what is in flight
            with manager.lock:
                run.live = {u.unit_id for u in manager.controller.snapshot().units}
                run.events = manager.controller.events
        executor.destroy()
    if manager is not None:
        manager.controller.check()  # every invariant of spec/PROTOCOL.md §4
        run.controller = manager.controller  # type: ignore[attr-defined]
    return run
