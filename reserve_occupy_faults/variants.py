"""Deliberately broken drivers and recoveries: the harness must catch every one of them.

Each variant changes one step of the production code the way a plausible bug would, and names
the check expected to catch it. ``python -m reserve_occupy_faults --variant NAME`` runs the
schedules against it (a non-zero violation count is the expected result);
tests/resilience/test_faults.py asserts each is caught.

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
* ``swallow_rank_loss`` -- the driver treats a lost trainer rank as a hiccup: a trainer call
  that raises ``RankLost`` is skipped (a train step trains nothing, an export hands the engines
  the weights exported last under the new version, a checkpoint save saves nothing) and the run
  goes on with the broken trainer. Caught by ``rank_loss`` (the incarnation finished after the
  loss and published after it) and by ``lineage``.
* ``publish_on_rank_loss`` -- the driver stops on ``RankLost``, but first publishes the step
  that failed with the weights it exported last, "so that the engines are not left behind".
  Caught by ``rank_loss`` (a publish line after the loss) and by ``lineage`` (the engines
  loaded weights that are not the log's version).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reserve_occupy import UnitState

from runtime.driver import Driver
from runtime.recovery.resume import Recovery
from runtime.records import GroupRun, GroupSample, Sample, TrainBatch
from runtime.trainer.sharded import RankLost

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


class _Forgiving:
    """The trainer behind a guard that swallows ``RankLost`` (``lost`` keeps the first)."""

    def __init__(self, trainer: Any) -> None:
        self.inner, self.lost, self.last = trainer, None, None

    def _swallow(self, exc: RankLost) -> None:
        self.lost = self.lost or exc

    async def train_step(self, batch: TrainBatch) -> dict[str, float]:
        try:
            return await self.inner.train_step(batch)
        except RankLost as exc:
            self._swallow(exc)
            return {}

    async def export_weights(self, version: int) -> Any:
        try:
            self.last = await self.inner.export_weights(version)
        except RankLost as exc:
            self._swallow(exc)
            if self.last is None:
                raise
            self.last = dataclasses.replace(self.last, version=version)
        return self.last

    async def save_checkpoint(self, path: Any) -> None:
        try:
            await self.inner.save_checkpoint(path)
        except RankLost as exc:
            self._swallow(exc)


class _SwallowRankLossDriver(Driver):
    guard_checkpoints = True  # the checkpoint saves go through the same guard

    def __init__(self, settings: Any, rollout: Any, trainer: Any, *args: Any,
                 **kwargs: Any) -> None:
        forgiving = _Forgiving(trainer)
        super().__init__(settings, rollout, forgiving, *args, **kwargs)
        if self.persist is not None and self.guard_checkpoints:
            self.persist.trainer = forgiving  # type: ignore[attr-defined]


class _PublishOnRankLossDriver(_SwallowRankLossDriver):
    guard_checkpoints = False  # a lost rank in a checkpoint save stops the run before publish

    async def _sync_weights(self, weights: Any) -> None:
        await super()._sync_weights(weights)
        lost = self.trainer.lost  # type: ignore[attr-defined]
        if lost is not None:  # the step is public now: stop the run as production would
            raise lost


class _DriverVariant(Variant):
    def __init__(self, name: str, cls: type[Driver]) -> None:
        self.name, self.cls = name, cls

    def driver_class(self) -> type[Driver]:
        return self.cls


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
    "swallow_rank_loss": _DriverVariant("swallow_rank_loss", _SwallowRankLossDriver),
    "publish_on_rank_loss": _DriverVariant("publish_on_rank_loss", _PublishOnRankLossDriver),
}
