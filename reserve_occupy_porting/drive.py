"""Seeded workloads that drive a controller and record its trace, refusals included.

``drive`` plays a random runtime against any ``StalenessController`` (the reference or a proofs
mutant) through its public operations only: admissions that retry after a wait, units or GRPO
groups that finish, fail or are filtered, a trainer that consumes, publishes and now and then
releases a STUCK head buffer. ``play`` runs a fixed script instead (the spec scenarios). Both
return the trace as records (``reserve_occupy.trace``): the controller's own events, with a
``refused`` record wherever the controller refused (the core logs nothing for those).

A controller that raises mid-run (a mutant breaking its own assertions) ends the recording; the
trace up to there is returned with the error, so a checker can still judge it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reserve_occupy import Config, Group, StalenessController, UnitId
from reserve_occupy.trace import event_to_record, header, refused_record


@dataclass(frozen=True)
class Profile:
    """How a random runtime behaves. Weights pick the next action; probabilities shape them."""

    steps: int = 120
    admit: float = 3.0  # weight of trying to admit a unit
    finish: float = 3.0  # weight of an in-flight unit (or group candidate) reporting
    train: float = 1.5  # weight of the trainer acting (consume, publish, release_stuck)
    filter: float = 0.15  # weight of filtering a finished unit
    fail: float = 0.06  # chance that a report is a failure (abort) instead of a finish
    release: float = 0.08  # chance the idle trainer gives up on a STUCK head buffer
    group_size: int = 0  # > 0: units are GRPO groups of this size
    candidates: int = 0  # > group_size: group-level oversampling
    int_ids: bool = False  # unit ids are ints instead of strings
    stream: float = 0.0  # chance the idle trainer streams after a step (Config.streaming)


@dataclass
class Recording:
    """What a drive produced: the header, the records, and the error that ended it, if any."""

    config: Config
    records: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def lines(self) -> list[dict[str, Any]]:
        return [header(self.config)] + self.records


class _Recorder:
    """Runs operations on a controller and appends the records, refusals included."""

    def __init__(self, controller: StalenessController) -> None:
        self.c = controller
        self.out = Recording(controller.config)
        self.logged = 0  # events the controller has logged so far

    def _took(self) -> None:
        # One new event per successful operation; reading only the newest keeps this O(1)
        # amortised instead of copying the whole log every step.
        event = self.c.last_event
        self.out.records.append(event_to_record(event))
        self.logged += 1

    def _refused(self, op: str, unit_id: UnitId | None = None) -> None:
        self.out.records.append(refused_record(op, unit_id, self.c.version, self.c.head))

    def reserve(self, unit_id: UnitId) -> bool:
        if self.c.reserve(unit_id) is None:
            self._refused("reserve", unit_id)
            return False
        self._took()
        return True

    def occupy(self, unit_id: UnitId) -> tuple[UnitId, ...]:
        placement = self.c.occupy(unit_id)
        self._took()
        return tuple(placement.aborted)

    def abort(self, unit_id: UnitId) -> tuple[UnitId, ...]:
        removal = self.c.abort(unit_id)
        self._took()
        return tuple(removal.aborted)

    def filter(self, unit_id: UnitId) -> tuple[UnitId, ...]:
        removal = self.c.filter(unit_id)
        self._took()
        return tuple(removal.aborted)

    def consume(self) -> tuple[UnitId, ...] | None:
        batch = self.c.consume()
        if batch is None:
            self._refused("consume")
            return None
        self._took()
        return batch.unit_ids

    def publish(self) -> None:
        self.c.publish()
        self._took()

    def release_stuck(self) -> tuple[UnitId, ...]:
        released = self.c.release_stuck()
        if not released:
            self._refused("release_stuck")
            return ()
        self._took()
        return tuple(released)

    def stream(self) -> tuple[UnitId, ...]:
        handed = self.c.stream()
        if not handed:
            self._refused("stream")
            return ()
        self._took()
        return tuple(u.unit_id for u in handed)


def drive(controller: StalenessController, seed: int, profile: Profile = Profile(),
          reraise: bool = False) -> Recording:
    """Play a seeded random runtime against ``controller``; see the module docstring."""
    rng = random.Random(seed)
    rec = _Recorder(controller)
    in_flight: dict[UnitId, Group | None] = {}  # admitted, still generating
    finished: list[UnitId] = []  # occupied, not yet consumed or filtered
    streamed: set[UnitId] = set()  # handed to the trainer: not filterable until consumed
    waiting: UnitId | None = None  # refused admission, retried next time
    training = False
    next_id = 0
    p = profile

    def gone(units: Sequence[UnitId]) -> None:
        for u in units:  # aborted by the controller (closing rule, release_stuck)
            in_flight.pop(u, None)

    def new_id() -> UnitId:
        nonlocal next_id
        next_id += 1
        return next_id if p.int_ids else f"u{next_id}"

    try:
        for _ in range(p.steps):
            filterable = [u for u in finished if u not in streamed] if streamed else finished
            action = rng.choices(("admit", "finish", "train", "filter"),
                                 (p.admit, p.finish if in_flight else 0.0, p.train,
                                  p.filter if filterable else 0.0))[0]
            if action == "admit":
                unit_id = waiting if waiting is not None else new_id()
                if rec.reserve(unit_id):
                    waiting = None
                    in_flight[unit_id] = (Group(unit_id, p.group_size, p.candidates or None)
                                          if p.group_size else None)
                else:
                    waiting = unit_id
            elif action == "finish":
                unit_id = rng.choice(list(in_flight))
                group = in_flight[unit_id]
                failed = rng.random() < p.fail
                if group is not None:
                    candidate = rng.choice(group.running)
                    progress = group.fail(candidate) if failed else group.finish(candidate)
                    if not (progress.complete or progress.failed):
                        continue
                    failed = progress.failed
                del in_flight[unit_id]
                if failed:
                    gone(rec.abort(unit_id))
                else:
                    gone(rec.occupy(unit_id))
                    finished.append(unit_id)
            elif action == "filter":
                unit_id = filterable[rng.randrange(len(filterable))]
                finished.remove(unit_id)
                gone(rec.filter(unit_id))
            elif training:
                rec.publish()
                training = False
            elif rng.random() < p.release:
                gone(rec.release_stuck())
            else:
                batch = rec.consume()
                if batch is not None:
                    training = True
                    taken = set(batch)
                    finished[:] = [u for u in finished if u not in taken]
                    streamed.clear()
            if p.stream and not training and rng.random() < p.stream:
                streamed.update(rec.stream())
    except Exception as exc:  # a mutant broke itself: keep the trace so far
        if reraise:
            raise
        rec.out.error = f"{type(exc).__name__}: {exc}"
    return rec.out


# A scenario is a list of steps: (op, unit) for unit operations, (op,) for trainer operations.
Step = tuple


def play(controller: StalenessController, script: Sequence[Step],
         reraise: bool = True) -> Recording:
    """Run a fixed script; refusals are recorded like any other outcome."""
    rec = _Recorder(controller)
    ops: dict[str, Callable[..., Any]] = {
        "reserve": rec.reserve, "occupy": rec.occupy, "abort": rec.abort, "filter": rec.filter,
        "consume": rec.consume, "publish": rec.publish, "release_stuck": rec.release_stuck,
        "stream": rec.stream,
    }
    try:
        for step in script:
            ops[step[0]](*step[1:])
    except Exception as exc:
        if reraise:
            raise
        rec.out.error = f"{type(exc).__name__}: {exc}"
    return rec.out
