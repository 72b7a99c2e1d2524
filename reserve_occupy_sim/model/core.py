"""The discrete-event loop: rollout instances, the request queue, the trainer and the ledger.

Theory of operation
-------------------
Time jumps from event to event: a request completes on an instance, training of a batch ends
(the weight sync starts and rollout pauses), or the sync ends (the new version is published and
rollout resumes, re-prefilling running contexts). Instances advance in closed form between
events (``engine.Instance``). After every event the loop *settles*: queued requests start on
free slots, the policy may admit groups (L1), and an idle trainer asks the policy for a batch (L3).

The policy is the only thing that differs between runs, and it only acts through the methods
marked "policy API" below, the rule API's ``Host`` (``reserve_occupy_peers.api``; the rules
themselves, and ``Policy``, live in that package): ``admit`` (L1: a group's requests join the
FIFO request queue, as in vLLM's waiting queue), ``abort_group`` (L2: stop an in-flight group),
``drop`` (L3: discard finished trajectories), and the batch it returns from ``take_batch``. The
loop never decides admission or placement itself. Rollout mechanics are the same for every policy: a weight update pauses every
instance for the sync, and in-flight requests resume with their tokens (partial rollout).

The ledger records every admission, trained batch, abort, drop and filter without judging them;
the checks in ``checks.py`` judge them afterwards (so that a broken policy is *caught*, not
hidden).

Reward filtering (optional, ``filtering.RewardFilter``): when a group finishes, the simulator
decides -- seeded, by the workload index of the prompt the group rolls out, so every policy sees
the same outcome for the same prompt (its k-th group, for a policy that admits in workload order;
the prompt it chose, for one that admits with ``spec``) -- whether the group carries no gradient
(all rewards equal). ``group.no_grad`` tells the policy,
which either ``filter``s it (it is never trained) or trains it anyway, as its source does.
A policy may also set one timer (``set_timer``); ``on_timer`` is called when it expires (the
Reserve–Occupy timeout of spec §6.2 uses it).

Termination. Every event is a trajectory finishing, a trainer step, or the policy's timer, and a
run ends after ``batches`` publishes. Two detectors turn a run that can no longer get there into
``SimulationStalled`` instead of a loop: (1) the policy's timer expired ``MAX_IDLE_TIMERS`` times
in a row with no trajectory finishing and no trainer step in between (a timeout shorter than any
re-admitted group can finish: it aborts and re-admits forever, and the re-prefills it adds stall
the engines); (2) more than ``max(MAX_EVENTS_PER_BATCH, 1000 * batch_size * candidates)``
events since the last publish (a policy that keeps finishing and discarding work without ever
forming a batch). Either detector bounds the events between two publishes, so every run ends.

Counting groups with a gradient (``useful_groups``, reward filtering): the run ends instead at
the first publish after which that many groups that carry a gradient have been trained, and
``batches`` is the most it may take (``SimulationStalled`` if they do not reach it). A rule that
filters its no-gradient groups trains ``batch_size`` of them per batch, so with ``useful_groups
= batches * batch_size`` its run is the plain run; a rule that trains its no-gradient groups
(zero advantage) takes more batches to get there, and so covers the same prompts of the workload
as one that filters them (``runner.RunSpec.gradient_batches``).

Group-level oversampling (spec §6.5, ``candidates`` > group size): a group's ``candidates``
requests are admitted together; when ``group_size`` of them have finished, those commit as the
group (its ``requests``) and the rest are aborted in the engines (L2 waste, recorded in
``surplus``). The extra candidates' lengths come from ``GroupSpec.candidate_lens``.

Streaming trainer (``cost.train.chunk_groups`` >= 1; 0, the default, trains whole batches as
above). An idle trainer asks the policy for a *chunk* of the open step (``take_chunk``): at least
``min(chunk_groups, groups the step still lacks)`` finished groups and at most what it lacks.
Each chunk trains for ``TrainCost.chunk_time`` and the trainer asks again; the chunk that
completes the step also pays ``TrainCost.finish_time`` (the optimizer step), and then the sync
and publish follow as for a whole batch. The version does not move inside a step, so every
chunk trains at the step's version; the step's ``BatchRecord`` collects its chunks
(``chunks``: when each was handed and how many trajectories it held) and ``t_consume`` is when
the last one was handed, the moment a whole-batch trainer would have taken the batch.

While time advances the loop also records *why admission is not happening* in each interval:
engines paused for a sync, every engine slot busy (or requests queued), or an engine slot free and
nothing queued yet the policy admitted nothing (its own gate held it: for Reserve–Occupy, no legal
EMPTY slot). ``regimes.py`` classifies runs from these fractions.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from reserve_occupy_peers.api import Group, Policy
from reserve_occupy_peers.api import PolicyError as RulePolicyError

from .cost import CostModel
from .engine import INF, Instance, Request
from .filtering import RewardFilter
from .workload import GroupSpec, Workload


class SimulationError(RuntimeError):
    """Base class of errors raised while simulating."""


MAX_IDLE_TIMERS = 1000  # timer expiries in a row with nothing finishing: a timeout livelock
MAX_EVENTS_PER_BATCH = 1_000_000  # events between two publishes, at the least (see docstring)


class SimulationStalled(SimulationError):
    """The run cannot reach its last batch: no event can ever happen again (the trainer waits
    for a batch the policy cannot form and nothing is decoding), or the events that still happen
    make no progress (see "Termination" above). Carries a description of the state."""


class PolicyError(SimulationError, RulePolicyError):
    """A policy used the simulator's API wrongly (e.g. aborted a group that had finished): the
    rule API's ``PolicyError`` (``reserve_occupy_peers``) that is also a ``SimulationError``."""


