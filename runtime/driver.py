"""The asyncio driver: binds the Reserve–Occupy controller to a rollout engine and a trainer.

The driver is given its controller (``runtime.controller.make_controller`` builds the one
``staleness.policy`` names) and calls only what ``runtime.controller.Controller`` declares:
Reserve–Occupy's ``JournaledController`` and a peer's rule (``runtime.peers.PeerController``)
both answer all of it, Reserve–Occupy answering the peers' calls (dropped and aborted units,
admission moved, a timer) empty, so the driver never asks which one it has.

Theory of operation
-------------------
The driver decides nothing about placement, admission or batching: it asks the controller
(``reserve``, ``occupy``, ``abort``, ``filter``, ``consume``, ``publish``, ``release_stuck``)
and acts on the answers. Its own job is the I/O around them. Four tasks share one event loop:

* admission: takes the next prompt, ``reserve``s a unit for it (waiting while refused) and
  starts the group: one engine request per candidate (``Group`` decides when it is complete,
  failed, or which surplus candidates to abort);
* completion (inside each group's task): reward a complete group's committed candidates (one
  call; a user's reward answers from its worker process, ``runtime.tasks.isolated``); ``occupy``
  the group; ``abort`` one whose rewards carry no gradient (known before placement), whose
  candidates failed, or whose reward function raised or ran past ``reward.timeout_s``; but a
  peer's rule that discards a group without gradient at its own next sample
  (``keeps_no_gradient``: verl) gets it placed and marked (``occupy_no_gradient``) and drops
  it at a ``consume`` (``take_dropped``);
* trainer: ``consume`` a READY batch, train, export weights, sync them into the engine and
  ``publish``; with ``streaming``, while it waits for the head buffer it also takes the
  buffer's finished units (``stream``) and trains them in chunks, so that at ``consume`` only
  the rest is left before the optimiser step (``_train_chunk``);
* watchdog: the unit timeout and the STUCK timeout (``release_stuck``), measured by ``clock``.
  With ``staleness.stuck_action=truncate`` a release may place units still generating (the
  core's truncate, spec/PROTOCOL.md §6.2): the driver then stops their requests, commits the
  partial outputs as the group's samples, rewards them and writes them, and the trainer's
  next ``consume`` waits for that (``_truncate_group``).

A weight sync pauses the engine, which ends every running request; each candidate keeps its
tokens (partial rollout) and resumes with them as prompt under the new weights. With
``refit == "keep"`` (in-flight refit) the pause freezes the running requests instead and they
continue under the new weights, the engine saying at which token each refit took effect
(``Segment.refits``). Either way a unit's ``v_traj`` is the controller's, never restamped, and
every token records the version that generated it, so the trainer can correct staleness per
token. All time goes through ``clock``
so a virtual clock replays a run exactly (see ``runtime.clock``).

Durability and recovery (docs/recovery.md) reach the driver through three seams, none of which
decides anything: ``persist`` (write a group's trajectory before its ``occupy``; checkpoint the
trainer before ``publish``), ``controller``/``resume`` (a rebuilt controller, the finished
groups' data, the prompts to re-admit), and the ``meta`` each operation is logged with (the
prompt of a reservation, the reason of an abort). ``deliver_completion`` is the door for
completion messages from outside a group's own task: the controller's typed errors reject
duplicate, late and unknown ones.

The module is longer than this project's usual ~400 lines on purpose: the four tasks share one
set of state (groups, running requests, the gate, the change event), and the order of their
steps is the correctness argument; split across files it would be harder to check. What a run
measured lives apart, in ``runtime.accounting``.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol

from reserve_occupy import (
    Batch,
    BufferStatus,
    Group,
    UnitError,
    UnitState,
)
from reserve_occupy.stuck import StuckTimeouts

from .accounting import Accounting, ControllerCounts, LengthLog
from .clock import Clock, MonotonicClock
from .controller import Controller
from .rollout.base import GenerationRequest, Rollout, RolloutDead, token_versions
from .tasks.base import Prompt, RewardAborted, RewardError, RewardFn, RewardTimeout, score_group
from .trainer.base import Trainer
from .records import (CandidateRun, DriverSettings, GroupRun, ResumePoint, StepRecord, TrainBatch,
                      assemble)


class Persistence(Protocol):
    """Durability hooks (``runtime.recovery.durable.RunStore``): the driver calls them at the
    points where docs/recovery.md says what must be on disk."""

    def group_finished(self, g: GroupRun) -> None:
        """Before the group's ``occupy`` is logged: its trajectory must be durable."""

    async def before_publish(self, version: int, batch: Batch,
                             figures: tuple[int, dict[str, Any]] | None = None) -> None:
        """After ``batch`` trained and its weights were exported, before ``publish``.
        ``figures``: (response tokens trained, the trainer's metrics) of that batch, kept
        with a checkpoint so that a crash before the step's metrics row loses no figures."""


class NoteSink(Protocol):
    """Where the driver's notes go: a list (kept), or ``runtime.notes.NoteLog`` (streamed)."""

    def append(self, row: dict[str, Any], /) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[dict[str, Any]]: ...


