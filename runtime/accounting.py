"""What a driver run measured, on the driver's clock: idle time of the trainer and of the
engine, tokens generated and trained, rewards of completed groups, and the per-step records
built from them; the unit and step counts derived from the controller's event log
(``LogCounts``); and the response lengths of every sample joined with its fate, for the length
bias (``LengthLog``: running figures, each unit forgotten once joined). Bookkeeping only; the
driver calls it at the moments that matter."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reserve_occupy.trace import loads_bounded

from . import atomic_io
from .clock import Clock
from .inputs import TRACE_LINE_BYTES, FileInputError, file_lines, json_reason
from .lengthbias import length_bias_of_counts
from .records import STALE, StepRecord, TrainBatch

if TYPE_CHECKING:  # runtime.controller imports the peers, which import this module
    from .controller import Controller


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
             times: tuple[float, float, float, float], counts: dict[str, int],
             lengths: dict[str, Any] | None = None,
             stream: tuple[float, float, int] = (0.0, 0.0, 0)) -> StepRecord:
        """The record of one step; ``times`` = (waiting began, training began, sync began,
        sync ended) on the clock; ``lengths``: ``LengthLog.figures`` so far; ``stream`` =
        (seconds of the wait spent training chunks, seconds from the head buffer turning READY
        to the optimiser step, units trained in chunks)."""
        t_wait, t_train, t_sync, t_end = times
        stream_s, tail_s, streamed = stream
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
            sync_s=t_end - t_sync, wait_s=t_train - t_wait - stream_s,
            tokens_generated=self.tokens_generated, tokens_trained=self.tokens_trained,
            trainer_idle=self.trainer_idle_s / now if now > 0 else 0.0,
            rollout_idle=idle / now if now > 0 else 0.0, counts=dict(counts),
            lengths=dict(lengths or {}), tail_s=tail_s, stream_s=stream_s,
            streamed_units=streamed)
        self.completed_rewards = []
        return record


# ---------------------------------------------------------------- counts from the event log ---

# The reason an abort line carries (``meta.reason``) when the driver filtered a group whose
# rewards were all equal: counted as filtered, not aborted.
NO_GRADIENT = "no_gradient"
# Reasons that end a unit without settling what the policy did with it: the run stopped while
# it was in flight (``shutdown``), or a crash lost it and recovery closed it out. The length
# bias leaves such units out, as the simulator leaves out trajectories still live at the end.
UNSETTLED = frozenset({"shutdown", "lost_in_crash", "recovered", "trajectory_missing"})


class LogCounts:
    """The run's unit and step counts, derived from the controller's event log and nothing
    else (one source of truth: ``metrics.jsonl`` rows, ``summary.json`` and the summary table
    all take them from here). Fed trace-format records (``reserve_occupy.trace``), as written
    to ``events.jsonl``, incrementally:

    * ``steps``: ``publish`` lines (batches trained and published, recovery's included);
    * ``admitted``: ``reserve`` lines; ``trained``: units in ``consume`` batches;
    * ``filtered``: ``abort`` lines with ``meta.reason == "no_gradient"`` and ``filter`` lines
      (but a ``filter`` with ``meta.reason == "stale"``, a peer's rule dropping a finished unit,
      is aborted, reason ``stale``, and one with ``lost_in_crash``, recovery dropping a truncated
      unit the crash left without its file, aborted, reason ``lost_in_crash``);
    * ``aborted``: every other unit that ended ABORTED: ``abort`` lines and the units each
      operation's ``aborted`` list names (closing rule, STUCK release), by reason in
      ``aborted_by_reason``;
    * ``released_stuck``: units aborted by ``release_stuck``; ``truncated``: units it placed
      instead (``staleness.stuck_action=truncate``: its moves with reason ``truncate``);
    * ``staleness``: {staleness: units} over the consumed batches.

    ``fates`` maps each unit whose fate the log settled to it, in the words the counts use:
    ``trained``, ``filtered``, ``aborted:<reason>``; a unit closed out for a reason in
    ``UNSETTLED`` is ``unsettled:<reason>``; a unit still live has none. It holds the fates
    settled since the last ``take_fates``, which hands them over and forgets them:
    ``LengthLog.join`` takes them, once a step, to join them with the samples' lengths, so that
    neither side keeps an entry per unit for the run's life (issue 38, item 4). A reader that
    needs every unit's fate reads it from ``events.jsonl`` (``read_log_counts``, never taken
    from, holds them all)."""

    FIELDS = ("steps", "admitted", "trained", "filtered", "aborted", "released_stuck",
              "truncated")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.FIELDS, 0)
        self.aborted_by_reason: dict[str, int] = {}
        self.staleness: dict[int, int] = {}
        self.fates: dict[Any, str] = {}

    def take_fates(self) -> dict[Any, str]:
        """The fates settled since the last call (unit -> fate), forgotten here."""
        fates, self.fates = self.fates, {}
        return fates

    def _aborted(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts["aborted"] += n
            self.aborted_by_reason[reason] = self.aborted_by_reason.get(reason, 0) + n

    def add(self, record: dict[str, Any]) -> None:
        op, c = record.get("op"), self.counts
        reason = str((record.get("meta") or {}).get("reason", "unspecified"))
        unsettled = f"unsettled:{reason}" if reason in UNSETTLED else None
        if op == "reserve":
            c["admitted"] += 1
        elif op == "publish":
            c["steps"] += 1
        elif op == "consume":
            units = record["batch"]["units"]
            c["trained"] += len(units)
            for u in units:
                self.staleness[u["staleness"]] = self.staleness.get(u["staleness"], 0) + 1
                self.fates[u["unit"]] = "trained"
        elif op == "filter" and reason in (STALE, "lost_in_crash"):
            # a peer's rule dropping a finished unit; recovery filtering a truncated unit the
            # crash left without its file (its prompt re-admitted, as an aborted one's)
            self._aborted(reason)
            self.fates[record["unit"]] = unsettled or f"aborted:{reason}"
        elif op == "filter":
            c["filtered"] += 1
            self.fates[record["unit"]] = unsettled or "filtered"
        elif op == "abort":
            if reason == NO_GRADIENT:
                c["filtered"] += 1
                self.fates[record["unit"]] = "filtered"
            else:
                self._aborted(reason)
                self.fates[record["unit"]] = unsettled or f"aborted:{reason}"
        aborted = record.get("aborted", ())
        if op == "release_stuck":
            c["released_stuck"] += len(aborted)
            c["truncated"] += sum(1 for m in record.get("moves", ())
                                  if m.get("reason") == "truncate")
            self._aborted("released_stuck", len(aborted))
        elif op in ("occupy", "abort", "filter"):
            self._aborted("closing_rule", len(aborted))
        if op in ("occupy", "abort", "filter", "release_stuck"):
            why = "released_stuck" if op == "release_stuck" else "closing_rule"
            for unit in aborted:
                self.fates[unit] = unsettled or f"aborted:{why}"

    def summary(self) -> dict[str, Any]:
        return {**self.counts, "aborted_by_reason": dict(sorted(self.aborted_by_reason.items())),
                "staleness": {str(k): v for k, v in sorted(self.staleness.items())}}


def counts_at_publishes(controller: Controller) -> dict[int, dict[str, int]]:
    """Step ``k`` -> ``LogCounts.counts`` as the controller's log stood right after its
    ``k + 1``-th ``publish`` (step ``k`` trained and published): the counts of a metrics row
    that recovery writes for a step the crash cut short (``MetricsSink.recovered``)."""
    from reserve_occupy.trace import event_to_record

    log, out = LogCounts(), {}
    metas = controller.metas
    for event in controller.events:
        record = event_to_record(event)
        if event.seq in metas:
            record["meta"] = metas[event.seq]
        log.add(record)
        if record.get("op") == "publish":
            out[log.counts["steps"] - 1] = dict(log.counts)
            log.take_fates()  # not needed here: an entry per unit for nothing
    return out


class ControllerCounts:
    """``LogCounts`` kept up to date from a live controller's in-memory events and their
    metas (``runtime.controller.Controller``: the same events, in the same trace format, that
    its log file receives)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.log = LogCounts()
        self._seen = 0

    def take_fates(self) -> dict[Any, str]:
        """``LogCounts.take_fates`` up to the controller's last event: the fates settled since
        the last call."""
        self.counts()
        return self.log.take_fates()

    def counts(self) -> dict[str, int]:
        from reserve_occupy.trace import event_to_record

        new = self.controller.events_since(self._seen)  # once per step: not the whole log
        metas = self.controller.metas
        for event in new:
            record = event_to_record(event)
            if event.seq in metas:
                record["meta"] = metas[event.seq]
            self.log.add(record)
        self._seen += len(new)
        return dict(self.log.counts)

    @property
    def seen(self) -> int:
        """The events counted so far (the next one's seq)."""
        return self._seen

    def summary(self) -> dict[str, Any]:
        self.counts()
        return self.log.summary()


