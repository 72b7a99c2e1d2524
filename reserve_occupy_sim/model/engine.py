"""One rollout instance: a continuous-batching engine advanced in closed form between events.

Theory of operation
-------------------
Between two events (a request joins or leaves, a weight update pauses or resumes the engine) the
set of running requests is fixed, so every decode step adds one token to each of the ``k``
running requests and the context sum grows by ``k`` per step. Step ``x`` (counted from the last
event) therefore costs ``max(F, alpha + beta*x)`` with ``alpha = a + b*k + c*ctx0`` and
``beta = c*k``. We treat decode progress ``x`` as continuous and integrate that cost exactly:

    T(u) = integral_0^u max(F, alpha + beta*x) dx          (piecewise: flat, then linear)

and invert it with the quadratic formula to get the steps done in ``dt`` seconds. Continuous
progress differs from a step-by-step count by less than one step per event; tokens are whole
when a request completes because a completion is scheduled at exactly its finishing progress.

``progress`` is the instance's cumulative decode progress. A request that joined at progress
``p0`` has produced ``progress - p0`` tokens and finishes at ``p0 + length``, so one heap keyed on
finishing progress gives the next completion, and advancing the instance touches no request.
Prefill (of a joining prompt, or of every running context after a weight update) is modelled as
``stall`` seconds during which the instance does not decode.
"""

from __future__ import annotations

import heapq
import math

from .cost import RolloutCost

INF = math.inf


class Request:
    """One trajectory (a member of a GRPO group) as the engine and the ledger see it."""

    __slots__ = ("tid", "group", "index", "length", "prompt", "state", "instance", "join",
                 "tokens", "t_start", "t_end", "v_start")

    QUEUED, RUNNING, FINISHED, ABORTED = 0, 1, 2, 3

    def __init__(self, tid: int, group: object, index: int, length: int, prompt: int) -> None:
        self.tid = tid
        self.group = group
        self.index = index
        self.length = length
        self.prompt = prompt
        self.state = Request.QUEUED
        self.instance: Instance | None = None
        self.join = 0.0  # instance progress when it started decoding
        self.tokens = 0.0  # response tokens produced (set when it leaves the engine)
        self.t_start = math.nan
        self.t_end = math.nan
        self.v_start = -1  # weight version of its first decode step


