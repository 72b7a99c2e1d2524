"""Run one fault schedule against the real driver, controller, durability and recovery code.

Everything but the engines and the trainer is production code: ``Driver``, the
``JournaledController`` (``check()`` after every operation), ``RunStore`` writing real files in
a temporary run directory, ``EnginePool``, and ``recover``. Engines are ``CrashableRollout``s and
the trainer a ``HashTrainer`` (``fakes``), all on one ``VirtualClock`` that carries on across
restarts, so a schedule runs in milliseconds and exactly reproducibly.

A process crash is simulated by the ``Crash`` guard: the incarnation's next durable write raises
``SimulatedCrash`` (after writing a torn prefix when asked), as does every later one, and the
harness throws the incarnation's objects away. Only the run directory survives, as after a
SIGKILL; the next incarnation starts with ``recover``. A rank loss is no crash: the trainer
raises the sharded trainer's ``RankLost`` and the production code handles it as it would (the
driver stops the run: its tasks end, in-flight units are aborted, the store is closed, and the
exception leaves ``Driver.run``, as ``train`` then exits 1); the incarnation must end with that
``RankLost``, and the next one resumes from the run directory on a new trainer of the fault's
world size, as ``train --resume`` with another ``trainer.world_size`` does. The ``Evidence``
collected on the way feeds ``properties``.

Termination: at most ``MAX_INCARNATIONS`` incarnations, and the virtual clock (``WatchedClock``)
ends a run still going at ``MAX_VIRTUAL_S`` simulated seconds or after ``MAX_WAKEUPS`` jumps
(schedules need under 2 s and under 100 jumps): a driver that times out, re-admits and times out
again forever is reported as a violation instead of hanging the harness.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reserve_occupy import UnitState

from runtime.clock import VirtualClock
from runtime.driver import Driver
from runtime.recovery.durable import RecoverySettings, RunStore
from runtime.recovery.journal import EmptyLog, LogCorrupt, read_log, rebuild
from runtime.recovery.resume import Recovery, recover
from runtime.rollout.fake import Plan, random_script
from runtime.rollout.pool import EnginePool
from runtime.scratch import remove, scratch_dir
from runtime.tasks.base import Prompt
from runtime.records import DriverSettings
from runtime.trainer.sharded import RankLost

from .properties import CHECKS, CrashPoint, Evidence, RankLoss
from .fakes import INITIAL, Crash, CrashableRollout, HashTrainer, SimulatedCrash, Weights
from .schedule import FIRST_WORLD_SIZE, RESTARTS, Schedule

PROMPTS = [Prompt(f"{i % 10}+{i // 10}=", str(i % 10 + i // 10), i) for i in range(40)]
TRAIN_S = 0.05
MAX_INCARNATIONS = 12
MAX_VIRTUAL_S = 600.0  # a schedule still running at this virtual time makes no progress
MAX_WAKEUPS = 1_000  # nor one whose clock jumped this often (schedules need under 100)


class NoProgress(RuntimeError):
    """The run passed ``MAX_VIRTUAL_S`` or ``MAX_WAKEUPS`` on the virtual clock."""


class WatchedClock(VirtualClock):
    """The harness's virtual clock: counts its jumps over all incarnations and raises
    ``NoProgress`` past either bound, so a livelocked driver ends the schedule, not the harness."""

    def __init__(self, start: float = 0.0, wakeups: int = 0) -> None:
        super().__init__(start)
        self.wakeups = wakeups

    def advance(self) -> bool:
        self.wakeups += 1
        if self.wakeups > MAX_WAKEUPS or self._now > MAX_VIRTUAL_S:
            raise NoProgress(f"the run was still going at {self._now:.3g} virtual seconds after "
                             f"{self.wakeups:,} clock jumps (schedules finish in under 2 s and "
                             f"under 100 jumps): it makes no progress")
        return super().advance()


def parity_reward(prompt: Prompt, completion: str) -> float:
    """Reward with variance inside most groups: 1 when the completion has even length."""
    return float(len(completion) % 2 == 0)


@dataclass
class Outcome:
    schedule: Schedule
    violations: list[str] = field(default_factory=list)
    injected: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    incarnations: int = 0
    events: int = 0
    recovery: Counter[str] = field(default_factory=Counter)  # what recoveries did

    @property
    def ok(self) -> bool:
        return not self.violations


class Variant:
    """Hooks a broken variant overrides (``reserve_occupy_faults.variants``); the default is the
    production behaviour."""

    name = "production"

    def driver_class(self) -> type[Driver]:
        return Driver

    recovery_class: type[Recovery] = Recovery

    async def recover(self, **kwargs: Any) -> Any:
        return await recover(recovery_class=self.recovery_class, **kwargs)


class Run:
    def __init__(self, schedule: Schedule, root: Path, variant: Variant) -> None:
        self.s, self.root, self.variant = schedule, root, variant
        self.outcome = Outcome(schedule)
        self.settings = DriverSettings(
            max_staleness=schedule.eta, batch_size=schedule.batch_size,
            group_size=schedule.group_size, candidates=schedule.candidates,
            capacity=schedule.capacity, steps=schedule.steps,
            max_tokens=6, unit_s=2.0, stuck_s=1.0, seed=schedule.seed,
            check_invariants=True)
        self.recovery = RecoverySettings(commit_every=schedule.commit_every,
                                         keep_checkpoints=2, fsync=False)
        if schedule.stuck_action != "release":  # the STUCK release's option (spec §6.2)
            self.settings = dataclasses.replace(self.settings,
                                                stuck_action=schedule.stuck_action)
        self.ev = Evidence(root / "events.jsonl", schedule.eta, schedule.steps, PROMPTS)
        self.pending = sorted((f for f in schedule.faults if f.kind not in RESTARTS
                               and f.kind not in ("hung", "nan_reward", "lose_trajectory")),
                              key=lambda f: f.at)
        self.restarts = [f for f in schedule.faults if f.kind in RESTARTS]
        self.lose = [f for f in schedule.faults if f.kind == "lose_trajectory"]
        hung = {f"g{f.target}-c{f.arg}-s0" for f in schedule.faults if f.kind == "hung"}
        base = random_script(schedule.seed, per_token_s=0.01, max_len=5)

        def script(request: Any, version: int) -> Plan:
            if request.request_id in hung:
                self.outcome.injected["hung"] += 1
                return Plan(math.inf, [])
            return base(request, version)

        self.script = script
        self.nan_at = {f.target for f in schedule.faults if f.kind == "nan_reward"}
        self.rewards = 0
        self.now = 0.0
        self.wakeups = 0  # virtual clock jumps over all incarnations (WatchedClock)
        self.deleted: set[Any] = set()  # trajectory files lose_trajectory removed so far
        self.crash_log: list[Crash] = []  # each incarnation's switch (its writes' kinds)
        self.worlds: list[int] = []  # each incarnation's trainer's world size
        self.reports: list[Any] = []  # each recovery's report

    def reward(self, prompt: Prompt, completion: str) -> float:
        self.rewards += 1
        if self.rewards in self.nan_at:
            self.outcome.injected["nan_reward"] += 1
            return float("nan")
        return parity_reward(prompt, completion)

    # ------------------------------------------------------------------ one incarnation ------

    def _crash_for(self, incarnation: int) -> Crash:
        if incarnation >= len(self.restarts):
            return Crash()
        f = self.restarts[incarnation]
        if f.kind == "crash":
            return Crash(at_write=f.target, torn=f.arg)
        return Crash(trainer=(f.what, f.arg or 1), rank_loss=f.kind == "rank_loss")

    def _world_for(self, incarnation: int) -> int:
        """The trainer's ranks: ``FIRST_WORLD_SIZE``, then after a rank loss the size the fault
        names (a process crash, or a rank loss naming 0, resumes on the same size)."""
        if incarnation == 0:
            return FIRST_WORLD_SIZE
        before = self.restarts[incarnation - 1]
        return (before.kind == "rank_loss" and before.target) or self.worlds[incarnation - 1]

    def _record_saves(self, store: RunStore) -> None:
        save = store.trajectories.save

        def recording(unit: Any, record: dict[str, Any]) -> None:
            save(unit, record)
            if unit in self.ev.saved:
                self.ev.duplicate_saves.append(unit)
            self.ev.saved[unit] = record

        store.trajectories.save = recording  # type: ignore[method-assign]

    def _crash_point(self) -> CrashPoint:
        """What the durable log says at this restart (before recovery touches it)."""
        try:
            contents = read_log(self.ev.log_path)
        except EmptyLog:
            return CrashPoint(0, set(), set())
        ctl = rebuild(contents, contents.config)
        units = ctl.snapshot().units
        cp = CrashPoint(len(contents.events),
                        {u.unit_id for u in units if u.state is UnitState.FINISHED},
                        {u.unit_id for u in units if u.state is UnitState.IN_FLIGHT})
        from runtime.recovery.store import unit_filename

        path = self.root / "trajectories"
        cp.unwritten = {u for u in cp.finished - self.deleted
                        if not (path / unit_filename(u)).exists()}
        written = cp.finished - cp.unwritten  # (a fault removes a file that was written)
        if self.lose and written:
            f = self.lose.pop(0)
            victim = sorted(written, key=str)[f.target % len(written)]
            (path / unit_filename(victim)).unlink(missing_ok=True)
            self.deleted.add(victim)
            self.outcome.injected["lose_trajectory"] += 1
        cp.deleted = set(self.deleted)  # a file a fault removed stays removed at later restarts
        return cp

    def _loop_error(self, loop: Any, context: dict[str, Any]) -> None:
        """A task or future failed and nobody looked: fine for the crash itself (a dead
        process's tasks die with it), a violation for anything else."""
        exc = context.get("exception")
        if isinstance(exc, SimulatedCrash):
            return
        self.outcome.violations.append(f"unhandled error in a task: {context.get('message')} "
                                       f"{exc!r}")

    async def _incarnation(self, k: int, clock: VirtualClock, crash: Crash) -> None:
        asyncio.get_running_loop().set_exception_handler(self._loop_error)
        trainer = HashTrainer(clock, TRAIN_S, crash, self.worlds[k])
        self.trainer = trainer
        engines: list[CrashableRollout] = []
        delays: dict[int, float] = {}

        def engine(i: int) -> CrashableRollout:
            e = CrashableRollout(clock, self.script, f"e{i}")
            engines.append(e)
            self.engines = engines
            return e

        async def restart(i: int) -> CrashableRollout:
            await clock.sleep(delays.get(i, 0.1))
            return engine(i)

        pool = EnginePool([engine(i) for i in range(self.s.engines)], restart)
        self.pool = pool
        if k == 0:
            store, controller = RunStore.fresh(self.root, trainer, self.recovery,
                                               self.settings.controller_config(), crash.guard)
            controller.check_every_op = True
            resume, weights = None, Weights(0, INITIAL)
        else:
            cp = self._crash_point()
            self.ev.crashes.append(cp)
            rec = await self.variant.recover(
                run_dir=self.root, settings=self.settings, recovery=self.recovery,
                trainer=trainer, prompts=PROMPTS, guard=crash.guard, check_every_op=True,
                log=lambda _: None)
            cp.report = rec.report
            self.reports.append(rec.report)
            r, tally = rec.report, self.outcome.recovery
            tally.update({"recoveries": 1, "finished units reloaded": len(r.finished),
                          "in-flight units salvaged": len(r.salvaged),
                          "in-flight units aborted as lost": len(r.lost),
                          "finished units filtered (file lost)": len(r.missing),
                          "batches retrained": len(r.retrained),
                          "torn last lines dropped": int(bool(r.torn)),
                          "training batches published": int(r.published)})
            store, controller, resume = rec.store, rec.controller, rec.resume
            weights = rec.weights or Weights(0, INITIAL)
        self.controller = controller
        self._record_saves(store)
        await pool.pause()
        await pool.load_weights(weights)
        await pool.resume()
        driver = self.variant.driver_class()(
            self.settings, pool, trainer, self.reward, PROMPTS, clock, controller=controller,
            resume=resume, persist=store)
        self.driver = driver
        injector = asyncio.ensure_future(self._inject(clock, driver, pool, delays))
        try:
            await driver.run()
        finally:
            injector.cancel()
            await asyncio.gather(injector, return_exceptions=True)
            await pool.close()
            store.close()

    async def _inject(self, clock: VirtualClock, driver: Driver, pool: EnginePool,
                      delays: dict[int, float]) -> None:
        while self.pending:
            f = self.pending[0]
            await clock.sleep(f.at - clock.now())
            self.pending.pop(0)
            if f.kind == "engine_crash":
                engine = pool.engines[f.target % len(pool.engines)]
                if engine is None:
                    continue  # already down
                delays[f.target % len(pool.engines)] = (f.arg or 0) / 10
                engine.crash()  # type: ignore[attr-defined]
                pool.engine_died(f.target % len(pool.engines), engine)
                self.outcome.injected["engine_crash"] += 1
            else:
                self._message(f.kind, f.target, driver)

    def _message(self, kind: str, target: int, driver: Driver) -> None:
        ctl = driver.controller
        units = [e.unit_id for e in ctl.events if e.op == "reserve"]
        wanted = {"duplicate": (UnitState.FINISHED, UnitState.CONSUMED),
                  "late": (UnitState.ABORTED, UnitState.FILTERED)}.get(kind, ())
        pool = [u for u in units if ctl.unit_state(u) in wanted]
        unit = pool[target % len(pool)] if pool else f"g{100_000 + target}"
        self.outcome.injected[kind if pool or kind == "unknown" else "unknown"] += 1
        before, n, rejected = ctl.snapshot(), len(ctl.events), driver.counts["rejected"]
        accepted = driver.deliver_completion(unit)
        self.outcome.checks += 1
        if (accepted or len(ctl.events) != n or ctl.snapshot() != before
                or driver.counts["rejected"] != rejected + 1):
            self.outcome.violations.append(
                f"a {kind} completion message for {unit!r} was not rejected cleanly "
                f"(accepted={accepted}, events {n} -> {len(ctl.events)})")

    # ------------------------------------------------------------------ the whole run --------

    def run(self) -> Outcome:
        out = self.outcome
        for k in range(MAX_INCARNATIONS):
            crash = self._crash_for(k)
            self.crash_log.append(crash)
            self.worlds.append(self._world_for(k))
            clock = WatchedClock(start=self.now, wakeups=self.wakeups)
            out.incarnations += 1
            self.controller = None
            try:
                clock.run(self._incarnation(k, clock, crash))
                finished = True
            except (SimulatedCrash, Exception) as exc:
                if not crash.ended:
                    out.violations.append(f"incarnation {k + 1} failed: {exc!r}")
                    return out
                if crash.lost:
                    self.ev.rank_losses.append(RankLoss(
                        k + 1, crash.lost, crash.kinds[crash.lost_after:], repr(exc),
                        isinstance(exc, RankLost)))
                out.injected[self.restarts[k].kind] += 1
                if crash.tore:
                    out.injected["torn log line"] += 1
                finished = False
            finally:
                self.now, self.wakeups = clock.now(), clock.wakeups
                self._collect()
            if finished:
                if crash.lost:  # the run went on after the trainer lost a rank
                    self.ev.rank_losses.append(RankLoss(
                        k + 1, crash.lost, crash.kinds[crash.lost_after:], None, False))
                    out.injected[self.restarts[k].kind] += 1
                break
        else:
            out.violations.append(f"still not done after {MAX_INCARNATIONS} incarnations")
            return out
        self.ev.final_digest, self.ev.final_steps = self.trainer.digest, self.trainer.steps
        for name, check in CHECKS:
            try:
                found, n = check(self.ev)
            except (LogCorrupt, Exception) as exc:
                found, n = [f"check {name} could not run: {exc!r}"], 1
            out.violations += [f"{name}: {v}" for v in found]
            out.checks += n
        return out

    def _collect(self) -> None:
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            self.ev.trained += trainer.batches
            trainer.batches = []
        for e in getattr(self, "engines", []):
            self.ev.loads += [w for _, w in e.loaded]
            e.loaded = []
        driver = getattr(self, "driver", None)
        if driver is not None:
            self.outcome.recovery["completion messages rejected"] += driver.counts["rejected"]
            self.driver = None
        if self.controller is not None:
            self.outcome.checks += len(self.controller.events)
            self.outcome.events = len(self.controller.events)


def run_schedule(schedule: Schedule, variant: Variant | None = None,
                 root: Path | None = None) -> Outcome:
    """Run ``schedule`` in a fresh temporary run directory (removed afterwards)."""
    own = root is None
    base = scratch_dir("ro-faults", Path(tempfile.gettempdir())) if own else root
    try:
        return Run(schedule, base, variant or Variant()).run()  # type: ignore[arg-type]
    finally:
        if own:
            remove(base)


__all__ = ["Outcome", "Run", "Variant", "run_schedule"]
