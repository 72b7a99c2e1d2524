"""The plugins' shared fail-safe poll (``reserve_occupy.integrations._shared.release_stuck``),
the one the OpenRLHF, verl and NeMo-RL plugins call while their trainer waits, driven directly
on a controller and a simulated clock: back-off, then escalation, as ``reserve_occupy.stuck``
says; what it returns is what each plugin books (released, escalated, gone)."""

from __future__ import annotations

from reserve_occupy import Config, StalenessController, UnitState
from reserve_occupy.integrations._shared import release_stuck
from reserve_occupy.stuck import StuckTimeouts
from tests.integrations.stuck_checks import check_backoff, check_escalation


def test_release_stuck_backs_off_escalates_and_books_what_is_gone():
    """eta 1, batches of 2: u1 is placed at the head, u2 hangs beside it, u0 and u3 hang in
    the next buffer (the controller's slot order). The head's reservation is released at T,
    re-admitted, released again at T, 2T, 4T later (fruitless: nothing placed); the fourth
    release also aborts u0 and u3, in flight since before the third. ``admitted_at`` keeps
    only the units still in flight."""
    timeout, tick = 1.0, 0.05
    ctl = StalenessController(Config(max_staleness=1, batch_size=2))
    stuck = StuckTimeouts(timeout)
    admitted_at: dict[str, float] = {}
    for unit in ("u0", "u1", "u2", "u3"):
        assert ctl.reserve(unit) is not None
        admitted_at[unit] = 0.0
    ctl.occupy("u1")
    del admitted_at["u1"]
    release_times, released, escalated, n = [], [], [], 4
    for step in range(400):
        now = step * tick
        done = release_stuck(ctl, stuck, admitted_at, now)
        if done is None:
            continue
        assert done.gone == set(done.released) | set(done.escalated)
        assert not done.gone & set(admitted_at)  # gone units are no longer booked in flight
        assert all(ctl.unit_state(u) is not UnitState.IN_FLIGHT for u in done.gone)
        release_times.append(now)
        released += done.released
        escalated += done.escalated
        if done.escalated:
            break
        unit = f"u{n}"  # admission refills the released head slot; it hangs too
        n += 1
        assert ctl.reserve(unit) is not None
        admitted_at[unit] = now
    assert len(release_times) == 4
    check_backoff(release_times, timeout, tick)
    assert check_escalation(ctl.events, escalated) == ["u0", "u3"]
    assert released == ["u2", "u4", "u5", "u6"]
    assert not admitted_at  # u6 released, u0 and u3 aborted: nothing in flight
    # the head has an EMPTY slot again: not STUCK, nothing to release however long it waits
    assert release_stuck(ctl, stuck, admitted_at, release_times[-1] + 100.0) is None
    ctl.check()
