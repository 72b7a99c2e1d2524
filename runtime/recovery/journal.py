"""The controller's durable event log: an append-only JSON Lines file in the core's trace format.

``EventLog`` writes line 1 (``reserve_occupy.trace.header``) and then one line per controller
event (``trace.event_to_record``), each written with one ``write`` call and flushed at once, so
a killed process loses at most the line it was writing. ``sync()`` fsyncs the file; the runtime
calls it at its durability points (before a trainer checkpoint is committed), which is what a
machine crash needs (docs/recovery.md argues the order). Because the file *is* a trace,
``reserve-occupy check-trace events.jsonl`` checks a crashed run's log as it stands.

``JournaledController`` is the core's ``StalenessController`` as the driver runs it
(``runtime.controller.Controller``, whose peer-only calls it answers empty), with one addition:
every event it appends to its in-memory log is also handed to an ``EventLog``, with an optional
``meta`` object (why a unit was aborted, which prompt a reservation is for). It extends the controller through
``_log``, the one method every operation's effect calls last, after the state has changed: the
line is therefore written after the operation and never for a refused or invalid one. The core
is not edited (it is the lead's); the override is tested against ``controller.events``.

``read_log`` reads a log back for recovery. A torn *last* line (the write a crash interrupted:
no newline, or not valid JSON) is dropped with a message and reported; a bad line anywhere else
is corruption and raises ``LogCorrupt`` naming it: it is never skipped.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reserve_occupy import (Config, Event, IllegalOperation, ReplayDivergence,
                            StalenessController, apply)
from reserve_occupy.trace import (
    TraceFormatError,
    decode,
    dumps,
    event_to_record,
    header,
    loads_bounded,
    parse_header,
    parse_record,
)

from ..records import forget_metas

PRODUCER = "reserve-occupy runtime"
# guard(kind, detail, partial): called before each durable write; fault injection raises from
# it to crash there, after ``partial(n)`` has written the first n characters (a torn write).
Guard = Callable[[str, str, Callable[[int], None]], None]


class LogCorrupt(RuntimeError):
    """The event log cannot be trusted: a bad line before the last one, a header for another
    configuration, or events the reference controller does not reproduce."""


class EmptyLog(LogCorrupt):
    """The log has no complete header: the run died before its first event (nothing to
    recover; start afresh)."""


class EventLog:
    """Append-only writer. ``writer`` (tests and fault injection) replaces the raw write so a
    crash can be simulated in the middle of a line; by default it is the file's own."""

    def __init__(self, path: Path, file: Any, fsync: bool = True,
                 guard: Guard | None = None) -> None:
        self.path = path
        self._file = file
        self.fsync_enabled = fsync
        self.guard = guard
        self.lines = 0

    @classmethod
    def create(cls, path: Path, config: Config, fsync: bool = True,
               guard: Guard | None = None) -> EventLog:
        """A new log (an existing file is replaced) whose first line is the header."""
        path.parent.mkdir(parents=True, exist_ok=True)
        log = cls(path, path.open("w", encoding="utf-8"), fsync, guard)
        log._write(dumps(header(config, PRODUCER)) + "\n")
        log.sync()
        return log

    @classmethod
    def reopen(cls, path: Path, good_bytes: int, fsync: bool = True,
               guard: Guard | None = None) -> EventLog:
        """Append to an existing log after cutting it to ``good_bytes`` (drops a torn tail)."""
        with path.open("r+b") as f:
            f.truncate(good_bytes)
            f.seek(max(0, good_bytes - 1))
            if good_bytes and f.read(1) != b"\n":  # a complete last line lacking its newline
                f.write(b"\n")
            if fsync:
                os.fsync(f.fileno())
        return cls(path, path.open("a", encoding="utf-8"), fsync, guard)

    def _write(self, text: str) -> None:
        if self.guard is not None:
            self.guard("log", text, self._partial(text))
        self._file.write(text)
        self._file.flush()  # survives the process dying; fsync (sync) survives the machine
        self.lines += 1

    def _partial(self, text: str) -> Callable[[int], None]:
        def write(n: int) -> None:  # what a crash in the middle of this write leaves behind
            self._file.write(text[:n])
            self._file.flush()
        return write

    def append(self, event: Event, meta: dict[str, Any] | None = None) -> None:
        record = event_to_record(event)
        if meta:
            record["meta"] = meta
        self._write(dumps(record) + "\n")

    def sync(self) -> None:
        if self.fsync_enabled:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class JournaledController(StalenessController):
    """A ``StalenessController`` whose events also go to an ``EventLog`` (when one is attached).

    Every operation takes an optional ``meta`` dict, written on its event's line (reasons for
    aborts, the prompt of a reservation). ``check_every_op`` runs ``check()`` after every
    operation (fault injection and tests)."""

    def __init__(self, config: Config, log: EventLog | None = None,
                 check_every_op: bool = False) -> None:
        super().__init__(config)
        self.log = log
        self.check_every_op = check_every_op
        self._meta: dict[str, Any] | None = None
        self.metas: dict[int, dict[str, Any]] = {}  # seq -> meta, for events that had one

    def clone(self) -> JournaledController:
        other = super().clone()
        other.log = None  # a branch of the state must not write to this run's log
        other.metas = dict(self.metas)
        return other  # type: ignore[return-value]

    def forget_events(self, before: int) -> None:
        """``StalenessController.forget_events``, and the metas of the events it drops. The
        driver calls it once a step when this log goes to a file (``log`` attached; a durable
        run): the file is the log, memory keeps the events not yet counted."""
        super().forget_events(before)
        forget_metas(self.metas, before)

    # Overrides the core's private event append on purpose: it is the one call every successful
    # operation makes after its state change, so the journal sees exactly the events the log has.
    def _log(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super()._log(*args, **kwargs)
        event: Event = self.last_event  # type: ignore[assignment]
        meta, self._meta = self._meta, None
        if meta:
            self.metas[event.seq] = meta
        if self.check_every_op:
            self.check()
        if self.log is not None:
            self.log.append(event, meta)

    def _with(self, meta: dict[str, Any] | None, op: Callable[..., Any], *args: Any) -> Any:
        self._meta = meta
        try:
            return op(*args)
        finally:
            self._meta = None  # a refused or invalid operation logged nothing

    def reserve(self, unit_id, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().reserve, unit_id)

    def occupy(self, unit_id, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().occupy, unit_id)

    def abort(self, unit_id, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().abort, unit_id)

    def filter(self, unit_id, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().filter, unit_id)

    def release_stuck(self, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().release_stuck)

    def drop_finished(self, unit_id: Any, meta: dict[str, Any] | None = None) -> Any:
        """The driver's name for ``filter`` (runtime.controller.Controller.drop_finished): a
        truncated unit whose reward failed or carries no gradient."""
        return self.filter(unit_id, meta)

    def consume(self, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().consume)

    def publish(self, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().publish)

    def stream(self, meta=None):  # type: ignore[no-untyped-def,override]
        return self._with(meta, super().stream)

    def trace_records(self, producer: str | None = None) -> Iterator[dict[str, Any]]:
        """The log in the trace format: the header, then every event with its meta (what
        ``EventLog`` writes line by line, here from memory)."""
        yield header(self.config, producer)
        for event in self.events:
            record = event_to_record(event)
            if event.seq in self.metas:
                record["meta"] = self.metas[event.seq]
            yield record

    # The peers' calls of the driver's controller interface (runtime.controller.Controller),
    # answered empty: what this controller aborts comes back in the answer of the operation
    # that aborted it, it admits only when asked (reserve), and its one clock, the STUCK
    # timeout, is the driver's.

    timer = math.inf  # no timer of its own

    def fire_timer(self) -> None:
        """Never due (``timer`` is infinite)."""

    def take_dropped(self) -> list[Any]:
        return []

    def take_aborted(self) -> list[Any]:
        return []

    def take_admission_moved(self) -> bool:
        return False

    keeps_no_gradient = False  # the driver aborts a group without gradient (reason no_gradient)

    def occupy_no_gradient(self, unit_id: Any, meta: dict[str, Any] | None = None) -> Any:
        """Refused, nothing changed: Reserve–Occupy keeps no group without gradient (the
        driver aborts it when its rewards are in; ``keeps_no_gradient`` is False)."""
        raise IllegalOperation("occupy_no_gradient", self.phase.value,
                               requires="a peer's rule that discards a group without gradient "
                                        "at its sample (Reserve–Occupy's driver aborts it)")


# ------------------------------------------------------------------------- reading back ------

@dataclass
class LogContents:
    """What ``read_log`` found. ``good_bytes``: length of the trusted prefix (the file is cut
    there before appending); ``torn``: a description of the dropped last line, if any."""

    config: Config
    events: list[Event]
    metas: dict[int, dict[str, Any]]
    good_bytes: int
    torn: str | None = None


# Longest line ``read_log`` reads (the limit of check-trace): the runtime's longest line, a
# consume of a full batch, is far shorter; a longer one is corruption, refused after this many
# bytes rather than read whole.
MAX_LOG_LINE_BYTES = 64 << 20


def read_log(path: Path) -> LogContents:
    """Parse a log for recovery; see the module docstring for the torn-line rule. The file is
    read line by line, each line at most ``MAX_LOG_LINE_BYTES`` and decoded with the trace
    format's depth limit."""
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise LogCorrupt(f"{path}: cannot read the event log ({exc.strerror or exc})") from None
    events: list[Event] = []
    metas: dict[int, dict[str, Any]] = {}
    offset = 0
    config: Config | None = None
    torn = None
    number = 0
    with stream:
        while True:
            try:
                data = stream.readline(MAX_LOG_LINE_BYTES + 1)
                at_end = not stream.peek(1)
            except OSError as exc:
                raise LogCorrupt(f"{path}: cannot read the event log after line {number} "
                                 f"({exc.strerror or exc})") from None
            if not data:
                break
            number += 1
            complete = data.endswith(b"\n")  # else the tail a crash cut before its newline
            raw = data[:-1] if complete else data
            if not complete and not at_end:
                raise LogCorrupt(f"{path}: line {number} is longer than "
                                 f"{MAX_LOG_LINE_BYTES >> 20} MiB: not an event log line; "
                                 f"refusing to resume from a damaged log")
            try:
                text = raw.decode("utf-8")
                obj = decode(text, number)
                if config is None:
                    config = parse_header(obj, number).config
                else:
                    entry = parse_record(obj, number)
                    if entry.refused:
                        raise TraceFormatError(number, "refused",
                                               "the runtime never logs refusals")
                    events.append(entry.event)
                    if isinstance(obj.get("meta"), dict):  # type: ignore[union-attr]
                        metas[entry.event.seq] = obj["meta"]  # type: ignore[index]
            except (UnicodeDecodeError, TraceFormatError) as exc:
                if at_end:
                    # The last line (with or without its newline) is the one a crash can tear.
                    torn = (f"{path}: dropped a torn last line ({len(raw)} bytes, line "
                            f"{number}): {exc}")
                    break
                raise LogCorrupt(f"{path}: line {number} is corrupt and is not the last line, "
                                 f"so it is not a torn write ({exc}); refusing to resume from a "
                                 f"damaged log") from None
            offset += len(data)  # a complete line whose newline was not written yet is kept
    if config is None:
        raise EmptyLog(f"{path}: no header line (the run crashed before its first event, or "
                         f"this is not an event log)")
    for k, event in enumerate(events):
        if event.seq != k:
            raise LogCorrupt(f"{path}: event {k} has seq {event.seq}: events are missing")
    return LogContents(config, events, metas, offset, torn)


def rebuild(contents: LogContents, config: Config, check_every_op: bool = False
            ) -> JournaledController:
    """A controller in the state the log describes, insisting on every logged outcome (the
    core's ``replay``), with the log's metas. No log is attached yet."""
    if contents.config != config:
        raise LogCorrupt(f"the event log was written with {contents.config}, but this run is "
                         f"configured with {config}: resume with the same staleness settings")
    controller = JournaledController(config, None, check_every_op)
    for event in contents.events:
        try:
            produced = apply(controller, event)
        except Exception as exc:
            raise LogCorrupt(f"event {event.seq} ({event.op}) cannot be applied: {exc}") from None
        if produced != event:
            raise LogCorrupt(str(ReplayDivergence(event.seq, event, produced)))
    controller.metas = dict(contents.metas)
    return controller


def load_json(path: Path) -> Any:
    """A run's JSON file; a file that does not parse raises ``ValueError`` naming it."""
    try:
        return loads_bounded(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
