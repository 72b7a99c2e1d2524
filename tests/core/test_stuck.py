"""The STUCK timeout's progress rule (``reserve_occupy.stuck``; spec/PROTOCOL.md §6.2): back-off
on fruitless releases, escalation from the third, and the polling clock the plugins use. The
rule reads no clock: every time here is passed in."""

from __future__ import annotations

import math

from reserve_occupy import BufferStatus, Config, StalenessController, UnitState
from reserve_occupy.stuck import ESCALATE_AFTER, StuckTimeouts, escalation


class _Ctl:
    """What ``progress_mark`` reads, set by hand."""

    def __init__(self) -> None:
        self.head, self.admitted, self.aborted, self.in_flight = 0, 0, 0, 0

    def snapshot(self):
        return self


def test_backoff_doubles_on_fruitless_releases_and_resets_on_progress():
    ctl, t = _Ctl(), StuckTimeouts(3.0)
    assert t.released(ctl, now=10.0) is None  # the first release: nothing to compare with
    assert t.released(ctl, now=13.0) is None and t.timeout == 6.0  # fruitless: back off
    assert t.released(ctl, now=19.0) is None and t.timeout == 12.0
    assert t.released(ctl, now=31.0) == 19.0  # the third in a row escalates: units older
    assert t.timeout == 24.0                  # than the previous release are aborted
    ctl.admitted, ctl.aborted = 3, 1  # one unit placed (aborts alone would not count)
    t.refresh(ctl)
    assert t.timeout == 3.0
    assert t.released(ctl, now=60.0) is None
    ctl.aborted, ctl.admitted, ctl.in_flight = 2, 5, 1  # an abort, re-admissions: no progress
    assert t.released(ctl, now=63.0) is None and t.timeout == 6.0
    ctl.head = 1  # a batch consumed
    assert t.released(ctl, now=70.0) is None and t.timeout == 3.0


def _poll(ctl, rule, admitted_at, now):
    """One poll of a plugin: admit into every legal slot, then ask the rule; on a release, the
    escalation it calls for. Returns (released, escalated) or None when nothing was due."""
    while (r := ctl.reserve(f"u{len(admitted_at)}")) is not None:
        admitted_at[r.unit_id] = now
    if not rule.due(ctl, now):
        return None
    released = ctl.release_stuck()
    cutoff = rule.released(ctl, now)
    rule.reset()
    escalated = escalation(ctl, admitted_at, cutoff) if cutoff is not None else []
    for u in escalated:
        ctl.abort(u)
    ctl.check()
    return released, escalated, cutoff


def test_a_polling_caller_backs_off_then_escalates_to_the_units_older_than_the_last_release():
    # eta 1, B = C = 2: u0, u1 reserve buffer 1 and never finish; the head's reservations are
    # released and re-admitted at every timeout, and nothing is ever placed.
    ctl, rule, admitted_at = StalenessController(Config(1, 2)), StuckTimeouts(3.0), {}
    releases = []
    now = 0.0
    while len(releases) < ESCALATE_AFTER + 1:
        got = _poll(ctl, rule, admitted_at, now)
        if got is not None:
            releases.append((now, *got))
        now += 0.5
    times = [t for t, *_ in releases]
    # each wait starts at the poll after a release and lasts T, T, 2T, 4T
    assert times == [3.0, 6.5, 13.0, 25.5]
    assert [len(r) for _, r, _, _ in releases] == [2, 2, 2, 2]  # the head's two each time
    assert [e for _, _, e, _ in releases] == [[], [], [], ["u0", "u1"]]
    assert releases[-1][3] == 13.0  # the cut-off: the previous release
    assert {ctl.unit_state(u) for u in ("u0", "u1")} == {UnitState.ABORTED}
    # the head's latest re-admissions (after the cut-off) were released, not escalated
    assert all(admitted_at[u] > 13.0 for u in releases[-1][1])


def test_progress_puts_the_backoff_back_to_the_configured_timeout():
    ctl, rule, admitted_at = StalenessController(Config(1, 2)), StuckTimeouts(3.0), {}
    now = 0.0
    released = 0
    while released < 2:  # two fruitless releases: the wait in force is 2T
        released += _poll(ctl, rule, admitted_at, now) is not None
        now += 0.5
    assert rule.timeout == 6.0
    ctl.occupy(next(u for u in admitted_at if ctl.unit_state(u) is UnitState.IN_FLIGHT))
    _poll(ctl, rule, admitted_at, now)  # the head is STUCK again: the clock starts
    assert ctl.head_status is BufferStatus.STUCK and rule.timeout == 3.0


def test_the_polling_clock_starts_stops_and_is_off_at_infinity():
    ctl, rule = StalenessController(Config(0, 2)), StuckTimeouts(3.0)
    assert not rule.due(ctl, 0.0) and rule.since is None  # no unit: the head is PENDING
    ctl.reserve("a"), ctl.reserve("b")
    assert ctl.head_status is BufferStatus.STUCK
    assert not rule.due(ctl, 1.0) and rule.since == 1.0  # first seen STUCK: starts
    assert not rule.due(ctl, 3.9)
    assert rule.due(ctl, 4.0)  # STUCK for T
    ctl.abort("a")  # the head is no longer STUCK: an EMPTY slot
    assert not rule.due(ctl, 10.0) and rule.since is None
    off = StuckTimeouts(math.inf)
    ctl2 = StalenessController(Config(0, 2))
    ctl2.reserve("a"), ctl2.reserve("b")
    assert not off.due(ctl2, 0.0) and not off.due(ctl2, 1e300)


def test_escalation_names_only_units_in_flight_admitted_before_the_cutoff():
    ctl = StalenessController(Config(2, 2))
    for u in ("a", "b", "c", "d"):
        ctl.reserve(u)
    ctl.occupy("b")
    ctl.abort("c")
    admitted_at = {"d": 1.0, "a": 0.0, "b": 0.5, "c": 0.7}
    assert escalation(ctl, admitted_at, 1.0) == ["a"]  # b finished, c ended, d not older
    assert escalation(ctl, admitted_at, 1.5) == ["a", "d"]