class SimGroup(Group):
    """One admitted GRPO group: ``size`` requests, all admitted together (the rule API's
    ``Group`` with the simulator's fields)."""

    __slots__ = ("spec", "index", "v_gen", "t_admit", "t_done", "n_done", "surplus")

    def __init__(self, gid: int, spec: GroupSpec, v_tag: int, now: float,
                 index: int | None = None) -> None:
        self.gid = gid
        self.spec = spec
        self.index = gid if index is None else index  # the workload position it rolls out
        self.v_tag = v_tag  # the version the policy stamped (its own notion of v_traj)
        self.v_gen = -1  # oldest weight version that decoded any of its tokens
        self.t_admit = now
        self.t_done = INF
        self.n_done = 0
        self.state = SimGroup.RUNNING
        self.tag: object = None  # free for the policy (target step, cohort, ...)
        self.no_grad = False  # set when it finishes: all rewards equal, so no gradient
        self.requests: list[Request] = []
        self.surplus: list[Request] = []  # candidates aborted when the group committed

    def __repr__(self) -> str:
        return f"SimGroup({self.gid}, v_tag={self.v_tag}, {self.state}, {self.n_done} done)"


@dataclass
class BatchRecord:
    index: int
    version: int
    t_consume: float
    tids: list[int]
    staleness: list[int]
    tokens: int
    useful_tokens: int = 0  # tokens of groups that carry a gradient
    useful: int = 0  # trajectories of groups that carry a gradient
    t_trained: float = INF
    t_published: float = INF
    chunks: list[tuple[float, int]] = field(default_factory=list)  # streaming: (handed, n)


@dataclass
class Ledger:
    """Everything the checks need, recorded as it happened."""

    requests: list[Request] = field(default_factory=list)
    batches: list[BatchRecord] = field(default_factory=list)
    aborted: list[tuple[int, float]] = field(default_factory=list)  # (tid, response tokens)
    dropped: list[int] = field(default_factory=list)
    filtered: list[int] = field(default_factory=list)  # finished, no gradient, never trained
    # truncate (a STUCK release's option): (tid, planned response length, tokens kept); the
    # request's ``length`` is then the kept length, the one trained
    truncated: list[tuple[int, int, int]] = field(default_factory=list)


