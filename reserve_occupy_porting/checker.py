"""Check a trace written by any implementation against the reference controller.

Strict mode replays every event through ``reserve_occupy.apply`` on a fresh reference controller
and compares each logged outcome with the reference's (``compare``); it also runs the lenient
tracker alongside, so a trace that matches the reference but breaks a safety invariant (a core
bug) is still caught. Lenient mode runs only the tracker (``safety``), for implementations that
place units differently but legally. Both stop at the first problem.

A peer's log (``runtime.peers``: a header naming its rule in ``x_policy``) is checked only when
the caller names that rule (``check(..., peer=NAME)``, ``check-trace --peer NAME``), by the
rule's own terms (``peer_safety``); its verdict is the rule's, not conformance. The header never
switches the check: without ``peer`` a log naming a peer's rule is refused, and the bound and
eta checked are the named rule's, never the header's ``x_bounded``/``x_eta``.

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
from reserve_occupy_peers import RESERVE_OCCUPY

from .compare import Difference, differences, rule_for
from .peer_safety import PeerTracker
from .safety import SafetyTracker, Violation
from runtime._moved import renamed

STRICT, LENIENT = "strict", "lenient"
PEER = "peer"  # a peer's log, checked by ``peer_safety`` when the caller names its rule
# x_policy of a Reserve–Occupy log (absent: the same) is RESERVE_OCCUPY
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
    # a peer's log (check(peer=...)): its rule, whether the rule promises the bound, the units
    # it trained staler than eta (unbounded rules) and {staleness: units trained}
    policy: str | None = None
    bounded: bool = True
    over_eta: int = 0
    eta: int | None = None  # the eta a peer's rule enforces (the rule's, never the header's)
    staleness: dict[int, int] = field(default_factory=dict)
    # a peer's log: units discarded untrained, finished (filter events) and in flight (abort)
    dropped: int = 0
    aborted: int = 0

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
          progress: Callable[[int], None] | None = None, *, peer: str | None = None) -> Report:
    """Check a whole trace (an iterable of its lines). Raises ``TraceFormatError``.
    ``progress(n)`` is called every ``PROGRESS_EVERY`` events (long traces).

    Every log is checked as Reserve–Occupy's (``mode``) unless the caller names a peer's rule
    (``peer``, one of ``runtime.peers.PEER_POLICIES``): then the log's header must name that
    rule (``x_policy``) and the log is checked by the rule's terms (``peer_safety``), with the
    bound and eta the rule enforces, never the header's. A header never switches the check: a
    log naming a peer's rule without ``peer`` is refused (``PeerHeaderError``)."""
    if mode not in (STRICT, LENIENT):
        raise ValueError(f"mode must be {STRICT!r} or {LENIENT!r}, not {mode!r}")
    if peer is not None:
        from runtime.peers import PEER_POLICIES

        if peer not in PEER_POLICIES:
            raise ValueError(f"unknown peer policy {peer!r} (choose from "
                             f"{', '.join(PEER_POLICIES)})")
        if mode != STRICT:
            raise ValueError(f"a peer's log is checked by its rule's terms: mode {mode!r} is "
                             f"Reserve–Occupy's")
    lines, declared = _declared_policy(lines, peer)
    head, entries = parse_lines(lines)
    if peer is not None:
        bounded, eta = _rule_terms(peer, head.config, *declared)
        return _check_peer(head.config, entries, peer, bounded, eta, progress)
    config, coarse = head.config, head.granularity == "buffer"
    report = Report(mode, config)
    tracker = SafetyTracker(config)
    ref = StalenessController(config) if mode == STRICT else None
    produced_events: list[Event] = []
    for entry in entries:
        _tally(report, entry, progress)
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


class PeerHeaderError(TraceFormatError):
    """The header's ``x_policy``/``x_bounded``/``x_eta`` do not fit the check asked for: a
    peer's log without ``peer``, a rule other than the one named, or terms other than the
    rule's."""


_HeaderTerms = tuple[int, dict[str, Any]]  # the header's line number and its x_ fields


