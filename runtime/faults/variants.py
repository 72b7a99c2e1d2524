"""Deliberately broken drivers and recoveries: the harness must catch every one of them.

Each variant changes one step of the production code the way a plausible bug would, and names
the check expected to catch it. ``python -m runtime.faults --variant NAME`` runs the schedules
against it (a non-zero violation count is the expected result); tests/resilience/test_faults.py
asserts each is caught.

* ``restamp`` -- recovery re-admits each finished unit under a fresh id stamped with the
  current version (the AReaL#1388 shape: staleness counted from the restart, not from
  generation). Caught by ``staleness``: tokens older than their unit's ``v_traj``, or older than
  eta at training.
* ``forget_finished`` -- recovery drops finished units' trajectories (filters them, claiming the
  files were missing). Caught by ``recovery``: a finished unit whose file existed was filtered.
* ``blame_neighbour`` -- recovery, finding a finished unit's file missing, filters the
  finished unit next to it in the log's order as missing too (an off-by-one in the loop). Caught
  by ``recovery``: a finished unit whose file existed was filtered as missing at that restart.
* ``keep_in_flight`` -- recovery leaves the log's in-flight units reserved, as if their
  generations were still running. Caught by ``recovery``: a unit in flight at the crash was not
  aborted as lost (its slot waits for a generation that no longer exists).
* ``no_retrain`` -- recovery loads the newest checkpoint but does not retrain the batches the
  log consumed after it, and claims the trainer is current. Caught by ``lineage``: the engines
  get weights that are not the log's version.
* ``accept_late`` -- the driver accepts a completion message for an aborted (or no-gradient)
  unit and trains its data with the next batch, behind the controller's back. Caught by
  ``staleness`` (a trained unit that is not in the log's batch; often also over-stale) and by
  ``lineage``.
"""

from __future__ import annotations

from typing import Any

from reserve_occupy import UnitState

from ..driver import Driver
from ..recovery.resume import Recovery
from ..trainer.base import GroupSample, Sample, TrainBatch
from ..records import GroupRun
from .harness import Variant


class _Restamp(Recovery):
    def reload_finished(self) -> None:
        super().reload_finished()
        ctl = self.controller
        seq = 1 + max((int(u[1:]) for u in self.order if isinstance(u, str)
                       and u[1:].isdigit()), default=-1)
        for unit in list(self.report.finished):
            g = self.groups[unit]
            ctl.filter(unit, meta={"reason": "restamped"})
            new = f"g{seq}"
            seq += 1
            reservation = ctl.reserve(new, meta={"prompt": g.prompt_position})
            if reservation is None:
                continue
            g2 = GroupRun(new, seq, g.prompt, g.prompt_ids, reservation.v_traj, g.admitted_at,
                          g.group, g.candidates, closed=True, fate="finished",
                          prompt_position=g.prompt_position)
            self.store.group_finished(g2)
            ctl.occupy(new)
            self.groups[new] = g2
            self.order.append(new)


class _ForgetFinished(Recovery):
    def reload_finished(self) -> None:
        for unit in self.order:
            if (self.controller.unit_state(unit) is UnitState.FINISHED
                    and unit not in self.report.salvaged):
                self.controller.filter(unit, meta={"reason": "trajectory_missing"})
                self.report.missing.append(unit)


class _BlameNeighbour(Recovery):
    def reload_finished(self) -> None:
        super().reload_finished()
        for unit in list(self.report.missing):
            at = self.order.index(unit)
            after = [u for u in self.order[at + 1:] if u in self.report.finished]
            before = [u for u in self.order[:at] if u in self.report.finished]
            for neighbour in (after[:1] or before[-1:]):
                self.controller.filter(neighbour, meta={"reason": "trajectory_missing"})
                self.report.finished.remove(neighbour)
                self.report.missing.append(neighbour)


class _KeepInFlight(Recovery):
    def settle_in_flight(self) -> None:
        pass


class _NoRetrain(Recovery):
    async def retrain(self) -> None:
        self.trainer.steps = self.controller.version  # type: ignore[attr-defined]


class _AcceptLateDriver(Driver):
    """Keeps aborted groups' data; a late completion message for one puts it into the next
    batch the trainer gets, behind the controller's back."""

    def _close_aborted(self, g: GroupRun, reason: str) -> None:
        self.__dict__.setdefault("graveyard", {})[g.unit_id] = g
        super()._close_aborted(g, reason)

    def _complete_group(self, g: GroupRun) -> None:
        super()._complete_group(g)
        if g.fate == "filtered":  # dropped for equal rewards: kept "just in case"
            self.__dict__.setdefault("graveyard", {})[g.unit_id] = g

    def deliver_completion(self, unit_id: Any) -> bool:
        g = self.__dict__.get("graveyard", {}).pop(unit_id, None)
        if g is None or not g.group.complete:
            return super().deliver_completion(unit_id)
        self.__dict__.setdefault("late", []).append(g)
        return True

    def _assemble(self, batch: Any) -> TrainBatch:
        tb = super()._assemble(batch)
        late = self.__dict__.pop("late", [])
        extra = []
        for g in late:
            samples = tuple(Sample(tuple(c.token_ids), tuple(c.logprobs), tuple(c.versions),
                                   float(c.reward), c.finish_reason or "", c.segments, c.index)
                            for c in (g.candidates[i] for i in g.group.committed))
            extra.append(GroupSample(g.unit_id, g.prompt.index, tuple(g.prompt_ids), g.v_traj,
                                     batch.version - g.v_traj, samples))
        return TrainBatch(tb.version, tb.groups + tuple(extra))


def _recovery_variant(name: str, cls: type[Recovery]) -> Variant:
    v = Variant()
    v.name, v.recovery_class = name, cls
    return v


class _AcceptLate(Variant):
    name = "accept_late"

    def driver_class(self) -> type[Driver]:
        return _AcceptLateDriver


VARIANTS: dict[str, Variant] = {
    "restamp": _recovery_variant("restamp", _Restamp),
    "forget_finished": _recovery_variant("forget_finished", _ForgetFinished),
    "blame_neighbour": _recovery_variant("blame_neighbour", _BlameNeighbour),
    "keep_in_flight": _recovery_variant("keep_in_flight", _KeepInFlight),
    "no_retrain": _recovery_variant("no_retrain", _NoRetrain),
    "accept_late": _AcceptLate(),
}
