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


# ---------------------------------------------------------------- counts from the event log ---

# The reason an abort line carries (``meta.reason``) when the driver filtered a group whose
# rewards were all equal: counted as filtered, not aborted.
NO_GRADIENT = "no_gradient"


class LogCounts:
    """The run's unit and step counts, derived from the controller's event log and nothing
    else (one source of truth: ``metrics.jsonl`` rows, ``summary.json`` and the summary table
    all take them from here). Fed trace-format records (``reserve_occupy.trace``), as written
    to ``events.jsonl``, incrementally:

    * ``steps``: ``publish`` lines (batches trained and published, recovery's included);
    * ``admitted``: ``reserve`` lines; ``trained``: units in ``consume`` batches;
    * ``filtered``: ``abort`` lines with ``meta.reason == "no_gradient"`` and ``filter`` lines;
    * ``aborted``: every other unit that ended ABORTED: ``abort`` lines and the units each
      operation's ``aborted`` list names (closing rule, STUCK release), by reason in
      ``aborted_by_reason``;
    * ``released_stuck``: units aborted by ``release_stuck``;
    * ``staleness``: {staleness: units} over the consumed batches."""

    FIELDS = ("steps", "admitted", "trained", "filtered", "aborted", "released_stuck")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.FIELDS, 0)
        self.aborted_by_reason: dict[str, int] = {}
        self.staleness: dict[int, int] = {}

    def _aborted(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts["aborted"] += n
            self.aborted_by_reason[reason] = self.aborted_by_reason.get(reason, 0) + n

    def add(self, record: dict[str, Any]) -> None:
        op, c = record.get("op"), self.counts
        reason = str((record.get("meta") or {}).get("reason", "unspecified"))
        if op == "reserve":
            c["admitted"] += 1
        elif op == "publish":
            c["steps"] += 1
        elif op == "consume":
            units = record["batch"]["units"]
            c["trained"] += len(units)
            for u in units:
                self.staleness[u["staleness"]] = self.staleness.get(u["staleness"], 0) + 1
        elif op == "filter":
            c["filtered"] += 1
        elif op == "abort":
            if reason == NO_GRADIENT:
                c["filtered"] += 1
            else:
                self._aborted(reason)
        if op == "release_stuck":
            c["released_stuck"] += len(record.get("aborted", ()))
            self._aborted("released_stuck", len(record.get("aborted", ())))
        elif op in ("occupy", "abort", "filter"):
            self._aborted("closing_rule", len(record.get("aborted", ())))

    def summary(self) -> dict[str, Any]:
        return {**self.counts, "aborted_by_reason": dict(sorted(self.aborted_by_reason.items())),
                "staleness": {str(k): v for k, v in sorted(self.staleness.items())}}


class ControllerCounts:
    """``LogCounts`` kept up to date from a live ``JournaledController``'s in-memory events
    (the same events, in the same trace format, that its log file receives)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.log = LogCounts()
        self._seen = 0

    def counts(self) -> dict[str, int]:
        from reserve_occupy.trace import event_to_record

        events = self.controller.events
        metas = getattr(self.controller, "metas", {})
        for event in events[self._seen:]:
            record = event_to_record(event)
            if event.seq in metas:
                record["meta"] = metas[event.seq]
            self.log.add(record)
        self._seen = len(events)
        return dict(self.log.counts)

    def summary(self) -> dict[str, Any]:
        self.counts()
        return self.log.summary()


def counts_from_log(path: Any) -> dict[str, Any]:
    """``LogCounts.summary()`` of an ``events.jsonl`` file (its header line is skipped; a torn
    last line, which recovery would drop, is ignored)."""
    import json
    from pathlib import Path

    log = LogCounts()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines[1:], 2):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise
        log.add(record)
    return log.summary()