def _log_records(path: Any) -> Iterator[Any]:
    """The records of an ``events.jsonl`` file, read as they are needed (its header line is
    skipped; a torn last line, which recovery would drop, is ignored)."""
    for number, line, last in file_lines(path, TRACE_LINE_BYTES):
        if number == 1:
            continue
        try:
            record = loads_bounded(line)
        except ValueError as exc:  # not JSON, too deep, not UTF-8
            if last:
                break
            raise ValueError(f"{path}: line {number} is {json_reason(exc)}") from None
        yield record


def read_log_counts(path: Any) -> LogCounts:
    """The ``LogCounts`` of an ``events.jsonl`` file (its header line is skipped; a torn last
    line, which recovery would drop, is ignored); its ``fates`` hold every unit's."""
    log = LogCounts()
    for record in _log_records(path):
        log.add(record)
    return log


def counts_from_log(path: Any) -> dict[str, Any]:
    """``LogCounts.summary()`` of an ``events.jsonl`` file."""
    return read_log_counts(path).summary()


# ------------------------------------------------------------- response lengths and fates ---

LENGTHS_NAME = "lengths.jsonl"
# A sample's part in its group, as the driver saw it when the group's generation ended.
ROLES = ("committed", "surplus", "failed", "stopped", "unstarted")


