"""Fault schedules in the discrete-event simulator (``reserve_occupy_sim``), where the fault
applies.

The simulator drives the real ``StalenessController`` through the ``ReserveOccupy`` policy; a
``FaultyReserveOccupy`` subclass injects faults at the first simulator event at or after their
time (the simulator calls ``admit`` after every event), and runs ``check()`` after every
controller operation (``check_every=1``). Faults:

* ``engine_crash`` -- every request running on instance ``target`` is lost: the policy aborts
  each affected group in the controller (and any reservation the closing rule drops) and in the
  simulator.
* ``hung`` -- one trajectory of group ``target`` never finishes (10^9 tokens); the STUCK
  timeout (spec §6.2) must release it, so the run still ends in bounded simulated time.
* ``nan_reward`` -- group ``target``'s reward is NaN: it carries no usable gradient and is
  filtered after placement (spec §6.3).
* ``duplicate`` / ``late`` / ``unknown`` -- an ``occupy`` for a finished or consumed / aborted or
  filtered / never admitted unit must raise the controller's typed error and change nothing.
* ``restart`` -- the controller is rebuilt from its event log, written out and read back through
  the trace format, while the engines keep generating (a restarted controller actor). A
  schedule with only restarts must give a result identical to the run without them.

Every run then passes the simulator's own end-of-run checks (conservation, filtering, released
groups, token accounting, full batches, staleness within eta).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from reserve_occupy import IllegalUnitState, UnitState, UnknownUnit, replay
from reserve_occupy.trace import dumps, parse_lines, trace_records

from reserve_occupy_sim.model.checks import CheckFailed, check_run
from reserve_occupy_sim.model.core import SimGroup, SimulationError, Simulator
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.engine import Request
from reserve_occupy_peers.reserve_occupy import ReserveOccupy
from reserve_occupy_sim.model.workload import GroupSpec, Workload

SIM_KINDS = ("engine_crash", "hung", "nan_reward", "duplicate", "late", "unknown", "restart")
HUNG_LENGTH = 10**9
END_BOUND_S = 1e6  # a run still going after this much simulated time did not release a hang


@dataclass(frozen=True)
class SimFault:
    kind: str
    at: float = 0.0
    target: int = 0

    def describe(self) -> str:
        if self.kind in ("hung", "nan_reward"):
            return f"group {self.target}: {self.kind.replace('_', ' ')}"
        return f"t={self.at:.1f}s {self.kind.replace('_', ' ')} ({self.target})"


@dataclass(frozen=True)
class SimSchedule:
    seed: int
    eta: int = 1
    batch_size: int = 3
    capacity: int = 3
    instances: int = 2
    concurrency: int = 6
    batches: int = 8
    faults: tuple[SimFault, ...] = field(default_factory=tuple)
    # what the STUCK release does (spec/PROTOCOL.md §6.2, "Options of the release")
    stuck_action: str = "release"

    def describe(self) -> str:
        head = (f"sim seed {self.seed}: eta={self.eta} B={self.batch_size} C={self.capacity} "
                f"instances={self.instances}x{self.concurrency} batches={self.batches}"
                + ("" if self.stuck_action == "release" else f" stuck={self.stuck_action}"))
        return "\n".join([head] + [f"  - {f.describe()}" for f in self.faults] or ["  (none)"])

    def without(self, index: int) -> SimSchedule:
        return replace(self, faults=self.faults[:index] + self.faults[index + 1:])


def generate_sim(seed: int) -> SimSchedule:
    rng = random.Random(f"sim/{seed}")
    b = rng.choice((2, 3, 4))
    s = SimSchedule(seed, eta=rng.choice((1, 1, 2, 3)), batch_size=b,
                    capacity=b + rng.choice((0, 0, 1)), instances=rng.choice((1, 2, 3)),
                    concurrency=rng.choice((4, 6, 8)), batches=rng.choice((6, 8, 10)))
    horizon = 2.5 * s.batches
    faults = []
    for _ in range(rng.choice((1, 2, 3, 4))):
        kind = rng.choice(SIM_KINDS)
        if kind in ("hung", "nan_reward"):
            faults.append(SimFault(kind, target=rng.randrange(b * s.batches * 2)))
        else:
            faults.append(SimFault(kind, at=rng.uniform(0, horizon),
                                   target=rng.randrange(1000)))
    return replace(s, faults=tuple(faults))


def _workload(s: SimSchedule) -> Workload:
    rng = random.Random(f"workload/{s.seed}")
    hung = {f.target for f in s.faults if f.kind == "hung"}
    groups = []
    for g in range(200):
        lens = [rng.randint(20, 400) for _ in range(4)]
        if g in hung:
            lens[rng.randrange(4)] = HUNG_LENGTH
        groups.append(GroupSpec(g, rng.randint(10, 60), tuple(lens)))
    return Workload(f"faults-{s.seed}", tuple(groups))


class FaultyReserveOccupy(ReserveOccupy):
    def __init__(self, s: SimSchedule, injected: Counter[str], violations: list[str]) -> None:
        super().__init__(s.eta, capacity=s.capacity, check_every=1, stuck_timeout_s=3.0,
                         stuck_action=s.stuck_action)
        self.pending = sorted((f for f in s.faults if f.kind not in ("hung", "nan_reward")),
                              key=lambda f: f.at)
        self.nan = {f.target for f in s.faults if f.kind == "nan_reward"}
        self.injected, self.violations = injected, violations
        self.checks = 0

    def admit(self) -> None:
        while self.pending and self.pending[0].at <= self.sim.now:
            self._apply(self.pending.pop(0))
        super().admit()

    def on_group_done(self, group: SimGroup) -> None:
        if group.gid in self.nan:
            group.no_grad = True  # a NaN reward: no usable gradient, filtered after placement
            self.injected["nan_reward"] += 1
        super().on_group_done(group)

    def _tick(self) -> None:
        super()._tick()
        self.checks += 1

    def _apply(self, f: SimFault) -> None:
        if f.kind == "engine_crash":
            self._crash(self.sim.instances[f.target % len(self.sim.instances)])
        elif f.kind == "restart":
            self._restart()
        else:
            self._message(f.kind, f.target)
        self.injected[f.kind] += 1

    def _crash(self, instance: Any) -> None:
        hit = {req.group.gid for _, _, req in instance._heap  # type: ignore[union-attr]
               if req.state == Request.RUNNING}
        for gid in sorted(hit):
            group = self._groups.get(gid)
            if group is None or group.state != SimGroup.RUNNING:
                continue
            if self.controller.unit_state(gid) is not UnitState.IN_FLIGHT:
                continue
            removal = self.controller.abort(gid)
            self.sim.abort_group(self._groups.pop(gid))
            for unit in removal.aborted:
                self.sim.abort_group(self._groups.pop(unit))
            self._tick()

    def _restart(self) -> None:
        """Rebuild the controller from its log, through the trace format's text."""
        old = self.controller
        lines = [dumps(r) for r in trace_records(old.config, old.events)]
        header, entries = parse_lines(lines)
        new = replay(header.config, [e.event for e in entries])
        new.check()
        if new.snapshot() != old.snapshot():
            self.violations.append("restart: the controller rebuilt from its log differs")
        self.controller = new
        self.checks += 1

    def _message(self, kind: str, target: int) -> None:
        ctl = self.controller
        wanted = {"duplicate": (UnitState.FINISHED, UnitState.CONSUMED),
                  "late": (UnitState.ABORTED, UnitState.FILTERED)}.get(kind, ())
        pool = ([g.gid for g in self.sim.groups if ctl.unit_state(g.gid) in wanted]
                if wanted else [])
        unit = pool[target % len(pool)] if pool else 10**6 + target
        expected = IllegalUnitState if pool else UnknownUnit
        before, n = ctl.snapshot(), len(ctl.events)
        try:
            ctl.occupy(unit)
            self.violations.append(f"a {kind} occupy of {unit} was accepted")
        except expected:
            pass
        except Exception as exc:  # the wrong error type is a violation too
            self.violations.append(f"a {kind} occupy of {unit} raised {exc!r}")
        self.checks += 1
        if ctl.snapshot() != before or len(ctl.events) != n:
            self.violations.append(f"a rejected {kind} occupy of {unit} changed the controller")


