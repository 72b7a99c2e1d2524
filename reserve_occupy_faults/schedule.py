"""Seeded fault schedules: what goes wrong, when, in one deterministic run.

A ``Schedule`` is a small run configuration plus a tuple of ``Fault``s, all drawn from one seed.
The same schedule always gives the same run (virtual clock, scripted engines, seeded choices),
so a violation is reported as the seed and the minimal schedule that still shows it
(``minimize`` removes faults one at a time while the violation persists).

Fault kinds (``KINDS``), each with what its fields mean:

* ``engine_crash`` -- at time ``at`` engine ``target`` dies with all its requests; it restarts
  ``arg`` tenths of a second later and loads the current weights.
* ``hung`` -- the first request of candidate ``arg`` of group ``g<target>`` never completes;
  the unit and STUCK timeouts must release it.
* ``nan_reward`` -- the ``target``-th reward computed (counting from 1) is NaN.
* ``duplicate`` / ``late`` / ``unknown`` -- at time ``at`` a completion message arrives for a
  unit already finished or consumed / already aborted or filtered / never admitted.
* ``crash`` -- the process dies just before durable write ``target`` of its incarnation (log
  lines, trajectory files, checkpoints, deletions), leaving ``arg`` characters of a log line
  when ``arg`` is set (a torn write). The run restarts from the event log.
* ``trainer_crash`` -- the process dies inside the trainer's ``arg``-th call of kind ``what``
  (train, train-end, export, save): during a step, after it, exporting, checkpointing.
* ``rank_loss`` -- at the same points, one rank of the sharded trainer dies: the call raises
  ``RankLost`` (``runtime.trainer.sharded``) and that trainer refuses every later call. The
  process lives on: the driver stops the run its own way (in-flight units aborted as
  ``shutdown``, nothing of the failed step published), and the run is resumed from the event
  log on a new trainer of ``target`` ranks (1 to 3; 0: as many as before; the first trainer
  has 2).
* ``lose_trajectory`` -- at the next restart, the trajectory file of one finished unit
  (``target``-th, modulo their number) is gone; recovery must filter and report that unit.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

KINDS = ("engine_crash", "hung", "nan_reward", "duplicate", "late", "unknown", "crash",
         "trainer_crash", "rank_loss", "lose_trajectory")
TRAINER_CALLS = ("train", "train-end", "export", "save")
RESTARTS = ("crash", "trainer_crash", "rank_loss")  # each ends an incarnation; the run resumes
TRAINER_FAULTS = ("trainer_crash", "rank_loss")  # at the trainer's call ``what`` #``arg``
FIRST_WORLD_SIZE = 2  # ranks of the first incarnation's trainer


@dataclass(frozen=True)
class Fault:
    kind: str
    at: float = 0.0
    target: int = 0
    arg: int | None = None
    what: str = ""

    def describe(self) -> str:
        k = self.kind
        if k == "engine_crash":
            back = (self.arg or 0) / 10
            return f"t={self.at:.2f}s engine {self.target} crashes (back {back:.1f}s later)"
        if k == "hung":
            return f"g{self.target} candidate {self.arg} hangs"
        if k == "nan_reward":
            return f"reward #{self.target} is NaN"
        if k in ("duplicate", "late", "unknown"):
            return f"t={self.at:.2f}s a {k} completion message"
        if k == "crash":
            torn = f", torn after {self.arg} chars" if self.arg is not None else ""
            return f"process crash at durable write {self.target}{torn}"
        if k == "trainer_crash":
            return f"process crash in trainer {self.what} call #{self.arg}"
        if k == "rank_loss":
            return (f"a trainer rank is lost in {self.what} call #{self.arg} (RankLost); "
                    f"resumed on {self.target} rank(s)")
        return f"at the next restart, finished unit #{self.target}'s trajectory file is lost"


@dataclass(frozen=True)
class Schedule:
    seed: int
    eta: int = 1
    batch_size: int = 2
    group_size: int = 2
    candidates: int = 2
    capacity: int = 2
    engines: int = 2
    steps: int = 5
    commit_every: int = 2
    faults: tuple[Fault, ...] = field(default_factory=tuple)
    # what the STUCK release does (staleness.stuck_action; spec/PROTOCOL.md §6.2)
    stuck_action: str = "release"

    def describe(self) -> str:
        head = (f"seed {self.seed}: eta={self.eta} B={self.batch_size} C={self.capacity} "
                f"group {self.group_size}/{self.candidates} engines={self.engines} "
                f"steps={self.steps} commit_every={self.commit_every}"
                + ("" if self.stuck_action == "release" else f" stuck={self.stuck_action}"))
        return "\n".join([head] + [f"  - {f.describe()}" for f in self.faults] or ["  (none)"])

    def without(self, index: int) -> Schedule:
        return replace(self, faults=self.faults[:index] + self.faults[index + 1:])


def generate(seed: int) -> Schedule:
    """The schedule of ``seed``: a small configuration and one to four faults."""
    rng = random.Random(seed)
    eta = rng.choice((0, 1, 1, 2, 2, 3))
    b = rng.choice((2, 2, 3))
    g = rng.choice((2, 2, 3))
    steps = rng.choice((4, 5, 6))
    s = Schedule(seed, eta=eta, batch_size=b, group_size=g,
                 candidates=g + rng.choice((0, 0, 1)), capacity=b + rng.choice((0, 0, 1)),
                 engines=rng.choice((1, 2, 2, 3)), steps=steps,
                 commit_every=rng.choice((0, 1, 2, 3)))
    horizon = 0.15 * steps  # about how long a run lasts on the virtual clock
    writes = steps * (4 * b + 3)  # about how many durable writes one incarnation makes
    faults = []
    for _ in range(rng.choice((1, 2, 2, 3, 4))):
        kind = rng.choice(KINDS)
        if kind == "engine_crash":
            faults.append(Fault(kind, at=rng.uniform(0, horizon),
                                target=rng.randrange(s.engines), arg=rng.randint(0, 5)))
        elif kind == "hung":
            faults.append(Fault(kind, target=rng.randrange(3 * b * steps),
                                arg=rng.randrange(s.candidates)))
        elif kind == "nan_reward":
            faults.append(Fault(kind, target=rng.randint(1, 3 * b * g * steps)))
        elif kind in ("duplicate", "late", "unknown"):
            faults.append(Fault(kind, at=rng.uniform(0, horizon), target=rng.randrange(1000)))
        elif kind == "crash":
            torn = rng.randint(0, 80) if rng.random() < 0.5 else None
            faults.append(Fault(kind, target=rng.randint(1, writes), arg=torn))
        elif kind in TRAINER_FAULTS:
            world = rng.randint(1, 3) if kind == "rank_loss" else 0
            faults.append(Fault(kind, target=world, what=rng.choice(TRAINER_CALLS),
                                arg=rng.randint(1, steps)))
        else:
            faults.append(Fault(kind, target=rng.randrange(100)))
    return replace(s, faults=tuple(faults))


def minimize(schedule: Schedule, fails: Callable[[Schedule], bool]) -> Schedule:
    """Remove faults one at a time while ``fails`` still holds (a greedy, 1-minimal result)."""
    current = schedule
    changed = True
    while changed:
        changed = False
        for i in range(len(current.faults)):
            candidate = current.without(i)
            if fails(candidate):
                current, changed = candidate, True
                break
    return current