class LengthLog:
    """The response length (tokens) of every sample of every unit whose generation ended, and
    the length bias they show (``runtime/lengthbias.py``: mean trained / mean admitted length,
    and the KS distance), defined as the simulator defines it
    (``reserve_occupy_sim/model/metrics.py``).

    Design: one source of truth per fact. *What happened to a unit* is the event log's
    (``LogCounts.fates``: trained, filtered, aborted and why); *how long its samples were* is
    the one thing the log cannot say, and it is all this log holds: one line per unit,
    ``{"unit": id, "lengths": [tokens per candidate], "roles": [role per candidate]}``, written
    by the driver when the last of the unit's engine requests has returned. The role
    (``ROLES``) is the sample's part inside its group, which only the driver sees:
    ``committed`` (one of the first ``group_size`` to finish), ``surplus`` (stopped by the
    first-n rule of group-level oversampling), ``failed`` (its request failed), ``stopped``
    (stopped with its unit), ``unstarted`` (stopped before its first token). A sample's fate is
    the join of the two: a committed sample of a trained unit is ``trained``, of a filtered unit
    ``filtered``; a non-committed sample of a trained or filtered unit is ``aborted:surplus``
    (``aborted:failed`` if it failed); every sample of an aborted unit is ``aborted:<the
    unit's reason>`` (closing rule, timeout, released_stuck, ...), surplus and failed ones
    keeping those names. Neither the trajectory files (only committed samples of finished
    units, deleted once checkpointed) nor the log's ``meta`` (a unit's line is written before
    its surplus requests return their tokens) could hold these lengths, hence the separate
    file; it carries no fate, so the two can never disagree.

    Admitted samples are the samples of units whose fate is settled (``UNSETTLED`` and live
    units are left out, as the simulator leaves out live trajectories). Two departures from
    the simulator, forced by what a real engine knows: an aborted sample counts with the tokens
    it decoded before the abort, a lower bound on the answer it would have given (the simulator
    knows the full length), so the runtime's ratio errs toward 1 and understates a bias toward
    short answers; and an ``unstarted`` sample is left out, since its length is unknown and,
    stopped before it decoded anything, it was not selected by its length.

    ``path``: stream each record to that JSONL file as well (flushed per line; a torn last line
    is skipped when read back).

    Bounded (issue 38, item 4: a run of thousands of steps of 1,024 groups): the figures are
    running sums, not a recomputation. ``join`` takes the fates the log settled since the last
    call (``LogCounts.take_fates``); a unit whose fate and lengths are both in is folded into
    per-fate sample counts and token totals and two histograms {length: samples}, trained and
    admitted (``length_bias_of_counts``: the same floats as the full recomputation), and both
    of its entries are dropped. What stays is ``records``, the length records whose fate has
    not come (live units), ``waiting_fates``, the fates whose lengths have not come (a unit's
    surplus requests return after its fate; a driver's log keeps only those whose line can
    still come, ``expect``), and the histograms: O(live units + distinct lengths), not
    O(units so far). A unit's fate and its
    length line each come once (one line per unit, written once its generation ends; an ended
    unit's fate does not change). What a reader needs per unit (``samples``, a test, the
    summary's derivation) it reads from the files: ``read`` holds every record of
    ``lengths.jsonl`` until joined."""

    def __init__(self) -> None:
        # length records not joined with a fate yet (read from a file: all of them)
        self.records: dict[Any, dict[str, Any]] = {}
        # fates joined before their unit's length record came
        self.waiting_fates: dict[Any, str] = {}
        self._trained: dict[int, int] = {}  # length -> trained samples
        self._admitted: dict[int, int] = {}  # length -> admitted samples
        self._by_fate: dict[str, list[int]] = {}  # sample fate -> [samples, tokens]
        # the units whose line may still come (``expect``); None: any unit's may
        self._expected: set[Any] | None = None
        self._file: Any = None

    @classmethod
    def open(cls, path: Path, append: bool = False,
             known: Iterable[Any] | None = None) -> LengthLog:
        """A log streamed to ``path``. ``append`` (a resumed run) keeps the records already
        there, of units in ``known`` only (a unit id the recovered event log never reserved
        belongs to lines a crash cut from the log; the new run may reuse the id)."""
        log = cls.check(path) if append and path.exists() else cls()
        if known is not None:
            keep = set(known)
            log.records = {u: r for u, r in log.records.items() if u in keep}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_io.write_text(path, "".join(json.dumps(r) + "\n" for r in log.records.values()))
        log._file = path.open("a", encoding="utf-8")
        return log

    @classmethod
    def check(cls, path: Path) -> LengthLog:
        """``read`` for a resumed run: a bad line says how to resume without the file."""
        try:
            return cls.read(path)
        except FileInputError as exc:
            raise FileInputError(
                exc.path, exc.line, f"{exc.reason}; move the file aside to resume without the "
                f"earlier lengths (the length bias then covers the resumed part only)") from None

    @classmethod
    def read(cls, path: Path) -> LengthLog:
        """The records of a ``lengths.jsonl`` file. A last line that is not a length record
        (not JSON, too deep, not an object with lengths and roles) is the one a crash tore and
        is dropped (docs/recovery.md, "The torn last line"); any other bad line raises
        ``FileInputError`` (``PATH:LINE: why``; exit 2). Holds every record (until joined)."""
        log = cls()
        for record in cls.lines(path):
            log._store(record)
        return log

    @classmethod
    def lines(cls, path: Path) -> Iterator[dict[str, Any]]:
        """The records of a ``lengths.jsonl`` file, read as they are needed, under ``read``'s
        rules (a bad line other than the last raises ``FileInputError`` when reached)."""
        for number, line, last in file_lines(path, TRACE_LINE_BYTES):
            try:
                record = loads_bounded(line)
            except ValueError as exc:  # not JSON, too deep, not UTF-8
                if last:
                    break
                raise FileInputError(path, number, f"not a length record "
                                     f"({json_reason(exc)})") from None
            try:
                cls._check_record(record)
            except ValueError as exc:
                if last:
                    break
                raise FileInputError(path, number, f"not a length record ({exc})") from None
            yield record

    @staticmethod
    def _check_record(record: Any) -> None:
        if not isinstance(record, dict) or "unit" not in record:
            raise ValueError("a length record is an object with a unit")
        lengths, roles = record.get("lengths"), record.get("roles")
        if (not isinstance(lengths, list) or not isinstance(roles, list)
                or len(lengths) != len(roles)
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                           for n in lengths)
                or not all(r in ROLES for r in roles)):
            raise ValueError(f"unit {record['unit']!r}: lengths must be token counts >= 0, "
                             f"one role of {ROLES} each")

    def _store(self, record: Any) -> None:
        self._check_record(record)
        fate = self.waiting_fates.pop(record["unit"], None)
        if fate is None:
            self.records[record["unit"]] = record
        else:
            self._fold(record, fate)

    def expect(self, unit: Any) -> None:
        """The driver started ``unit``'s generation: its line will come (``add``). A log told
        of any unit this way (a driver's) waits in ``join`` only for the lines of such units
        and of those it holds: any other unit's line will never come in this process (a unit
        a crash cut short, or a resumed run's earlier units with their lengths moved aside),
        so its fate is dropped instead of waiting for the run's life. A log never told (read
        from a file, or joined side by side with one) waits for every fate's line."""
        if self._expected is None:
            self._expected = set()
        self._expected.add(unit)

    def only_expected(self) -> None:
        """From now on wait only for the lines of units ``expect`` names (a driver's log, from
        before its first step: a resumed run's first ``join`` takes every earlier unit's
        fate)."""
        if self._expected is None:
            self._expected = set()

    def add(self, unit: Any, lengths: list[int], roles: list[str]) -> None:
        """The unit's generation ended with these samples. Raises ``ValueError`` (and stores
        nothing) for lengths that are not token counts or roles not in ``ROLES``."""
        record = {"unit": unit, "lengths": list(lengths), "roles": list(roles)}
        self._store(record)
        if self._expected is not None:
            self._expected.discard(unit)
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @staticmethod
    def _sample_fates(record: dict[str, Any], fate: str) -> list[tuple[int, str]]:
        """(length, fate) of each admitted sample of a unit whose fate is ``fate``."""
        if fate.startswith("unsettled:"):
            return []
        out = []
        for n, role in zip(record["lengths"], record["roles"]):
            if role == "unstarted":
                continue
            if role in ("surplus", "failed"):
                out.append((n, f"aborted:{role}"))
            elif role == "committed" or fate.startswith("aborted:"):
                out.append((n, fate))
            else:  # finished as its trained or filtered group completed: surplus too
                out.append((n, "aborted:surplus"))
        return out

    def samples(self, fates: Mapping[Any, str]) -> list[tuple[int, str]]:
        """(length, fate) of every admitted sample of the records held (not joined yet: all
        of them for a log just ``read`` from a file), with the fates in ``fates``; joins
        nothing. See the class docstring."""
        out = []
        for unit, record in self.records.items():
            fate = fates.get(unit)
            if fate is not None:
                out += self._sample_fates(record, fate)
        return out

    def _fold(self, record: dict[str, Any], fate: str) -> None:
        for n, f in self._sample_fates(record, fate):
            self._admitted[n] = self._admitted.get(n, 0) + 1
            if f == "trained":
                self._trained[n] = self._trained.get(n, 0) + 1
            tally = self._by_fate.setdefault(f, [0, 0])
            tally[0] += 1
            tally[1] += n

    def join(self, fates: Mapping[Any, str]) -> None:
        """Take in fates the log settled (``LogCounts.take_fates``: each unit's once): a unit
        whose length record is held is folded into the figures and forgotten; the fate of one
        whose record has not come waits for it, if it can still come (``expect``)."""
        for unit, fate in fates.items():
            record = self.records.pop(unit, None)
            if record is not None:
                self._fold(record, fate)
            elif self._expected is None or unit in self._expected:
                self.waiting_fates[unit] = fate

    def figures(self, fates: Mapping[Any, str] | None = None) -> dict[str, Any]:
        """The length bias so far, after ``join(fates)``: ``length_ratio`` (mean trained /
        mean admitted response length), ``length_ks``, both means, and the sample counts;
        ratio, KS and means are None until a sample trained. O(distinct lengths)."""
        if fates:
            self.join(fates)
        j = length_bias_of_counts(self._trained, self._admitted).to_json()
        return {"length_ratio": j["ratio"], "length_ks": j["ks"],
                "length_trained_mean": j["trained_mean"],
                "length_admitted_mean": j["admitted_mean"],
                "samples_trained": j["trained"], "samples_admitted": j["admitted"]}

    def summary(self, fates: Mapping[Any, str] | None = None) -> dict[str, Any]:
        """``figures(fates)`` and, per sample fate, {"samples": n, "mean": mean length}."""
        figures = self.figures(fates)
        return {**figures, "length_by_fate": {
            fate: {"samples": n, "mean": tokens / n}
            for fate, (n, tokens) in sorted(self._by_fate.items())}}