def _declared_policy(lines: Iterable[str], peer: str | None
                     ) -> tuple[Iterable[str], _HeaderTerms]:
    """The lines (unconsumed) and the header's line number and ``x_bounded``/``x_eta``, after
    checking its ``x_policy`` against ``peer`` (None: a Reserve–Occupy log is expected)."""
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
        h = None  # parse_lines reports it (not JSON, nested too deep)
    if not isinstance(h, dict):
        return rest, (len(before), {})  # parse_lines refuses anything but a header
    line = len(before)
    policy = h.get("x_policy", RESERVE_OCCUPY)
    if not isinstance(policy, str):
        raise PeerHeaderError(line, "x_policy", f"must be a string, got {policy!r}")
    if peer is None:
        if policy != RESERVE_OCCUPY:
            from runtime.peers import PEER_POLICIES

            if policy in PEER_POLICIES:
                raise PeerHeaderError(line, "x_policy", f"is {policy!r}, a peer's log, not "
                                      f"Reserve–Occupy's: check-trace --peer {policy} checks it "
                                      f"by that rule's terms (a peer verdict, not conformance)")
            raise PeerHeaderError(line, "x_policy", f"{policy!r} is neither reserve_occupy nor "
                                  f"a peer's rule ({', '.join(PEER_POLICIES)})")
        return rest, (line, {})
    if policy != peer:
        what = ("absent: a Reserve–Occupy log (check it without --peer)"
                if "x_policy" not in h else f"is {policy!r}")
        raise PeerHeaderError(line, "x_policy", f"{what}, not the rule named by --peer "
                                                f"({peer!r})")
    return rest, (line, {k: h[k] for k in ("x_bounded", "x_eta") if k in h})


def _rule_terms(peer: str, config: Config, line: int, written: dict[str, Any]
                ) -> tuple[bool, int]:
    """Whether ``peer``'s rule promises the bound and the eta it enforces, as
    ``PeerController`` writes them (``x_bounded``, ``x_eta``): from the rule, never the header;
    a header that says otherwise is refused."""
    from runtime.peers import make_rule

    rule = make_rule(peer, config.max_staleness)
    bounded, eta = bool(rule.bounded), int(rule.eta)
    if "x_bounded" in written:
        value = written["x_bounded"]
        if not isinstance(value, bool):
            raise PeerHeaderError(line, "x_bounded", f"must be true or false, got {value!r}")
        if value != bounded:
            raise PeerHeaderError(line, "x_bounded", f"is {str(value).lower()}, but {peer} "
                                  f"{'promises' if bounded else 'does not promise'} the bound "
                                  f"(the rule's terms are checked, not the header's)")
    if "x_eta" in written:
        value = written["x_eta"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PeerHeaderError(line, "x_eta", f"must be an int >= 0, got {value!r}")
        if value != eta:
            raise PeerHeaderError(line, "x_eta", f"is {value}, but {peer} enforces eta {eta} "
                                  f"at config.max_staleness {config.max_staleness} (the rule's "
                                  f"eta is checked, not the header's)")
    return bounded, eta


def _tally(report: Report, entry: TraceEntry, progress: Callable[[int], None] | None) -> None:
    """What every check counts for each entry, strict, lenient or a peer's: the event, the
    refusals, the fields logged per op, and a progress call every ``PROGRESS_EVERY``."""
    report.events += 1
    if progress is not None and report.events % PROGRESS_EVERY == 0:
        progress(report.events)
    report.refused += entry.refused
    report.logged.setdefault(entry.op, set()).update(entry.logged)


def _check_peer(config: Config, entries: Iterable[TraceEntry], policy: str, bounded: bool,
                eta: int, progress: Callable[[int], None] | None) -> Report:
    """A peer's log: no reference to replay; ``PeerTracker`` checks what every rule must do."""
    report = Report(PEER, config, policy=policy, bounded=bounded)
    from runtime.peers import peer_streams

    tracker = PeerTracker(config, policy, bounded, eta, streams=peer_streams(policy))
    report.eta = tracker.eta
    for entry in entries:
        _tally(report, entry, progress)
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
    report.dropped, report.aborted = tracker.dropped, tracker.aborted
    return report


# ``REFERENCE``, the old name of ``RESERVE_OCCUPY`` here (the word also named other things), kept
# for one release; it warns (``DeprecationWarning``)
__getattr__ = renamed(__name__, {"REFERENCE": "RESERVE_OCCUPY"}, globals())
