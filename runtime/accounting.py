"""What a driver run measured, on the driver's clock: idle time of the trainer and of the
engine, tokens generated and trained, rewards of completed groups, and the per-step records
built from them. Bookkeeping only; the driver calls it at the moments that matter."""

from __future__ import annotations

from typing import Any

from .clock import Clock
from .trainer.base import TrainBatch
from .units import StepRecord


class Accounting:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.t0 = self._idle_since = 0.0
        self._engine_busy = False
        self.rollout_idle_s = self.trainer_idle_s = 0.0
        self.tokens_generated = self.tokens_trained = 0
        self.completed_rewards: list[float] = []  # since the last step

    def start(self) -> None:
        self.t0 = self._idle_since = self.clock.now()

    def elapsed(self) -> float:
        return self.clock.now() - self.t0

    def engine_busy(self, busy: bool) -> None:
        """The engine went from no running request to some (True), or back (False)."""
        if busy and not self._engine_busy:
            self.rollout_idle_s += self.clock.now() - self._idle_since
        elif not busy and self._engine_busy:
            self._idle_since = self.clock.now()
        self._engine_busy = busy

    def trainer_waited(self, seconds: float) -> None:
        self.trainer_idle_s += seconds

    def step(self, step: int, batch: Any, tb: TrainBatch, metrics: dict[str, float],
             times: tuple[float, float, float, float], counts: dict[str, int]) -> StepRecord:
        """The record of one step; ``times`` = (waiting began, training began, sync began,
        sync ended) on the clock."""
        t_wait, t_train, t_sync, t_end = times
        self.tokens_trained += sum(len(s.token_ids) for _, s in tb.samples)
        now = t_end - self.t0
        idle = self.rollout_idle_s + (0.0 if self._engine_busy else t_end - self._idle_since)
        lag = [tb.version - min((min(s.versions) for s in g.samples if s.versions),
                                default=g.v_traj) for g in tb.groups]
        record = StepRecord(
            step=step, version=batch.version, time_s=now,
            rewards=[s.reward for _, s in tb.samples], rollout_rewards=self.completed_rewards,
            staleness=[u.staleness for u in batch.units], token_version_lag=lag,
            train=dict(metrics), step_s=t_end - t_wait, train_s=t_sync - t_train,
            sync_s=t_end - t_sync, wait_s=t_train - t_wait,
            tokens_generated=self.tokens_generated, tokens_trained=self.tokens_trained,
            trainer_idle=self.trainer_idle_s / now if now > 0 else 0.0,
            rollout_idle=idle / now if now > 0 else 0.0, counts=dict(counts))
        self.completed_rewards = []
        return record