class Driver:
    def __init__(self, settings: DriverSettings, rollout: Rollout, trainer: Trainer,
                 reward_fn: RewardFn, prompts: Sequence[Prompt], clock: Clock | None = None,
                 on_step: Callable[[StepRecord], None] | None = None,
                 after_step: Callable[[StepRecord], Awaitable[None]] | None = None,
                 *, controller: Controller,
                 resume: ResumePoint | None = None,
                 persist: Persistence | None = None,
                 lengths: LengthLog | None = None, forget_counted: bool = False,
                 notes: NoteSink | None = None, keep_records: bool = True) -> None:
        """``on_step`` sees each step's record; ``after_step`` is awaited after it, in the
        trainer loop (a checkpoint save, say), so the next consume waits for it.

        ``controller``: the staleness controller to drive (``runtime.controller``:
        ``make_controller(settings, clock.now)`` for a new run; a recovered run's rebuilt
        ``JournaledController``), built by the caller, with ``clock`` its peer's rule reads.
        ``resume`` continues a recovered run; ``persist`` makes the run durable. ``lengths``
        receives each unit's response lengths when its generation ends (a streamed
        ``LengthLog``, with a resumed run's earlier records; default: in memory).
        ``forget_counted``: after each step, drop the controller's events its counts have read
        (``Controller.forget_events``); for a run whose controller writes its log to a file
        (a durable run: the session sets it), where the in-memory log would otherwise grow by
        about a kilobyte per unit for the run's life.
        ``notes``: where the driver's notes go (default: a list, ``self.notes``, kept for the
        run's life; the session passes a ``runtime.notes.NoteLog``, which writes each to
        ``driver_notes.jsonl`` as it happens and keeps none). ``keep_records``: keep each
        step's ``StepRecord`` in ``self.records``, which ``run()`` returns (default); a caller
        that takes each record through ``on_step`` (the session writes its metrics row) turns
        it off, and ``run()`` then returns an empty list: a record holds per-sample lists,
        about half a megabyte a step at 1,024 groups of 16 samples."""
        if not prompts:
            raise ValueError("the driver needs at least one prompt")
        self.s = settings
        self.clock = clock or MonotonicClock()
        self.controller = controller
        self.persist = persist
        self.forget_counted = forget_counted
        resume = resume or ResumePoint()
        self.rollout, self.trainer, self.reward_fn = rollout, trainer, reward_fn
        self.prompts = list(prompts)
        self.on_step, self.after_step = on_step, after_step
        # the weights the engine runs (publish moves both together)
        self.engine_version = self.controller.version
        self.groups: dict[Any, GroupRun] = dict(resume.groups)  # admitted, not yet consumed
        self.start_step = resume.step
        self.records: list[StepRecord] = []
        self.keep_records = keep_records
        # driver-side events, for tests and debugging (a session streams them: runtime.notes)
        self.notes: NoteSink = notes if notes is not None else []
        # What only the driver sees: requests resumed, completion messages rejected. Unit and
        # step counts are not kept here: they come from the controller's log (below).
        self.counts = dict.fromkeys(("resumed", "rejected"), 0)
        self._change = asyncio.Event()
        self._open = asyncio.Event()  # cleared while weights sync: nothing new may start
        self._running: dict[str, CandidateRun] = {}
        self._order: list[int] = []
        self._order_epoch = -1
        self._seq = resume.next_seq
        self._draws = resume.draws  # prompts drawn from the shuffled stream so far
        self._readmit = list(resume.readmit)  # prompts of units a crash lost: admitted first
        self.accounting = Accounting(self.clock)
        # unit and step counts come from the controller's event log (one source of truth)
        self.log_counts = ControllerCounts(self.controller)
        # the samples' response lengths, joined with the log's fates for the length bias (once
        # a step: the fates settled since the last, and forgotten once joined: LengthLog)
        self.lengths = lengths if lengths is not None else LengthLog()
        self.lengths.only_expected()  # only units this process admits add lines
        # The progress detector (docs/runtime.md, "Progress guarantees"): every group that ends
        # without being placed (filtered, failed, timed out, released, closed out) counts, an
        # occupy resets; max_dropped_in_a_row in a row stops the run.
        self._dropped_in_a_row = 0
        self._dropped_reasons: dict[str, int] = {}
        self._stopping = False
        self._last_error = ""
        self._waiting_since: float | None = None  # the trainer is waiting for a batch
        self._stuck_since: float | None = None  # ... and the head buffer is STUCK
        self._fatal: asyncio.Future[None] | None = None
        self._background: set[asyncio.Future[Any]] = set()
        # streaming: units stream() handed and not trained yet; those this process trained
        self._handed: list[Any] = []
        self._handed_trained: set[Any] = set()
        self._ready_at: float | None = None  # when the head buffer became READY
        self._scoring: dict[Any, asyncio.Future[Any]] = {}  # complete groups being rewarded
        # units a truncating STUCK release placed whose samples are not rewarded and written
        # yet: the trainer does not consume (or stream) until this is empty
        self._truncating: set[Any] = set()

    # ------------------------------------------------------------------ the run --------------

    async def run(self) -> list[StepRecord]:
        """Train ``settings.steps`` steps; then abort what is still in flight and return."""
        self.accounting.start()
        self._fatal = asyncio.get_running_loop().create_future()
        self._open.set()
        tasks = [asyncio.ensure_future(c) for c in
                 (self._trainer_loop(), self._admission_loop(), self._watchdog())]
        interrupted = False
        try:
            done, _ = await asyncio.wait([*tasks, self._fatal],
                                         return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # raise the first failure
        except asyncio.CancelledError:  # the run itself was cancelled: Ctrl-C, SIGTERM
            interrupted = True
            raise
        finally:
            for t in tasks:
                t.cancel()
            late = await self._settle(tasks)  # a Ctrl-C while they end: interrupted too
            await self._shutdown(interrupted or late)
            if late and not interrupted:
                raise asyncio.CancelledError()  # the stop's own failure gives way to it
        return self.records

    def _fail(self, exc: BaseException) -> None:
        """Stop the run with ``exc`` (a dead engine, or a bug surfacing in a task)."""
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_exception(exc)

    def _spawn(self, coro: Any) -> asyncio.Future[Any]:
        """A background task whose failure stops the run instead of vanishing."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._fail(task.exception())  # type: ignore[arg-type]

    async def _wait_open(self) -> None:
        # Re-check after waking: the sync may have closed the gate again before this task ran.
        while not self._open.is_set():
            await self._open.wait()

    async def _shutdown(self, interrupted: bool = False) -> None:
        """Abort the groups still in flight (reason ``shutdown``) and wait for the tasks left.
        A group a truncating STUCK release placed and whose partial output is not rewarded and
        written yet (``_truncating``) is waited for at the end of the steps or on a failure
        (its reward is bounded by ``reward.timeout_s``); when the run is ``interrupted``
        (cancelled: Ctrl-C, SIGTERM) it is not: a user's reward cannot hold the stop. Its
        scoring is cancelled, which ends the reward's worker, and the unit, FINISHED in the
        log since the release, is filtered with reason ``shutdown``, so ``--resume``
        re-admits its prompt as it does the aborted units' (``recovery.resume``).

        A cancellation while an orderly stop waits (Ctrl-C during the wait for such a
        reward; the gather it lands in cancels the tasks it waited for, the scoring too) does
        the same before it propagates: it filters the units still in ``_truncating`` with
        reason ``shutdown`` at once, before any ``await``, so that no further cancellation can
        come between the first and those lines (the log is never left with the crash's
        FINISHED unit without a file), then cancels what is left and waits for it to end
        (``_settle``, which a further cancellation does not cut short), checks, and
        re-raises."""
        self._stopping = True  # what ends now ends because the run does: not a lost group
        self._open.set()  # candidates held by an interrupted sync must see their stop
        for g in list(self.groups.values()):
            if not g.closed or (interrupted and g.fate == "truncated"
                                and g.unit_id in self._truncating):
                self._abort_group(g, "shutdown")
        try:
            while self._background:
                await asyncio.gather(*list(self._background), return_exceptions=True)
        except asyncio.CancelledError:  # interrupted while it waited: as an interrupted stop
            for g in list(self.groups.values()):
                if g.fate == "truncated" and g.unit_id in self._truncating:
                    self._abort_group(g, "shutdown")
            await self._settle(self._background)
            self._check()
            raise
        self._check()

    async def _settle(self, tasks: Any) -> bool:
        """Cancel ``tasks`` (a collection a task's end may shrink: ``_background``) and any
        that join it, and return once every one has ended; whether this task was cancelled
        meanwhile. A cancellation (a second Ctrl-C) does not cut the wait short: the tasks
        are cancelled already and end promptly, and leaving one running past the driver's
        stop would let it act on a run that is over. The caller re-raises it."""
        cancelled = False
        while not all(t.done() for t in list(tasks)):
            for t in list(tasks):
                t.cancel()
            try:
                await asyncio.gather(*list(tasks), return_exceptions=True)
            except asyncio.CancelledError:
                cancelled = True
        return cancelled

    # ------------------------------------------------------------------ admission ------------

    async def _admission_loop(self) -> None:
        while True:
            prompt, meta = self._next_prompt()
            unit_id = f"g{self._seq}"
            while True:
                await self._wait_open()
                change = self._change
                reservation = self.controller.reserve(unit_id, meta=meta)
                if reservation is not None:
                    break
                await change.wait()
            if self._readmit and meta.get("readmit_of") == self._readmit[0][1]:
                self._readmit.pop(0)
            else:
                self._draws += 1
            self._check()
            g = GroupRun(unit_id, self._seq, prompt, self.rollout.tokenizer.encode(prompt.text),
                         reservation.v_traj, self.clock.now(),
                         Group(unit_id, self.s.group_size, self.s.n_candidates),
                         [CandidateRun(i) for i in range(self.s.n_candidates)],
                         prompt_position=meta["prompt"])
            self._seq += 1
            self.groups[unit_id] = g
            self.lengths.expect(unit_id)  # its line will come when its generation ends
            g.task = self._spawn(self._run_group(g))
            self._notify()

    def _next_prompt(self) -> tuple[Prompt, dict[str, Any]]:
        """The next prompt and the ``meta`` its reservation is logged with: its position in
        ``prompts`` (recovery re-admits the prompt of a unit a crash lost) and, for a prompt
        from the stream, the draw number (recovery continues the stream after it)."""
        if self._readmit:
            position, lost = self._readmit[0]
            return self.prompts[position], {"prompt": position, "readmit_of": lost}
        n, size = self._draws, len(self.prompts)
        epoch = n // size
        if epoch != self._order_epoch:  # a new epoch, shuffled reproducibly
            self._order = list(range(size))
            random.Random(self.s.seed * 7919 + epoch).shuffle(self._order)
            self._order_epoch = epoch
        # from the end: the order every logged run drew its prompts in
        position = self._order[size - 1 - n % size]
        return self.prompts[position], {"prompt": position, "draw": n}

    # ------------------------------------------------------------------ groups ---------------

    async def _run_group(self, g: GroupRun) -> None:
        await asyncio.gather(*(self._run_candidate(g, c) for c in g.candidates))
        if g.fate == "truncated" and not g.group.complete:
            # a truncating release placed it: every request has returned with its partial
            # output, which now makes up the group (then rewarded as any complete group)
            self._commit_truncated(g)
            self._scoring[g.unit_id] = self._spawn(self._score_group(g))
        # Every request of the group has returned, the aborted ones with the tokens they had
        # decoded: the lengths are final now (the unit's fate was logged before, see LengthLog)
        committed = g.group.committed
        self.lengths.add(g.unit_id, [len(c.token_ids) for c in g.candidates],
                         [c.role(committed) for c in g.candidates])

    async def _run_candidate(self, g: GroupRun, c: CandidateRun) -> None:
        while True:
            await self._wait_open()
            if c.stop is not None:
                return
            keep = c.token_ids if self.s.partial_rollout else []
            if not self.s.partial_rollout and c.token_ids:
                c.token_ids, c.logprobs, c.versions = [], [], []
            request = GenerationRequest(
                request_id=f"{g.unit_id}-c{c.index}-s{c.segments}",
                prompt_ids=g.prompt_ids + keep, max_tokens=self.s.max_tokens - len(keep),
                temperature=self.s.temperature, ignore_eos=self.s.ignore_eos,
                seed=(self.s.seed * 1_000_003 + g.seq * 4099 + c.index * 67 + c.segments)
                % 2**31)
            version = self.engine_version
            c.request_id, c.paused = request.request_id, False
            c.segments += 1
            self._request_started(request.request_id, c)
            try:
                segment = await self.rollout.generate(request)
            except RolloutDead as exc:
                self._request_ended(request.request_id)
                self._fail(exc)
                return
            except Exception as exc:  # one request failed: the candidate fails, not the run
                self._request_ended(request.request_id)
                self._note("request_error", g, c, error=repr(exc))
                self._last_error = f"engine: {exc!r}"
                self._candidate_failed(g, c, f"engine error: {exc!r}")
                return
            self._request_ended(request.request_id)
            c.token_ids += segment.token_ids
            c.logprobs += segment.logprobs
            c.versions += token_versions(version, segment)
            self.accounting.tokens_generated += len(segment.token_ids)
            if segment.finish_reason == "abort":
                if c.stop is not None:
                    return
                if c.paused and len(c.token_ids) < self.s.max_tokens:
                    self.counts["resumed"] += 1
                    self._note("resume", g, c, kept=len(c.token_ids), version=version)
                    continue
                if not c.paused:
                    self._candidate_failed(g, c, "aborted by the engine")
                    return
            c.finish_reason = (segment.finish_reason if segment.finish_reason != "abort"
                               else "length")
            self._candidate_finished(g, c)
            return

    def _candidate_finished(self, g: GroupRun, c: CandidateRun) -> None:
        if g.closed or g.group.complete:  # complete: being scored (_score_group)
            return
        self._report(g, g.group.finish(c.index))

    async def _score_group(self, g: GroupRun) -> None:
        """Reward a complete group's committed candidates in one call (``tasks.base.
        score_group``: a user's reward answers from its worker process, so a hang holds only
        this task), then place the group. Every value is checked there: one that is not a real
        number, a crashed worker or a reward that tried to end the process stops the run (no
        group is scored by a broken reward). A reward that raises, or returns a number that is
        not finite (``RewardNotFinite``), drops the group; one past ``reward.timeout_s`` too
        (``reward_timeout``); an abort meanwhile (the unit timeout, the closing rule, the
        run's end) cancels this task, which ends the worker (``_close_aborted``)."""
        eos = self.rollout.tokenizer.eos_token_id
        committed = [g.candidates[i] for i in g.group.committed]
        texts = [self.rollout.tokenizer.decode(
            c.token_ids[:-1] if c.token_ids and c.token_ids[-1] == eos else c.token_ids)
            for c in committed]
        try:
            rewards = await score_group(self.reward_fn, g.prompt, texts)
        except RewardTimeout as exc:  # the group's failure, like the unit timeout
            if not g.closed or g.fate == "truncated":
                self._note("reward_timeout", g, error=str(exc))
                self._last_error = f"reward function: {exc}"
                self._abort_group(g, "reward_timeout")
            return
        except (RewardError, RewardAborted):
            raise  # stops the run (its task fails): no group is scored by a broken reward
        except Exception as exc:  # a group that cannot be scored fairly is dropped whole
            if not g.closed or g.fate == "truncated":
                self._note("reward_error", g, error=repr(exc))
                self._last_error = f"reward function: {exc!r}"
                self._abort_group(g, "reward_error")
            return
        finally:
            self._scoring.pop(g.unit_id, None)
        if g.closed and g.fate != "truncated":
            return
        for c, reward in zip(committed, rewards):
            c.reward = reward
        self._complete_group(g)

    def _candidate_failed(self, g: GroupRun, c: CandidateRun, why: str) -> None:
        if g.closed or g.group.complete:
            return
        c.stop, c.failed = why, True
        self._report(g, g.group.fail(c.index))

    def _truncate_group(self, g: GroupRun) -> None:
        """A truncating STUCK release placed ``g`` (spec/PROTOCOL.md §6.2: it counts as finished
        with what it generated so far). Stop its running requests; each returns the tokens it
        decoded before the abort, and ``_run_group`` then commits them (``_commit_truncated``)
        and rewards the group as any complete group (``_score_group``: the user's reward, in
        its worker, on the truncated text). Until the group is written (or, its reward failed
        or equal, filtered) the trainer does not consume. A group already complete, its
        reward being computed, keeps its whole samples: nothing is cut."""
        g.closed, g.fate, g.truncated = True, "truncated", True
        self._truncating.add(g.unit_id)
        if g.group.complete:
            self._note("truncate", g, cut=[], samples=[], max_tokens=self.s.max_tokens)
            return
        self._stop_candidates(g, [g.candidates[i] for i in g.group.running], "truncate")

    def _commit_truncated(self, g: GroupRun) -> None:
        """Commit ``group_size`` of a truncated group's candidates, as the simulator's truncate
        does (``reserve_occupy_sim``'s ``Simulator.truncate``): those committed already, then
        any that finished on their own as the abort reached them, then the ones that decoded
        most (index order on ties). A kept candidate cut short has ``finish_reason
        "truncated"``; one stopped before its first token is kept with an empty response (its
        reward computed on the empty text), as the simulator keeps a queued member. The rest
        are surplus. The ``truncate`` note records, per candidate cut, the tokens it kept and
        at most how many the cut took (``max_tokens`` minus those: a real engine cannot know
        how long the answer would have been)."""
        order = sorted(g.group.running, key=lambda i: (g.candidates[i].finish_reason is None,
                                                       -len(g.candidates[i].token_ids), i))
        cut = []
        for i in order:
            if g.group.complete:
                break
            c = g.candidates[i]
            if c.finish_reason is None:
                c.finish_reason = "truncated"
                cut.append(i)
            g.group.finish(i)
        kept = [len(g.candidates[i].token_ids) for i in cut]
        self._note("truncate", g, cut=cut, samples=[
            {"candidate": i, "tokens_kept": n, "at_most_cut": max(0, self.s.max_tokens - n)}
            for i, n in zip(cut, kept)], max_tokens=self.s.max_tokens)

    def _report(self, g: GroupRun, progress: Any) -> None:
        self._stop_candidates(g, [g.candidates[i] for i in progress.surplus], "surplus")
        if progress.complete:
            self._scoring[g.unit_id] = self._spawn(self._score_group(g))
        elif progress.failed:
            self._abort_group(g, "candidates_failed")

    def _complete_group(self, g: GroupRun) -> None:
        truncated = g.fate == "truncated"  # placed already, by a truncating STUCK release
        g.closed, g.fate = True, "finished"
        self._truncating.discard(g.unit_id)
        rewards = [g.candidates[i].reward for i in g.group.committed]
        self.accounting.completed_rewards += rewards  # type: ignore[arg-type]
        no_gradient = self.s.filter_zero_variance and max(rewards) == min(rewards)  # type: ignore
        if no_gradient and not truncated and self.controller.keeps_no_gradient:
            self._keep_no_gradient(g, rewards[0])  # type: ignore[arg-type]
        elif no_gradient:
            # Known useless before placement (rewards come before occupy, spec §6.4), so its
            # reservation is dropped (spec §6.2: a unit found faulty) rather than occupied and
            # then filtered: occupying could complete a buffer and, under batch-level
            # oversampling, close spare slots and abort other groups' reservations for a group
            # that is dropped a moment later. A truncated unit is placed before its rewards
            # exist: it is filtered (spec §6.3), the same count.
            removal = (self.controller.drop_finished(g.unit_id, meta={"reason": "no_gradient"})
                       if truncated else
                       self.controller.abort(g.unit_id, meta={"reason": "no_gradient"}))
            g.fate = "filtered"
            self.groups.pop(g.unit_id, None)
            self._note("filter", g, reward=rewards[0])
            self._count_dropped("no_gradient")
            self._dropped_by_controller(removal.aborted)
        else:
            if self.persist is not None:  # the data is durable before the log says FINISHED
                self.persist.group_finished(g)  # (truncated: placed at the release, written
                # now; recovery knows the window, docs/recovery.md invariant 1)
            if not truncated:
                placement = self.controller.occupy(g.unit_id)
                self._note("occupy", g, slot=tuple(placement.slot))
                self._dropped_by_controller(placement.aborted)
            self._dropped_in_a_row = 0  # a group will train: the run makes progress
            self._dropped_reasons.clear()
        self._check()
        self._notify()

    def _keep_no_gradient(self, g: GroupRun, reward: float) -> None:
        """A finished group without gradient, for a peer's rule that discards such a group
        when its trainer samples (``controller.keeps_no_gradient``: verl's
        ``ReplayBufferAsync`` evicts it and refills 1:1 at the next sample, not when it
        finishes). It is placed marked (``occupy_no_gradient``) and stays, with its data, until
        the rule discards it at a ``consume`` (``take_dropped``: ``_after_peer_consume``
        forgets it then); the controller never batches it. It counts as dropped now, as the
        abort of the other rules' path does (the progress detector: it will not train)."""
        if self.persist is not None:  # the data is durable before the log says FINISHED
            self.persist.group_finished(g)
        placement = self.controller.occupy_no_gradient(g.unit_id)
        g.fate = "no_gradient"  # finished, waiting for the rule's next sample
        self._note("occupy", g, slot=tuple(placement.slot), no_gradient=True, reward=reward)
        self._count_dropped("no_gradient")
        self._dropped_by_controller(placement.aborted)

    def deliver_completion(self, unit_id: Any) -> bool:
        """A completion message for ``unit_id`` from outside the group's own task: a remote
        worker's report, a retry delivered twice, a report from before a restart. The group
        task places its own group; any other message is rejected and changes nothing. A
        message for a group still generating is premature (the driver holds its data and knows
        it is incomplete); every other one goes to the controller, whose typed errors reject it
        (``UnknownUnit``: never admitted; ``IllegalUnitState``: already finished, consumed,
        aborted or filtered). Rejections are counted and kept in the driver's notes."""
        g = self.groups.get(unit_id)
        if g is not None and g.fate == "in_flight":
            self._reject(unit_id, "premature", f"group {unit_id!r} is still generating")
            return False
        try:
            self.controller.occupy(unit_id)
        except UnitError as exc:
            self._reject(unit_id, type(exc).__name__, str(exc))
            return False
        raise RuntimeError(f"the controller accepted a completion message for {unit_id!r}, "
                           f"which the driver is not generating: driver and controller disagree")

    def _reject(self, unit_id: Any, error: str, detail: str) -> None:
        self.counts["rejected"] += 1
        self.notes.append({"t": self.accounting.elapsed(), "event": "rejected_completion",
                           "unit": unit_id, "error": error, "detail": detail})

    def _count_dropped(self, reason: str) -> None:
        """One more group ended without a place in a batch. Whatever the reason (equal
        rewards, failed candidates, a raising reward, the unit timeout, the STUCK release, the
        closing rule), a run that only ever loses groups can never train: stop it."""
        self._dropped_in_a_row += 1
        self._dropped_reasons[reason] = self._dropped_reasons.get(reason, 0) + 1
        if self._dropped_in_a_row >= self.s.max_dropped_in_a_row:
            last = f"; last error: {self._last_error}" if self._last_error else ""
            why = ", ".join(f"{k}: {v}" for k, v in sorted(self._dropped_reasons.items(),
                                                            key=lambda kv: -kv[1]))
            hint = ""
            if self._dropped_reasons.get("timeout"):
                hint = (f" Groups time out after timeouts.unit_s = {self.s.unit_s:g} s:"
                        f" is it shorter than a group's generation?")
            self._fail(RuntimeError(
                f"{self._dropped_in_a_row} groups in a row were dropped without training "
                f"({why}){last}. Is the reward constant, the task solved, or the engine "
                f"failing?{hint}"))

    def _abort_group(self, g: GroupRun, reason: str) -> None:
        """Drop a group: tell the controller (if it still holds it) and stop its requests. A
        truncated group whose reward failed is FINISHED there: it is filtered (spec §6.3)."""
        if g.fate == "truncated":
            self._truncating.discard(g.unit_id)
            removal = self.controller.drop_finished(g.unit_id, meta={"reason": reason})
            self._dropped_by_controller(removal.aborted)
        elif not g.closed and self.controller.unit_state(g.unit_id) is UnitState.IN_FLIGHT:
            removal = self.controller.abort(g.unit_id, meta={"reason": reason})
            self._dropped_by_controller(removal.aborted)
        self._close_aborted(g, reason)
        self._check()
        self._notify()

    def _dropped_by_controller(self, unit_ids: Sequence[Any]) -> None:
        """Units the controller aborted itself (closing rule, release_stuck): stop them."""
        for u in unit_ids:
            if u in self.groups:
                self._close_aborted(self.groups[u], "dropped_by_controller")

    def _close_aborted(self, g: GroupRun, reason: str) -> None:
        g.closed, g.fate = True, f"aborted:{reason}"
        self.groups.pop(g.unit_id, None)
        scoring = self._scoring.pop(g.unit_id, None)
        if scoring is not None and not scoring.done():
            scoring.cancel()  # a user's reward still running: its worker is ended
            if reason == "timeout":
                self._last_error = ("reward function: still scoring the group when "
                                    "timeouts.unit_s ran out")
        self._note("abort", g, reason=reason)
        self._stop_candidates(g, g.candidates, reason)
        if not self._stopping:  # once the run is over there is nothing left to detect
            self._count_dropped(reason)

    def _stop_candidates(self, g: GroupRun, candidates: Sequence[CandidateRun],
                         reason: str) -> None:
        ids = []
        for c in candidates:
            if c.stop is None and c.finish_reason is None:
                c.stop = reason
                if c.request_id in self._running:
                    ids.append(c.request_id)
        if ids:
            self._note("engine_abort", g, requests=ids, reason=reason)
            self._spawn(self.rollout.abort(ids))

    # ------------------------------------------------------------------ trainer --------------

    async def _trainer_loop(self) -> None:
        for step in range(self.start_step, self.s.steps):
            t_wait = self.clock.now()
            self._waiting_since = t_wait
            self._update_stuck()
            stream_s = 0.0  # of the wait, spent training streamed chunks
            while True:
                change = self._change
                if self._truncating:  # truncated units' samples not rewarded and written yet
                    await change.wait()
                    continue
                batch = self.controller.consume()
                self._after_peer_consume()
                if batch is not None:
                    break
                if self.s.streaming:
                    trained = await self._train_chunk()
                    if trained is not None:
                        stream_s += trained
                        continue  # the buffer may have filled meanwhile: look again now
                await change.wait()
            t_train = self.clock.now()
            self._waiting_since = self._stuck_since = None
            self.accounting.trainer_waited(t_train - t_wait - stream_s)
            self._check()
            # When the batch's last unit became final: the head buffer turned READY (an occupy,
            # or a refill that moved a unit in). The trainer's wait after it ends with the
            # optimiser step; streaming shortens it to the rest of the batch and the step.
            ready = self._ready_at if self._ready_at is not None else t_train
            self._ready_at = None
            self._mark_ready()  # the next buffer may be READY already (eta >= 1)
            streamed = len(self._handed_trained)
            train_batch = self._assemble(batch)
            if self.s.streaming:
                # Everything not trained in a chunk by this process: the units still arriving
                # when the buffer filled, handed units below chunk_groups, and after a
                # resume the units handed to the trainer that died (their partial gradient
                # died with it; the trainer trains them again here).
                self._handed, self._handed_trained = [], set()
                metrics = await self.trainer.finish_step(train_batch)
            else:
                metrics = await self.trainer.train_step(train_batch)
            tail_s = self.clock.now() - ready
            weights = await self.trainer.export_weights(batch.version + 1)
            if self.persist is not None:  # a trainer checkpoint, before the version is public
                await self.persist.before_publish(
                    batch.version + 1, batch,
                    (sum(len(s.token_ids) for _, s in train_batch.samples),
                     dict(metrics) if isinstance(metrics, dict) else {}))
            t_sync = self.clock.now()
            await self._sync_weights(weights)
            t_end = self.clock.now()
            record = self.accounting.step(step, batch, train_batch, metrics,
                                          (t_wait, t_train, t_sync, t_end),
                                          {**self.counts, **self.log_counts.counts()},
                                          self.lengths.figures(self.log_counts.take_fates()),
                                          stream=(stream_s, tail_s, streamed))
            if self.keep_records:
                self.records.append(record)
            if self.forget_counted:  # counted, and in the log's file: memory need not keep them
                self.controller.forget_events(self.log_counts.seen)
            if self.on_step is not None:
                self.on_step(record)
            if self.after_step is not None:
                await self.after_step(record)

    async def _train_chunk(self) -> float | None:
        """Streaming: take the head buffer's units that became final since the last look
        (``stream``) and, once ``chunk_groups`` are waiting, train them as one chunk
        (forward/backward, no optimiser step). Returns the seconds it trained, or None when it
        trained nothing. Called only while the trainer waits for the head buffer, so the
        controller is IDLE and the trainer free; the handed units stay in ``groups`` and in
        the batch ``consume`` returns."""
        handed = self.controller.stream()
        if handed:
            self._handed += handed
            self.notes.append({"t": self.accounting.elapsed(), "event": "stream",
                               "units": [u.unit_id for u in handed]})
        # A peer's rule chose the chunk (runtime.peers): it left the rule's buffer, so its
        # admission may open (NeMo-RL's permits) and the rule may have evicted stale units
        # (weight_fifo); a chunk that closed the step wakes the trainer's loop to consume it.
        self._after_peer_consume()
        if not self._handed or len(self._handed) < self.s.chunk_groups:
            return None
        chunk, self._handed = self._handed, []
        t0 = self.clock.now()
        await self.trainer.accumulate(assemble(Batch(self.controller.head, tuple(chunk)),
                                               self.groups))
        self._handed_trained.update(u.unit_id for u in chunk)
        self.notes.append({"t": self.accounting.elapsed(), "event": "train_chunk",
                           "units": [u.unit_id for u in chunk]})
        return self.clock.now() - t0

    def _after_peer_consume(self) -> None:
        """A peer's rule (``runtime.peers``; Reserve–Occupy's controller answers these calls
        empty) may drop finished units at ``consume`` or ``publish`` (verl's stale evictions,
        ROLL's old cohorts, the groups without gradient it was handed marked): forget their
        data; and abort in-flight ones (ROLL): stop them.
        Its admission may open at a consume that returned a batch (NeMo-RL's buffer permits,
        verl's refills), as the simulator asks the rule to admit after it: wake admission. A
        consume that returns no batch may also admit groups or set the rule's timer (AReaL's
        ``prepare_batch`` round): wake admission and the watchdog then too, but not after
        every empty consume (the trainer's loop would spin). ``take_admission_moved`` says
        both."""
        moved = self.controller.take_admission_moved()
        dropped = self.controller.take_dropped()
        for unit_id in dropped:
            g = self.groups.pop(unit_id, None)
            if g is not None and g.fate == "no_gradient":  # placed marked: filtered at sample
                g.fate = "filtered"
                self._note("filter", g, at="sample")
            elif g is not None:
                g.fate = "dropped:stale"
                self._note("drop", g, reason="stale")
        aborted = self.controller.take_aborted()  # in flight, stopped by the rule (ROLL)
        self._dropped_by_controller(aborted)
        if dropped or aborted or moved:
            self._notify()

    def _assemble(self, batch: Batch) -> TrainBatch:
        train_batch = assemble(batch, self.groups)
        for unit in batch.units:
            self.groups.pop(unit.unit_id).fate = "consumed"
        return train_batch

    async def _sync_weights(self, weights: Any) -> None:
        """Pause, load, publish, resume. Between the pause and the resume nothing generates.
        ``refit == "abort"``: the pause ends every running request, so each segment ran under
        exactly one version. ``"keep"``: running requests stay frozen in the engine and
        continue after the resume; their segments carry the refit points (``Segment.refits``).
        A request of either mode that returns ``abort`` because of the pause is resumed with
        its tokens (partial rollout)."""
        self._open.clear()
        for c in self._running.values():
            c.paused = True
        await self.rollout.pause(self.s.refit)
        while self.s.refit == "abort" and self._running:  # every paused request has returned
            change = self._change
            await change.wait()
        version = self.controller.version + 1  # what publish makes public
        await self.rollout.load_weights(weights, version)
        if self.s.refit == "keep":
            # The requests carried across this refit, for the record: those still running
            # after the load. The pause and the load end the ones not really in an engine (a
            # pool's waiting requests, a vLLM request not yet prefilled), which are started
            # again after the resume and are not counted.
            self.notes.append({"t": self.accounting.elapsed(), "event": "refit_kept",
                               "requests": len(self._running)})
        self.controller.publish()
        self._after_peer_consume()  # a peer's rule may drop or abort units at publish
        self.engine_version = self.controller.version
        if self.engine_version != version:
            raise RuntimeError(f"publish made version {self.engine_version}, the engine was "
                               f"told {version}")
        self._check()
        await self.rollout.resume()
        for c in self._running.values():  # kept requests run on: no longer paused (an abort
            c.paused = False              # from now on ends the candidate, it is no resume)
        self._open.set()
        self._notify()

    # ------------------------------------------------------------------ timeouts -------------

    async def _watchdog(self) -> None:
        while True:
            change = self._change
            self._release_overdue()
            deadline = self._next_deadline()
            sleeper = asyncio.ensure_future(self.clock.sleep(deadline - self.clock.now()))
            waker = asyncio.ensure_future(change.wait())
            try:
                await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                waker.cancel()

    @property
    def stuck_rule(self) -> StuckTimeouts:
        """The STUCK timeout in force, with its back-off and escalation
        (``reserve_occupy.stuck``)."""
        rule = self.__dict__.get("_stuck_rule")
        if rule is None:
            rule = self.__dict__["_stuck_rule"] = StuckTimeouts(self.s.stuck_s)
        return rule

    def _next_deadline(self) -> float:
        deadline = self.controller.timer  # a peer's rule's timer (Reserve–Occupy: inf)
        if self._stuck_since is not None:
            deadline = min(deadline, self._stuck_since + self.stuck_rule.timeout)
        if self.s.unit_s < math.inf:
            for g in self.groups.values():
                if not g.closed:  # admission order = deadline order: the first open one
                    deadline = min(deadline, g.admitted_at + self.s.unit_s)
                    break
        return deadline

    def _release_overdue(self) -> None:
        now = self.clock.now()
        if now >= self.controller.timer:  # a peer's rule's timer (Reserve–Occupy: inf)
            self.controller.fire_timer()
            self._notify()  # the rule may admit now
        for g in list(self.groups.values()):
            # Compared as in _next_deadline (a sum, not a difference): with floats,
            # now - t0 >= d can be false at now == t0 + d, and the watchdog would spin.
            if not g.closed and now >= g.admitted_at + self.s.unit_s:
                self._abort_group(g, "timeout")
        if self._stuck_since is not None and now >= self._stuck_since + self.stuck_rule.timeout:
            # staleness.stuck_action (spec/PROTOCOL.md §6.2, "Options of the release"): retry:
            # the release is the same; the released groups' prompts are admitted again before
            # the stream's next, through the re-admission queue (recovery re-admits them too).
            # truncate: the core placed the units it names FINISHED (it returns them first);
            # the driver ends their requests and makes their partial outputs their samples.
            action = self.controller.release_action
            retry = action == "retry"
            released = self.controller.release_stuck(meta={"reason": {
                "retry": "stuck_retry", "truncate": "stuck_truncate"}.get(
                    action or "", "stuck_timeout")})
            truncated = [u for u in released
                         if self.controller.unit_state(u) is UnitState.FINISHED]
            self.notes.append({"t": self.accounting.elapsed(), "event": "release_stuck",
                               "units": list(released), **({"retry": True} if retry else {}),
                               **({"truncated": truncated} if truncated else {})})
            if retry:
                self._readmit += [(self.groups[u].prompt_position, u) for u in released
                                  if u in self.groups]
            self._stuck_since = None
            for u in truncated:
                self._truncate_group(self.groups[u])
            self._dropped_by_controller([u for u in released if u not in truncated])
            # A release with no placement since the previous one: the next waits twice as
            # long, and units in flight since before the previous release are aborted wherever
            # their buffer (reserve_occupy.stuck; spec/PROTOCOL.md §6.2).
            cutoff = self.stuck_rule.released(self.controller, now) if released else None
            if cutoff is not None:
                for g in list(self.groups.values()):
                    if not g.closed and g.fate == "in_flight" and g.admitted_at < cutoff:
                        self._abort_group(g, "stuck_escalation")
            self._check()
            self._notify()

    def _update_stuck(self) -> None:
        """Start (or stop) the STUCK clock: the trainer waits and the head buffer is STUCK."""
        if self._waiting_since is None:
            return
        if self.controller.head_status is not BufferStatus.STUCK:
            self._stuck_since = None
        elif self._stuck_since is None:
            self._stuck_since = self.clock.now()
            if self.s.stuck_s < math.inf:
                self.stuck_rule.refresh(self.controller)

    # ------------------------------------------------------------------ bookkeeping ----------

    def _mark_ready(self) -> None:
        """Remember when the head buffer became READY (the step's ``tail_s`` starts there)."""
        if self._ready_at is None and self.controller.head_status is BufferStatus.READY:
            self._ready_at = self.clock.now()

    def _notify(self) -> None:
        """Wake every task waiting for the controller's state to change."""
        self._update_stuck()
        self._mark_ready()
        self._change.set()
        self._change = asyncio.Event()

    def _request_started(self, request_id: str, c: CandidateRun) -> None:
        self._running[request_id] = c
        self.accounting.engine_busy(True)

    def _request_ended(self, request_id: str) -> None:
        self._running.pop(request_id, None)
        if not self._running:
            self.accounting.engine_busy(False)
            self._notify()

    def _check(self) -> None:
        if self.s.check_invariants:
            self.controller.check()

    def _note(self, event: str, g: GroupRun, c: CandidateRun | None = None, **extra: Any) -> None:
        row = {"t": self.accounting.elapsed(), "event": event, "unit": g.unit_id}
        if c is not None:
            row["candidate"] = c.index
        row.update(extra)
        self.notes.append(row)