@dataclass
class SimOutcome:
    schedule: SimSchedule
    violations: list[str] = field(default_factory=list)
    injected: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    result: str = ""
    stuck: Counter[str] = field(default_factory=Counter)  # groups the STUCK release ended, by how

    @property
    def ok(self) -> bool:
        return not self.violations


def run_sim_schedule(s: SimSchedule, policy_class: type[FaultyReserveOccupy]
                     = FaultyReserveOccupy) -> SimOutcome:
    out = SimOutcome(s)
    policy = policy_class(s, out.injected, out.violations)
    cost = replace(preset("toy"), instances=s.instances, concurrency=s.concurrency)
    sim = Simulator(policy, _workload(s), cost, batches=s.batches, batch_size=s.batch_size)
    try:
        sim.run()
        check_run(sim)
        out.checks += 6
        if sim.now > END_BOUND_S:
            out.violations.append(f"the run took {sim.now:.3g} simulated seconds: a hung "
                                  f"generation was never released")
        policy.controller.check()
    except (CheckFailed, SimulationError, AssertionError) as exc:
        out.violations.append(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # the run broke: as much a finding as a failed check
        out.violations.append(f"the run raised {exc!r}")
    hung = {f.target for f in s.faults if f.kind == "hung"}
    for g in sim.groups:
        if g.gid in hung:
            out.injected["hung"] += 1
    out.checks += policy.checks
    out.stuck.update(released=len(policy.released), retried=len(policy.retried),
                     truncated=len(policy.truncated))
    out.result = json.dumps([[b.version, b.tids, b.staleness] for b in sim.ledger.batches])
    if not out.violations and s.faults and all(f.kind == "restart" for f in s.faults):
        plain = run_sim_schedule(replace(s, faults=()), policy_class)
        out.checks += 1
        if plain.result != out.result:
            out.violations.append("restarting the controller from its log changed the run")
    return out


class CrashWithoutAbort(FaultyReserveOccupy):
    """Broken: on an engine crash it stops the groups in the simulator but does not abort
    them in the controller, whose reservations then wait for generations that will never
    finish. Caught: the STUCK timeout later releases a group the simulator no longer runs."""

    def _crash(self, instance: Any) -> None:
        for _, _, req in list(instance._heap):
            group = self._groups.get(req.group.gid)
            if group is not None and group.state == SimGroup.RUNNING:
                self.sim.abort_group(self._groups.pop(group.gid))


class RestartFromLastPublish(FaultyReserveOccupy):
    """Broken: rebuilds the controller only from the log up to its last publish (as if the
    events after the last checkpoint did not matter). Caught: the rebuilt state differs."""

    def _restart(self) -> None:
        old = self.controller
        events = list(old.events)
        while events and events[-1].op != "publish":
            events.pop()
        self.controller = replay(old.config, events)
        if self.controller.snapshot() != old.snapshot():
            self.violations.append("restart: the controller rebuilt from its log differs")


SIM_VARIANTS: dict[str, type[FaultyReserveOccupy]] = {
    "sim_crash_without_abort": CrashWithoutAbort,
    "sim_restart_from_last_publish": RestartFromLastPublish,
}