def summary_of_files(events: Path, lengths: Path) -> dict[str, Any]:
    """``LogCounts.summary()`` of an ``events.jsonl`` file with ``LengthLog.summary`` of its
    fates joined with a ``lengths.jsonl`` file: the same as ``read_log_counts`` and
    ``LengthLog.read`` joined whole, but the two files are read side by side, a line at a time
    from the one the other waits on (more fates waiting for their lengths than lengths for
    their fates: a length line; else an event line), and each unit forgotten once joined. Both
    files were written as the run went (one line per unit in ``lengths.jsonl``: a resumed
    run's is rewritten with one per unit, ``LengthLog.open``), so what is held at once is
    about the units live at one moment of the run, not every unit of it (not where a resume
    moved the earlier ``lengths.jsonl`` aside: the earlier units' fates wait for lines that
    never come, one entry each; the figures stay right). A bad line raises as
    ``read_log_counts`` / ``LengthLog.read`` do."""
    counts, log = LogCounts(), LengthLog()
    event_lines, length_lines = _log_records(events), LengthLog.lines(lengths)
    more_events = more_lengths = True
    while more_events or more_lengths:
        if more_lengths and (not more_events or len(log.waiting_fates) >= len(log.records)):
            record = next(length_lines, None)
            if record is None:
                more_lengths = False
            else:
                log._store(record)
        else:
            record = next(event_lines, None)
            if record is None:
                more_events = False
            else:
                counts.add(record)
                if counts.fates:
                    log.join(counts.take_fates())
    return {**counts.summary(), **log.summary()}
