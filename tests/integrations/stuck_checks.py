"""What the plugins' fail-safe tests check on the controller's log: the STUCK rule of
``reserve_occupy.stuck`` (back-off, then escalation), as the driver and the simulator apply it."""

from __future__ import annotations

from reserve_occupy.stuck import ESCALATE_AFTER


def check_backoff(release_times: list[float], timeout: float, tick: float) -> None:
    """Each fruitless release waited twice as long as the one before: the k-th wait (k >= 1)
    is at least ``timeout * 2**(k-1)`` and ends within a few polls of it."""
    gaps = [b - a for a, b in zip(release_times, release_times[1:])]
    for k, gap in enumerate(gaps[:ESCALATE_AFTER]):
        want = timeout * 2 ** k
        assert want <= gap < want + 3 * tick, (k, gaps)


def check_escalation(events, escalated: list) -> list:
    """Three fruitless releases, then the fourth release aborts exactly the units in flight that
    were admitted before the third (the previous) release, and no release before it aborted
    anything. Returns those units."""
    releases = [i for i, e in enumerate(events) if e.op == "release_stuck"]
    assert len(releases) >= ESCALATE_AFTER + 1, releases
    first, escalating = releases[0], releases[ESCALATE_AFTER]
    previous = releases[ESCALATE_AFTER - 1]
    between = {e.op for e in events[first:escalating]}
    assert not between & {"occupy", "consume", "abort", "filter"}, between  # fruitless
    ended = set()
    for e in events[:escalating + 1]:
        if e.op in ("occupy", "abort", "filter"):
            ended.add(e.unit_id)
        ended.update(e.aborted)
    expected = [e.unit_id for e in events[:previous] if e.op == "reserve"
                and e.unit_id not in ended]
    after = events[escalating + 1:escalating + 1 + len(expected)]
    assert expected, "nothing was in flight since before the previous release"
    assert escalated == expected
    assert [(e.op, e.unit_id) for e in after] == [("abort", u) for u in expected]
    return expected
