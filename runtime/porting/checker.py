"""Check a trace written by any implementation against the reference controller.

Strict mode replays every event through ``reserve_occupy.apply`` on a fresh reference controller
and compares each logged outcome with the reference's (``compare``); it also runs the lenient
tracker alongside, so a trace that matches the reference but breaks a safety invariant (a core
bug) is still caught. Lenient mode runs only the tracker (``safety``), for implementations that
place units differently but legally. Both stop at the first problem.

``check`` raises ``TraceFormatError`` for input that is not a valid trace; the command line turns
that into exit code 2.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from reserve_occupy import (
    Config,
    Event,
    IllegalOperation,
    ProtocolError,
    Snapshot,
    StalenessController,
    apply,
    replay,
)
from reserve_occupy.trace import TraceEntry, TraceFormatError, loads_bounded, parse_lines

from .compare import Difference, differences, rule_for
from .peer_safety import PeerTracker
from .safety import SafetyTracker, Violation

STRICT, LENIENT = "strict", "lenient"
PEER = "peer"  # a peer's log (header x_policy): checked by ``peer_safety``, whatever the mode
PROGRESS_EVERY = 100_000
# A problem report draws the buffers before and after the offending event only up to this many
# open slots: larger tables are unreadable, and snapshotting a million slots costs ~1 GB.
TABLE_SLOTS = 4096


@dataclass
class Problem:
    """The first thing wrong with a trace: differences from the reference, a violated safety
    invariant, or both. Tables are filled in strict mode only."""

    entry: TraceEntry
    differences: list[Difference] = field(default_factory=list)
    violation: Violation | None = None
    expected: str = ""  # the reference's outcome in words
    before: Snapshot | None = None
    after: Snapshot | None = None
    tracked: str = ""  # lenient state, for reports without slot tables


@dataclass
class Report:
    mode: str
    config: Config
    events: int = 0
    refused: int = 0
    units: int = 0
    batches: int = 0
    max_staleness: int = -1
    max_in_flight: int = 0
    live_at_end: int = 0
    logged: dict[str, set[str]] = field(default_factory=dict)  # op -> fields ever logged
    problem: Problem | None = None
    # a peer's log (header x_policy, runtime.peers): its rule, whether it promises the bound,
    # the units it trained staler than eta (unbounded rules) and {staleness: units trained}
    policy: str | None = None
    bounded: bool = True
    over_eta: int = 0
    eta: int | None = None  # the bound a peer's rule enforces (x_eta), if not the config's
    staleness: dict[int, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.problem is None

    def not_logged(self) -> list[str]:
        """Optional fields this trace never logged (so strict mode could not compare them)."""
        missing = []
        for op, names in (("reserve", ("slot", "v_traj")), ("occupy", ("slot", "moves")),
                          ("abort", ("slot", "moves")), ("filter", ("slot", "moves"))):
            if op in self.logged:
                missing += [f"{op}.{n}" for n in names if n not in self.logged[op]]
        return missing


def _describe(event: Event | None, refused_what: str = "") -> str:
    from reserve_occupy.trace import dumps, event_to_record

    if event is None:
        return refused_what
    record = event_to_record(event)
    record.pop("seq", None)
    return dumps(record)


_REFUSAL = {"reserve": "refuse: admission must wait",
            "consume": "refuse: the head buffer is not READY",
            "release_stuck": "refuse: the head buffer is not STUCK",
            "stream": "refuse: the head buffer holds no finished unit not handed yet"}


def _strict_step(ref: StalenessController, entry: TraceEntry,
                 coarse: bool = False) -> tuple[Event | None, list[Difference], str]:
    """Run ``entry`` on the reference; return what it produced, the differences, and the
    reference's outcome in words when it refused (otherwise "": the caller describes the
    produced event only if it reports a problem -- describing every event costs a tenth of
    the check)."""
    e = entry.event
    op = e.op
    try:
        if entry.refused:
            if op == "reserve":
                result: Any = ref.reserve(e.unit_id)  # type: ignore[arg-type]
            else:
                result = getattr(ref, op)()
            if not result:
                return None, [], _REFUSAL[op]
            produced = ref.events[-1]
            return produced, [Difference("decision", _describe(produced), "refused",
                                         rule_for(op, "decision"))], ""
        produced = apply(ref, e)
    except IllegalOperation as exc:
        if entry.refused:  # e.g. a consume logged as refused while training: nothing happened
            return None, [], f"refuse: {exc}"
        return (None, [Difference("error", f"refuse: {exc}", "performed", rule_for(op, "error"))],
                f"refuse: {exc}")
    except ProtocolError as exc:
        return (None, [Difference("error", f"refuse: {exc}", "performed", rule_for(op, "error"))],
                f"refuse: {exc}")
    if produced is None:
        return None, [Difference("decision", _REFUSAL[op], "performed",
                                 rule_for(op, "decision"))], _REFUSAL[op]
    return produced, differences(produced, entry, coarse), ""


def check(lines: Iterable[str], mode: str = STRICT,
          progress: Callable[[int], None] | None = None) -> Report:
    """Check a whole trace (an iterable of its lines). Raises ``TraceFormatError``.
    ``progress(n)`` is called every ``PROGRESS_EVERY`` events (long traces)."""
    if mode not in (STRICT, LENIENT):
        raise ValueError(f"mode must be {STRICT!r} or {LENIENT!r}, not {mode!r}")
    lines, peer = _peer_of(lines)
    head, entries = parse_lines(lines)
    if peer is not None:
        return _check_peer(head.config, entries, *peer, progress)
    config, coarse = head.config, head.granularity == "buffer"
    report = Report(mode, config)
    tracker = SafetyTracker(config)
    ref = StalenessController(config) if mode == STRICT else None
    produced_events: list[Event] = []
    for entry in entries:
        report.events += 1
        if progress is not None and report.events % PROGRESS_EVERY == 0:
            progress(report.events)
        report.refused += entry.refused
        report.logged.setdefault(entry.op, set()).update(entry.logged)
        diffs: list[Difference] = []
        expected = ""
        produced = None
        if ref is not None:
            produced, diffs, expected = _strict_step(ref, entry, coarse)
        violation = tracker.step(entry)
        if diffs or violation:
            problem = Problem(entry, diffs, violation, expected or _describe(produced),
                              tracked=tracker.describe())
            if ref is not None and (config.eta + 1) * config.capacity <= TABLE_SLOTS:
                problem.before = replay(config, produced_events).snapshot()
                problem.after = ref.snapshot()
            report.problem = problem
            break
        if produced is not None:
            produced_events.append(produced)
    report.units = len(tracker.units)
    report.batches = tracker.batches
    report.max_staleness = tracker.max_staleness_seen
    report.max_in_flight = tracker.max_in_flight_seen
    report.live_at_end = sum(tracker.live.values())
    return report


def _peer_of(lines: Iterable[str]
             ) -> tuple[Iterable[str], tuple[str, bool, int | None] | None]:
    """The lines (unconsumed) and, for a peer's log (a header naming ``x_policy`` other than
    reserve_occupy), its rule, whether the rule promises the bound (``x_bounded``) and the eta
    it enforces (``x_eta``; None: the config's)."""
    it = iter(lines)
    before: list[str] = []
    for text in it:
        before.append(text)
        if text.strip():
            break
    rest = itertools.chain(before, it)
    try:
        h = loads_bounded(before[-1]) if before else None
    except (ValueError, TypeError):
        return rest, None  # parse_lines reports it (not JSON, nested too deep)
    if not isinstance(h, dict) or h.get("x_policy", "reserve_occupy") == "reserve_occupy":
        return rest, None
    policy, bounded, eta = h["x_policy"], h.get("x_bounded", True), h.get("x_eta")
    if not isinstance(policy, str):
        raise TraceFormatError(len(before), "x_policy", f"must be a string, got {policy!r}")
    if not isinstance(bounded, bool):
        raise TraceFormatError(len(before), "x_bounded", f"must be true or false, got "
                                                         f"{bounded!r}")
    if eta is not None and (isinstance(eta, bool) or not isinstance(eta, int) or eta < 0):
        raise TraceFormatError(len(before), "x_eta", f"must be an int >= 0, got {eta!r}")
    return rest, (policy, bounded, eta)


def _check_peer(config: Config, entries: Iterable[TraceEntry], policy: str, bounded: bool,
                eta: int | None, progress: Callable[[int], None] | None) -> Report:
    """A peer's log: no reference to replay; ``PeerTracker`` checks what every rule must do."""
    report = Report(PEER, config, policy=policy, bounded=bounded)
    tracker = PeerTracker(config, policy, bounded, eta)
    report.eta = tracker.eta
    for entry in entries:
        report.events += 1
        if progress is not None and report.events % PROGRESS_EVERY == 0:
            progress(report.events)
        report.refused += entry.refused
        report.logged.setdefault(entry.op, set()).update(entry.logged)
        violation = tracker.step(entry)
        if violation is not None:
            report.problem = Problem(entry, [], violation, tracked=tracker.describe())
            break
    report.units = len(tracker.units)
    report.batches = tracker.batches
    report.max_staleness = tracker.max_staleness_seen
    report.max_in_flight = tracker.max_in_flight_seen
    report.live_at_end = sum(tracker.live.values())
    report.over_eta = tracker.over_eta
    report.staleness = dict(sorted(tracker.staleness.items()))
    return report