class Simulator:
    """One simulated run of ``policy`` on ``workload`` until ``batches`` batches are trained."""

    def __init__(self, policy: Policy, workload: Workload, cost: CostModel, *, batches: int,
                 batch_size: int = 16, progress: Callable[[int], None] | None = None,
                 filtering: RewardFilter | None = None, candidates: int | None = None,
                 useful_groups: int | None = None) -> None:
        if batches < 1:
            raise ValueError("batches must be >= 1")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if useful_groups is not None and (isinstance(useful_groups, bool)
                                          or not isinstance(useful_groups, int)
                                          or not 1 <= useful_groups <= batches * batch_size):
            raise ValueError(f"useful_groups must be an int in [1, batches * batch_size = "
                             f"{batches * batch_size}], got {useful_groups!r}")
        # the run ends once this many trajectories of groups with a gradient have been trained
        # (None: after ``batches`` publishes; see "Counting groups with a gradient" above)
        self.useful_goal = None if useful_groups is None else useful_groups * workload.group_size
        self._useful_published = 0  # trajectories with a gradient in the published batches
        self.policy = policy
        self.workload = workload
        self.cost = cost
        self.n_batches = batches
        self.batch_size = batch_size  # groups per batch
        self.group_size = workload.group_size
        if candidates is not None and (isinstance(candidates, bool)
                                       or not isinstance(candidates, int)
                                       or candidates < self.group_size):
            raise ValueError(f"candidates must be an int >= the group size "
                             f"({self.group_size}), got {candidates!r}")
        self.candidates = candidates or self.group_size  # requests admitted per group
        self.instances = [Instance(i, cost.rollout, cost.concurrency)
                          for i in range(cost.instances)]
        caps = {inst.capacity for inst in self.instances}
        self._same_capacity = caps.pop() if len(caps) == 1 else None  # see _dispatch
        self._touched: set[int] = set(range(len(self.instances)))  # see _next_event
        for inst in self.instances:
            inst.touched = self._touched
        self._next_at = [INF] * len(self.instances)  # each instance's next completion, as last
        # computed (exact then; see _next_event)
        self.now = 0.0
        self.version = 0
        self.paused = False  # a weight sync is in progress
        self.groups: list[SimGroup] = []
        self.ledger = Ledger()
        self._queue: deque[Request] = deque()
        self._urgent: deque[Request] = deque()  # priority admissions, served before _queue
        self._queued = 0
        self._seq = 0
        self._trainer = "idle"  # idle | training | syncing
        self.chunk_groups = cost.train.chunk_groups  # 0: whole-batch trainer
        self._step: BatchRecord | None = None  # streaming: the step whose chunks are training
        self._step_lengths: list[int] = []
        self._trainer_until = INF
        # the rollout's contention for the trainer (TrainCost.rollout_slowdown): the training
        # work left (seconds alone) when last re-timed, since when, and the stretch then
        self._retime = cost.train.rollout_slowdown > 0
        self._train_left, self._train_since, self._train_factor = 0.0, 0.0, 1.0
        self._published = 0
        self._idle_since = 0.0
        self.trainer_idle_time = 0.0
        self.events = 0
        self._progress = progress
        self.filtering = filtering.bind(workload) if filtering is not None else None
        self._timer = INF  # the policy's timer (set_timer)
        # seconds during which admission waited: engines paused / engines full / policy held
        self.gate_time = {"paused": 0.0, "engine_full": 0.0, "policy_held": 0.0}

    # ================================================================ policy API ==========

    @property
    def trainer_idle(self) -> bool:
        return self._trainer == "idle"

    def free_slots(self) -> int:
        return 0 if self.paused else sum(i.capacity - i.k for i in self.instances)

    def queued(self) -> int:
        """Requests admitted but waiting for a slot."""
        return self._queued

    def rollout_has_room(self) -> bool:
        """A slot is free and nothing waits for it: what capacity-driven admission asks."""
        if self.paused or self._queued:
            return False
        for inst in self.instances:
            if inst.k < inst.capacity:
                return True
        return False

    def admit(self, v_tag: int | None = None, spec: int | None = None,
              priority: bool = False) -> SimGroup:
        """L1: admit the next group of the workload (or workload group ``spec``, for a policy
        that picks prompts itself); its requests queue for slots, at the front of the queue
        with ``priority`` (behind earlier priority requests)."""
        gid = len(self.groups)
        index = gid if spec is None else spec
        group_spec = self.workload.groups[index % len(self.workload)]
        group = SimGroup(gid, group_spec, self.version if v_tag is None else v_tag, self.now,
                         index)
        size = self.candidates
        lengths = (group_spec.candidate_lens(size) if size > self.group_size
                   else group_spec.response_lens)
        fresh = []
        for i, length in enumerate(lengths):
            req = Request(gid * size + i, group, i, length, group_spec.prompt_len)
            group.requests.append(req)
            self.ledger.requests.append(req)
            fresh.append(req)
        (self._urgent if priority else self._queue).extend(fresh)
        self._queued += size
        self.groups.append(group)
        self._dispatch()
        return group

    def abort_group(self, group: SimGroup) -> None:
        """L2: stop an in-flight group; all its tokens so far are wasted."""
        if group.state != SimGroup.RUNNING:
            raise PolicyError(f"{type(self.policy).__name__} aborted {group!r}: only running "
                              f"groups can be aborted (drop finished trajectories instead)")
        group.state = SimGroup.ABORTED
        for req in group.requests:
            if req.state == Request.QUEUED:
                req.state = Request.ABORTED
                self._queued -= 1
                self.ledger.aborted.append((req.tid, 0.0))
            elif req.state == Request.RUNNING:
                req.tokens = req.instance.remove(req)  # type: ignore[union-attr]
                req.t_end = self.now
                self.ledger.aborted.append((req.tid, req.tokens))
            else:  # a finished member of a group that will never complete
                self.ledger.aborted.append((req.tid, req.tokens))

    abort = abort_group  # its name before the rule API (reserve_occupy_peers), for one release

    def truncate(self, group: SimGroup) -> None:
        """Finish a running group now with what it decoded so far (the STUCK release's
        ``truncate``, spec/PROTOCOL.md §6.2): a running member stops with its decoded tokens
        (whole tokens: the one being decoded is dropped) as its response, a queued member
        finishes with an empty one, a finished member keeps its own; no token is wasted. With
        group-level oversampling the ``group_size`` members kept are the finished ones, then
        the running ones that decoded most; the others are aborted as at a commit. The group
        is DONE; the rule's ``on_group_done`` is not called (the rule asked for this).
        ``ledger.truncated`` records (tid, planned length, kept tokens) of each member cut."""
        if group.state != SimGroup.RUNNING:
            raise PolicyError(f"{type(self.policy).__name__} truncated {group!r}: only running "
                              f"groups can be truncated")
        rank = {Request.FINISHED: 0, Request.RUNNING: 1, Request.QUEUED: 2}
        members = sorted(group.requests,
                         key=lambda r: (rank.get(r.state, 3), -self.live_tokens(r), r.index))
        kept, surplus = members[: self.group_size], members[self.group_size:]
        for req in surplus:  # group-level oversampling: as _commit stops the rest
            if req.state == Request.QUEUED:
                req.state = Request.ABORTED
                self._queued -= 1
            elif req.state == Request.RUNNING:
                req.tokens = req.instance.remove(req)  # type: ignore[union-attr]
            req.t_end = self.now
            self.ledger.aborted.append((req.tid, req.tokens))
            group.surplus.append(req)
        for req in kept:
            if req.state == Request.FINISHED:
                continue
            if req.state == Request.RUNNING:
                decoded = req.instance.remove(req)  # type: ignore[union-attr]
            else:  # queued: never started
                self._queued -= 1
                decoded = 0.0
                req.t_start = self.now
            whole = math.floor(decoded)
            self.ledger.truncated.append((req.tid, req.length, whole))
            req.state = Request.FINISHED
            req.tokens = decoded  # what the engines decoded (check_tokens); trained: ``length``
            req.length = int(whole)
            req.t_end = self.now
        group.requests = [r for r in group.requests if r in kept] if surplus else group.requests
        group.n_done = len(group.requests)
        if group.v_gen < 0:  # nothing decoded yet: its stamp is the oldest version it has
            group.v_gen = group.v_tag
        group.state = SimGroup.DONE
        group.t_done = self.now
        if self.filtering is not None:
            group.no_grad = self.filtering.no_gradient(group.index)

    def filter(self, group: SimGroup) -> None:
        """Discard a finished group that carries no gradient; it is never trained."""
        if group.state != SimGroup.DONE:
            raise PolicyError(f"{type(self.policy).__name__} filtered {group!r}: only finished "
                              f"groups can be filtered")
        group.state = SimGroup.FILTERED
        self.ledger.filtered.extend(r.tid for r in group.requests)

    def set_timer(self, t: float) -> None:
        """Call ``policy.on_timer()`` at time ``t`` (``INF`` cancels); one timer per policy."""
        if t < self.now:
            raise PolicyError(f"{type(self.policy).__name__} set a timer in the past "
                              f"({t} < {self.now})")
        self._timer = t

    def drop(self, requests: list[Request]) -> None:
        """L3: discard finished trajectories instead of training them."""
        for req in requests:
            if req.state != Request.FINISHED:
                raise PolicyError(f"{type(self.policy).__name__} dropped trajectory {req.tid} "
                                  f"that has not finished")
            self.ledger.dropped.append(req.tid)

    # ================================================================ the loop ============

    def run(self) -> Simulator:
        self.policy.attach(self)
        self._settle()
        instances = self.instances
        idle_timers = 0  # timer expiries since the last trajectory finished or trainer step
        events_limit = max(MAX_EVENTS_PER_BATCH, 1000 * self.batch_size * self.candidates)
        published, since_publish = self._published, 0
        while self._published < self.n_batches:
            if self._published != published:
                published, since_publish = self._published, 0
            since_publish += 1
            if since_publish > events_limit:
                raise SimulationStalled(self._stall_report(
                    f"{events_limit:,} events since the last publish without forming a batch"))
            t_next, due = self._next_event()
            timer = self._timer < t_next  # ties go to engines and trainer
            if timer:
                t_next = self._timer
            if t_next == INF:
                raise SimulationStalled(self._stall_report())
            self._account_gate(t_next - self.now)
            finishing = []  # the instances with a completion due by t_next (see below)
            for inst in instances:
                inst.advance(t_next)
                heap = inst._heap
                if inst is due or (heap and heap[0][0] <= inst.progress + 1e-6):
                    finishing.append(inst)
            self.now = t_next
            self.events += 1
            if timer:
                idle_timers += 1
                if idle_timers > MAX_IDLE_TIMERS:
                    raise SimulationStalled(self._stall_report(
                        f"its timer expired {MAX_IDLE_TIMERS} times in a row and no trajectory "
                        f"finished in between (a timeout shorter than any re-admitted group "
                        f"can finish)"))
                self._timer = INF
                self.policy.on_timer()
            else:
                idle_timers = 0
                # finish_due of the other instances would pop nothing: the earliest entry of
                # each heap (the finish progress of its next completion, or of an aborted
                # request's stale entry) is beyond its progress, and what the callbacks below
                # do (abort, admit) adds no entry that is due (a joining request finishes at
                # least one token ahead)
                for inst in finishing:
                    for req in inst.finish_due(inst is due):
                        self._finished(req)
                if due is None:
                    self._trainer_event()
            self._settle()
            if self._retime:
                self._retime_training()
        if self._trainer == "idle":
            self.trainer_idle_time += self.now - self._idle_since
        if self.useful_goal is not None and self._useful_published < self.useful_goal:
            g = self.group_size
            raise SimulationStalled(self._stall_report(
                f"{self._useful_published // g} of the {self.useful_goal // g} groups with a "
                f"gradient it was to train in at most {self.n_batches} batches"))
        return self

    # Two instances' next completions closer than this (seconds, plus a relative part) are both
    # recomputed exactly before choosing; far above the round-off between two computations of
    # the same completion time (the same closed form before and after ``advance`` steps).
    NEXT_EVENT_SLACK_S = 1e-3

    def _next_event(self) -> tuple[float, Instance | None]:
        """The earliest of the trainer's event and every instance's next completion, and the
        instance (None: the trainer): what ``min`` over every ``Instance.next_event()`` in
        index order gives (ties to the trainer, then to the lowest index), computed exactly
        for only the instances that can be it.

        An instance's next completion time does not move while nothing joins or leaves it and
        it neither pauses, resumes nor changes speed (``advance`` integrates the same closed
        form): its last computed value (``_next_at``) is kept, and an instance whose state did
        change (its index in ``_touched``) is recomputed. Those kept values are the true ones up
        to round-off; every instance whose value is within ``NEXT_EVENT_SLACK_S`` of the
        earliest is computed again exactly, in index order, as the full scan did, so the event
        chosen and its time are the full scan's to the last bit.
        """
        instances, at = self.instances, self._next_at
        touched = self._touched
        if touched:
            for i in touched:
                at[i] = instances[i].next_event()
            touched.clear()
        t_next, due = self._trainer_until, None
        if not at:
            return t_next, due
        earliest = min(at)
        bound = min(earliest, t_next)
        if earliest == INF or earliest > bound + self.NEXT_EVENT_SLACK_S + 1e-12 * bound:
            return t_next, due
        bound += self.NEXT_EVENT_SLACK_S + 1e-12 * bound
        for i, t in enumerate(at):
            if t <= bound:
                inst = instances[i]
                t = at[i] = inst.next_event()
                if t < t_next:
                    t_next, due = t, inst
        return t_next, due

    def _account_gate(self, dt: float) -> None:
        """Why admission is not happening in the coming interval (see the module docstring)."""
        if self.paused:
            self.gate_time["paused"] += dt
        elif self.rollout_has_room():
            self.gate_time["policy_held"] += dt
        else:
            self.gate_time["engine_full"] += dt

    def _settle(self) -> None:
        self._dispatch()
        self.policy.admit()
        if self._trainer == "idle" and self._published < self.n_batches:
            if self.chunk_groups:
                self._stream()
                return
            batch = self.policy.take_batch()
            if batch is not None:
                self._train(batch)
                self.policy.admit()

    def _dispatch(self) -> None:
        if self.paused:
            return
        instances = self.instances
        same = self._same_capacity
        while self._urgent or self._queue:
            queue = self._urgent if self._urgent else self._queue
            req = queue[0]
            if req.state != Request.QUEUED:
                queue.popleft()  # aborted while waiting
                continue
            best = None
            if same is not None:  # every instance has this capacity: the same choice, in C
                ks = [inst.k for inst in instances]
                least = min(ks)
                if least < same:
                    best = instances[ks.index(least)]
            else:
                for inst in instances:  # least loaded instance, lowest index on ties
                    if inst.k < inst.capacity and (best is None or inst.k < best.k):
                        best = inst
            if best is None:
                return
            queue.popleft()
            self._queued -= 1
            self._seq += 1
            best.join(req, self.now, self._seq)
            req.v_start = self.version
            group = req.group
            if group.v_gen < 0:
                group.v_gen = self.version

    def _finished(self, req: Request) -> None:
        req.t_end = self.now
        group: SimGroup = req.group  # type: ignore[assignment]
        group.n_done += 1
        if group.n_done == self.group_size and group.state == SimGroup.RUNNING:
            if self.candidates > self.group_size:
                self._commit(group)
            group.state = SimGroup.DONE
            group.t_done = self.now
            if self.filtering is not None:
                group.no_grad = self.filtering.no_gradient(group.index)
            self.policy.on_group_done(group)

    def _commit(self, group: SimGroup) -> None:
        """Group-level oversampling: the first ``group_size`` finished candidates are the group;
        the others stop now (L2 waste)."""
        done = [r for r in group.requests if r.state == Request.FINISHED][: self.group_size]
        kept = set(id(r) for r in done)
        for req in group.requests:
            if id(req) in kept:
                continue
            if req.state == Request.FINISHED:  # finished in the same instant: still surplus
                pass
            elif req.state == Request.QUEUED:
                req.state = Request.ABORTED
                self._queued -= 1
            else:
                req.tokens = req.instance.remove(req)  # type: ignore[union-attr]
            req.t_end = self.now
            self.ledger.aborted.append((req.tid, req.tokens))
            group.surplus.append(req)
        group.requests = done

    # ================================================================ the trainer =========

    def _train(self, batch: list[Request]) -> None:
        version = self.version
        lengths = [r.prompt + r.length for r in batch]
        record = BatchRecord(
            index=len(self.ledger.batches), version=version, t_consume=self.now,
            tids=[r.tid for r in batch],
            staleness=[version - r.group.v_gen for r in batch],  # type: ignore[union-attr]
            tokens=sum(lengths),
            useful_tokens=sum(n for n, r in zip(lengths, batch)
                              if not r.group.no_grad),  # type: ignore[union-attr]
            useful=sum(1 for r in batch if not r.group.no_grad))  # type: ignore[union-attr]
        self.ledger.batches.append(record)
        self.trainer_idle_time += self.now - self._idle_since
        self._trainer = "training"
        self._start_training(self.cost.train.batch_time(lengths))
        self._contend(True)

    def _stream(self) -> None:
        """Streaming: hand the idle trainer the next chunk of the open step, if the policy has
        one (see "Streaming trainer" in the module docstring)."""
        per_step = self.batch_size * self.group_size
        record = self._step
        have = len(record.tids) if record is not None else 0
        lacks = (per_step - have) // self.group_size
        chunk = self.policy.take_chunk(min(self.chunk_groups, lacks), lacks)
        if chunk is None:
            return
        if not chunk or len(chunk) % self.group_size or len(chunk) > per_step - have:
            raise PolicyError(f"{type(self.policy).__name__} handed a chunk of {len(chunk)} "
                              f"trajectories to a step that lacks {per_step - have} "
                              f"(groups of {self.group_size})")
        version = self.version
        lengths = [r.prompt + r.length for r in chunk]
        if record is None:
            record = BatchRecord(index=len(self.ledger.batches), version=version,
                                 t_consume=self.now, tids=[], staleness=[], tokens=0)
            self.ledger.batches.append(record)
            self._step, self._step_lengths = record, []
        record.tids += [r.tid for r in chunk]
        record.staleness += [version - r.group.v_gen for r in chunk]  # type: ignore[union-attr]
        record.tokens += sum(lengths)
        record.useful_tokens += sum(n for n, r in zip(lengths, chunk)
                                    if not r.group.no_grad)  # type: ignore[union-attr]
        record.useful += sum(1 for r in chunk if not r.group.no_grad)  # type: ignore[union-attr]
        record.chunks.append((self.now, len(chunk)))
        record.t_consume = self.now
        self._step_lengths += lengths
        train = self.cost.train
        duration = train.chunk_time(lengths)
        if len(record.tids) == per_step:
            duration += train.finish_time(self._step_lengths)
        self.trainer_idle_time += self.now - self._idle_since
        self._trainer = "training"
        self._start_training(duration)
        self._contend(True)
        self.policy.admit()

    def _start_training(self, work: float) -> None:
        """The trainer trains ``work`` seconds (alone); with ``TrainCost.rollout_slowdown``
        stretched while the rollout decodes (``_retime_training``)."""
        if not self._retime:
            self._trainer_until = self.now + work
            return
        self._train_left, self._train_since = work, self.now
        self._train_factor = self._training_stretch()
        self._trainer_until = self.now + work * self._train_factor

    def _training_stretch(self) -> float:
        """How many times as long training takes now: ``1 + rollout_slowdown * f(n)``, ``n``
        the requests running on all instances and ``f`` the load's shape
        (``TrainCost.load_share``; the default, a busy flag, is 1 for any ``n`` >= 1)."""
        n = sum(inst.k for inst in self.instances)
        if not n:
            return 1.0
        train = self.cost.train
        return 1.0 + train.rollout_slowdown * train.load_share(n)

    def _retime_training(self) -> None:
        """After every event: if the rollout's load changed the stretch during a training step
        (the engine started or stopped decoding, or, with a load-shaped ``f``, a request
        joined or left), the work done so far is taken off at the old stretch and the rest is
        scheduled at the new one. Every change of the running requests is an event's (a
        completion, an admission, the trainer's or a timer's), so this adds no event."""
        if self._trainer != "training":
            return
        factor = self._training_stretch()
        if factor == self._train_factor:
            return
        done = (self.now - self._train_since) / self._train_factor
        self._train_left = max(0.0, self._train_left - done)
        self._train_since, self._train_factor = self.now, factor
        self._trainer_until = self.now + self._train_left * factor

    def _contend(self, training: bool) -> None:
        """A trainer on the rollout's processors (``RolloutCost.train_slowdown``) slows every
        decode step while it trains; the instances are advanced to ``now`` when this is
        called, so the new speed applies from here on."""
        slow = 1.0 + self.cost.rollout.train_slowdown if training else 1.0
        for inst in self.instances:
            if inst.slow != slow:
                inst.slow = slow
                self._touched.add(inst.index)

    def _trainer_event(self) -> None:
        record = self.ledger.batches[-1]
        if self._trainer == "training":
            self._contend(False)
        if self._trainer == "training" and self.chunk_groups \
                and len(record.tids) < self.batch_size * self.group_size:
            self._trainer = "idle"  # a chunk ended; the step is still open
            self._trainer_until = INF
            self._idle_since = self.now
            return
        if self._trainer == "training":
            record.t_trained = self.now
            self._trainer = "syncing"
            self._trainer_until = self.now + self.cost.train.sync_s
            self.paused = True
            for inst in self.instances:
                inst.pause()
        elif self._trainer == "syncing":
            record.t_published = self.now
            self.version += 1
            self.paused = False
            for inst in self.instances:
                inst.resume(self.cost.rollout.reprefill_on_update)
            self._trainer = "idle"
            self._trainer_until = INF
            self._idle_since = self.now
            self._step = None
            self._published += 1
            if self.useful_goal is not None:
                self._useful_published += record.useful
                if self._useful_published >= self.useful_goal:
                    self.n_batches = self._published  # the goal is met: this was the last
            self.policy.on_publish(self.version)
            if self._progress is not None:
                self._progress(self._published)

    # ================================================================ diagnostics =========

    def live_tokens(self, req: Request) -> float:
        """Response tokens a request has produced so far."""
        if req.state == Request.RUNNING:
            inst = req.instance
            return min(float(req.length), inst.progress - req.join)  # type: ignore[union-attr]
        return req.tokens if req.state != Request.QUEUED else 0.0

    def _stall_report(self, why: str = "") -> str:
        gone = ({t for b in self.ledger.batches for t in b.tids} | set(self.ledger.dropped)
                | set(self.ledger.filtered))
        done = sum(1 for g in self.groups
                   if g.state == SimGroup.DONE and g.requests[0].tid not in gone)
        running = sum(i.k for i in self.instances)
        return (f"{self.policy.name} (eta={self.policy.eta}) stalled at t={self.now:.1f}s, "
                f"version {self.version}, after {self._published} of {self.n_batches} batches"
                f"{f' (no progress: {why})' if why else ''}: "
                f"the trainer is {self._trainer}, {running} requests running, {self._queued} "
                f"queued, {done} finished groups not yet trained or dropped; "
                f"policy state: {self.policy.describe_state()}")
