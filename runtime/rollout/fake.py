"""A scripted engine on a ``Clock``, for the driver's unit tests only (never for integration).

Each request's fate comes from ``script(request, version)``: how long it takes, which tokens it
returns and how it ends, or an exception to raise, or ``math.inf`` to hang until aborted. Tokens
arrive evenly over the request's duration, so an abort (or a pause) part-way returns the tokens
"generated" so far, as a real engine does. A ``"keep"`` pause freezes a request's clock instead:
it continues after the resume, its later tokens attributed to the weights loaded meanwhile
(``Segment.refits``; their logprobs are the new version's). Everything it saw is recorded for
assertions.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..clock import Clock
from .base import GenerationRequest, Segment, check_refit_mode, token_versions

DIGITS = "0123456789"


class CharTokenizer:
    """Digits are ids 0-9; ``+``, ``=`` are 10, 11; 12 is the end token."""

    eos_token_id = 12
    _chars = DIGITS + "+="

    def encode(self, text: str) -> list[int]:
        return [self._chars.index(ch) for ch in text]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(self._chars[t] for t in token_ids if t != self.eos_token_id)


@dataclass
class Plan:
    duration: float  # seconds for the whole request (math.inf: hang until aborted)
    token_ids: list[int]
    finish_reason: str = "stop"
    error: BaseException | None = None  # raised at the end of ``duration`` instead


def random_script(seed: int = 0, per_token_s: float = 0.01, max_len: int = 6,
                  long_tail: float = 0.0) -> Callable[[GenerationRequest, int], Plan]:
    """Random lengths 1..max_len (capped by the request), seeded by the request id; with
    probability ``long_tail`` a request takes 20x longer (a straggler)."""

    def script(request: GenerationRequest, version: int) -> Plan:
        rng = random.Random(f"{seed}/{request.request_id}")
        n = min(rng.randint(1, max_len), request.max_tokens)
        tokens = [rng.randrange(10) for _ in range(n)]
        if n < request.max_tokens:
            tokens.append(CharTokenizer.eos_token_id)
        slow = 20.0 if rng.random() < long_tail else 1.0
        return Plan(per_token_s * len(tokens) * slow, tokens,
                    "stop" if n < request.max_tokens else "length")

    return script


@dataclass
class _Active:
    request: GenerationRequest
    plan: Plan
    started: float
    aborted: asyncio.Event = field(default_factory=asyncio.Event)
    ran: float = 0.0  # seconds generated before the current run (keep pauses freeze it)
    run_start: float = 0.0  # when the current run began
    frozen: asyncio.Event = field(default_factory=asyncio.Event)  # a keep pause reached it
    frozen_version: int = 0  # the weights it ran with when frozen

    def produced(self, elapsed: float) -> int:
        """Tokens made after ``elapsed`` seconds of generating."""
        n, d = len(self.plan.token_ids), self.plan.duration
        if math.isinf(d):
            return 0
        return min(n, int(n * elapsed / d)) if d > 0 else n


class FakeRollout:
    def __init__(self, clock: Clock, script: Callable[[GenerationRequest, int], Plan]) -> None:
        self.clock, self.script = clock, script
        self.tokenizer = CharTokenizer()
        self.version = 0
        self.paused = False
        self._active: dict[str, _Active] = {}
        self.requests: list[tuple[float, int, GenerationRequest]] = []  # (t, version, request)
        self.aborted: list[tuple[float, str]] = []
        self.loaded: list[tuple[float, Path]] = []
        self.pauses = 0
        self.pause_modes: list[str] = []
        self.kept: list[tuple[float, str, int]] = []  # (t, request, tokens) frozen by a keep
        self._resumed = asyncio.Event()

    @property
    def active(self) -> list[str]:
        return list(self._active)

    async def generate(self, request: GenerationRequest) -> Segment:
        if self.paused:
            return Segment(finish_reason="abort")
        self.requests.append((self.clock.now(), self.version, request))
        plan = self.script(request, self.version)
        act = _Active(request, plan, self.clock.now())
        self._active[request.request_id] = act
        start_version = self.version
        refits: list[tuple[int, int]] = []
        try:
            while True:
                act.run_start = self.clock.now()
                sleeper = asyncio.ensure_future(self.clock.sleep(plan.duration - act.ran))
                waiter = asyncio.ensure_future(act.aborted.wait())
                freezer = asyncio.ensure_future(act.frozen.wait())
                try:
                    await asyncio.wait({sleeper, waiter, freezer},
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for t in (sleeper, waiter, freezer):
                        t.cancel()
                if not act.frozen.is_set():  # (a keep pause added its part of the run)
                    act.ran += self.clock.now() - act.run_start
                if act.aborted.is_set() or not act.frozen.is_set():
                    break
                # a keep pause: frozen until the resume, then on the weights loaded meanwhile
                resumed = asyncio.ensure_future(self._resumed.wait())
                try:
                    await asyncio.wait({resumed, waiter := asyncio.ensure_future(
                        act.aborted.wait())}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    resumed.cancel()
                    waiter.cancel()
                act.frozen.clear()
                if self.version != act.frozen_version and not act.aborted.is_set():
                    refits.append((act.produced(act.ran), self.version))
                if act.aborted.is_set():
                    break
        finally:
            del self._active[request.request_id]
        n = len(plan.token_ids)
        if act.aborted.is_set():
            n = act.produced(act.ran)
            finish = "abort"
        elif plan.error is not None:
            raise plan.error
        else:
            finish = plan.finish_reason
        tokens = plan.token_ids[:n]
        refits = [(i, v) for i, v in refits if i <= n]
        seg = Segment(tokens, [], finish, refits)
        seg.logprobs = [-0.5 - 0.1 * v for v in token_versions(start_version, seg)]
        return seg

    async def abort(self, request_ids: Sequence[str]) -> None:
        for rid in request_ids:
            act = self._active.get(rid)
            if act is not None and not act.aborted.is_set():
                self.aborted.append((self.clock.now(), rid))
                act.aborted.set()

    async def pause(self, mode: str = "abort") -> None:
        check_refit_mode(mode)
        self.paused = True
        self.pauses += 1
        self.pause_modes.append(mode)
        self._resumed.clear()
        now = self.clock.now()
        for act in self._active.values():
            if mode != "keep":
                act.aborted.set()
            elif not act.frozen.is_set():  # frozen where it is now
                act.ran += now - act.run_start
                act.frozen_version = self.version
                act.frozen.set()
                self.kept.append((now, act.request.request_id, act.produced(act.ran)))

    async def load_weights(self, path: Path, version: int | None = None) -> None:
        if not self.paused:
            raise RuntimeError("load_weights outside pause")
        self.loaded.append((self.clock.now(), path))
        self.version = self.version + 1 if version is None else version

    async def resume(self) -> None:
        self.paused = False
        self._resumed.set()

    async def close(self) -> None:
        pass


class FakeTrainer:
    """Takes ``train_s`` of clock time per step and records the batches it saw. Streaming
    (``accumulate``/``finish_step``): ``train_s`` is shared out per group, so a chunk of k of
    a batch's B groups takes k / B of it, plus ``step_s`` for the optimiser step at the end;
    ``chunks`` records the unit ids of every chunk."""

    def __init__(self, clock: Clock, train_s: float = 0.05, step_s: float = 0.0,
                 batch_size: int | None = None) -> None:
        self.clock, self.train_s, self.step_s = clock, train_s, step_s
        self.batch_size = batch_size  # B for the per-group share (None: the batch's own size)
        self.batches: list[Any] = []
        self.chunks: list[tuple[Any, ...]] = []
        self.version = 0
        self._pending: list[Any] = []

    def _share(self, groups: int) -> float:
        return self.train_s * groups / (self.batch_size or max(groups, 1))

    async def accumulate(self, chunk: Any) -> None:
        ids = [g.unit_id for g in chunk.groups]
        if any(u in self._pending for u in ids):
            raise AssertionError(f"units {ids} accumulated twice")
        self.chunks.append(tuple(ids))
        self._pending += ids
        await self.clock.sleep(self._share(len(ids)))

    async def finish_step(self, batch: Any) -> dict[str, float]:
        ids = [g.unit_id for g in batch.groups]
        if not set(self._pending) <= set(ids):
            raise AssertionError(f"accumulated {self._pending}, not all in batch {ids}")
        rest = [u for u in ids if u not in self._pending]
        streamed = len(self._pending)
        self._pending = []
        self.batches.append(batch)
        await self.clock.sleep(self._share(len(rest)) + self.step_s)
        return {"loss": 0.0, "streamed_units": float(streamed)}

    async def train_step(self, batch: Any) -> dict[str, float]:
        self.batches.append(batch)
        await self.clock.sleep(self.train_s)
        return {"loss": 0.0}

    async def export_weights(self, version: int) -> Path:
        self.version = version
        return Path(f"fake-weights/v{version}")

    async def save_checkpoint(self, path: Path) -> None:
        pass

    async def load_checkpoint(self, path: Path) -> None:
        pass