class Instance:
    """A rollout instance with at most ``capacity`` running requests."""

    def __init__(self, index: int, cost: RolloutCost, capacity: int) -> None:
        self.index = index
        self.cost = cost
        self.capacity = capacity
        self.t = 0.0  # time up to which the state below is advanced
        self.progress = 0.0
        self.stall = 0.0
        self.paused = False
        self.slow = 1.0  # decode steps take this times as long (1 + train_slowdown: training)
        self.k = 0
        self.ctx_base = 0.0  # context sum = ctx_base + k * progress
        self._heap: list[tuple[float, int, Request]] = []
        # The indexes of the instances whose next completion may have moved (a request joined
        # or left, a pause, a resume), shared by a simulator's instances (``core.Simulator``
        # keeps its earliest-event search to them); None for a lone instance. ``advance``
        # changes no instance's next completion time, so it touches nothing.
        self.touched: set[int] | None = None
        # statistics
        self.decoded = 0.0  # response tokens produced
        self.slot_time = 0.0  # integral of k dt (slots in use), pauses excluded
        self.idle_time = 0.0  # time with no running request, not paused
        self.paused_time = 0.0
        self.prefill_time = 0.0

    # ----------------------------------------------------------------- closed form -------

    def _coeffs(self) -> tuple[float, float, float]:
        c = self.cost
        ctx = self.ctx_base + self.k * self.progress
        m = self.slow
        alpha = c.step_s + c.per_request_s * self.k + c.per_ctx_token_s * ctx
        return m * c.floor_s, m * alpha, m * c.per_ctx_token_s * self.k

    def time_for(self, u: float) -> float:
        """Seconds of decoding needed to advance progress by ``u`` steps from now."""
        if u <= 0.0:
            return 0.0
        floor, alpha, beta = self._coeffs()
        if alpha >= floor:
            return alpha * u + 0.5 * beta * u * u
        if beta <= 0.0:
            return floor * u
        x0 = (floor - alpha) / beta  # steps until the linear term overtakes the floor
        if u <= x0:
            return floor * u
        return floor * x0 + alpha * (u - x0) + 0.5 * beta * (u * u - x0 * x0)

    def steps_in(self, dt: float) -> float:
        """Decode progress made in ``dt`` seconds of decoding (inverse of ``time_for``)."""
        if dt <= 0.0:
            return 0.0
        # _coeffs() inlined (the simulator calls this once per instance per event)
        c, k, m = self.cost, self.k, self.slow
        ctx = self.ctx_base + k * self.progress
        floor = m * c.floor_s
        alpha = m * (c.step_s + c.per_request_s * k + c.per_ctx_token_s * ctx)
        beta = m * c.per_ctx_token_s * k
        if alpha >= floor:
            x0, slope, rest = 0.0, alpha, dt
        else:
            if beta <= 0.0:
                return dt / floor
            x0 = (floor - alpha) / beta
            if dt <= floor * x0:
                return dt / floor
            slope, rest = floor, dt - floor * x0
        if beta <= 0.0:
            return x0 + rest / slope
        # slope*w + beta/2*w^2 = rest, written to avoid cancellation
        return x0 + 2.0 * rest / (slope + math.sqrt(slope * slope + 2.0 * beta * rest))

    # ----------------------------------------------------------------- time -----------------

    def advance(self, t: float) -> None:
        """Bring the instance's state forward to time ``t``."""
        dt = t - self.t
        if dt <= 0.0:
            return
        self.t = t
        if self.paused:
            self.paused_time += dt
            return
        if self.k == 0:
            self.idle_time += dt
            self.stall = max(0.0, self.stall - dt)
            return
        k = self.k
        self.slot_time += k * dt
        stall = self.stall
        if stall > 0.0:
            s = min(stall, dt)
            self.stall = stall - s
            self.prefill_time += s
            dt -= s
            if dt <= 0.0:
                return
        u = self.steps_in(dt)
        self.progress += u
        self.decoded += k * u

    def next_event(self) -> float:
        """Time of the next completion on this instance (inf if none can happen)."""
        if self.paused or self.k == 0:
            return INF
        heap = self._heap
        while heap[0][2].instance is not self or heap[0][2].state != Request.RUNNING:
            heapq.heappop(heap)  # lazily dropped (aborted) entries
        return self.t + self.stall + self.time_for(heap[0][0] - self.progress)

    def finish_due(self, snap: bool) -> list[Request]:
        """Remove and return the requests that have finished by now. ``snap`` means this
        instance's own completion is due now: land progress exactly on it (float round-off)."""
        heap = self._heap
        done: list[Request] = []
        while heap:
            finish, _, req = heap[0]
            if req.instance is not self or req.state != Request.RUNNING:
                heapq.heappop(heap)
                continue
            if snap and not done and finish > self.progress:
                self.decoded += self.k * (finish - self.progress)
                self.progress = finish
                self._touch()
            if finish > self.progress + 1e-6:
                break
            heapq.heappop(heap)
            self._leave(req)
            req.tokens = float(req.length)
            req.state = Request.FINISHED
            done.append(req)
        return done

    # ----------------------------------------------------------------- membership ----------

    def free(self) -> int:
        return self.capacity - self.k

    def _touch(self) -> None:
        if self.touched is not None:
            self.touched.add(self.index)

    def join(self, req: Request, now: float, seq: int) -> None:
        req.instance = self
        req.join = self.progress
        req.state = Request.RUNNING
        req.t_start = now
        self.k += 1
        self.ctx_base += req.prompt - self.progress
        self.stall += self.cost.prefill_per_token_s * req.prompt
        heapq.heappush(self._heap, (self.progress + req.length, seq, req))
        self._touch()

    def _leave(self, req: Request) -> None:
        self.k -= 1
        self.ctx_base -= req.prompt - req.join
        if self.k == 0:
            self.ctx_base = 0.0  # drop accumulated round-off
        self._touch()

    def remove(self, req: Request) -> float:
        """Take a running request out (aborted); return the response tokens it had produced."""
        self._leave(req)
        req.state = Request.ABORTED
        return min(float(req.length), self.progress - req.join)

    def context(self) -> float:
        return self.ctx_base + self.k * self.progress

    def pause(self) -> None:
        self.paused = True
        self._touch()

    def resume(self, reprefill: bool) -> None:
        """Weights swapped: running requests keep their tokens; re-prefill their contexts."""
        self.paused = False
        if reprefill and self.k:
            self.stall += self.cost.prefill_per_token_s * self.context()
        self._touch()
