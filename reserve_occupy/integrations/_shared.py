"""What every framework plugin asks of the controller the same way: how many admissions would
succeed now; one poll of the stuck-head fail-safe; and how a plugin checks the numbers its user
gives it (a whole number with a minimum, a number of seconds). The fail-safe is the core's rule
(``reserve_occupy.stuck``); plugins own the clock and pass it the times; what they do with
released units is theirs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..machine import StalenessController
from ..stuck import StuckTimeouts, escalation
from ..types import BufferStatus, SlotState, UnitId


def free_reservations(ctl: StalenessController) -> int:
    """How many reserve() calls in a row succeed: EMPTY slots of legal, not-READY buffers."""
    top = ctl.version + ctl.config.max_staleness
    return sum(sum(1 for state, _ in b.slots if state is SlotState.EMPTY)
               for b in ctl.snapshot().buffers
               if b.v_buffer <= top and b.status is not BufferStatus.READY)


@dataclass(frozen=True)
class StuckRelease:
    """What one release of the fail-safe did: ``released``, the head buffer's reservations
    (in the controller's order); ``escalated``, the units its escalation aborted, in the order
    aborted; ``gone``, every unit no longer in flight because of it (those two and what each
    abort's closing rule took with it)."""

    released: list[UnitId]
    escalated: list[UnitId]
    gone: set[UnitId]


def release_stuck(ctl: StalenessController, stuck: StuckTimeouts,
                  admitted_at: dict[UnitId, float], now: float) -> StuckRelease | None:
    """One poll of the fail-safe while the trainer waits, at time ``now``: None unless the
    head buffer has been STUCK for the timeout in force; else release its reservations and
    escalate as ``reserve_occupy.stuck`` says (from the third release in a row with no
    progress, also abort every unit in flight since before the previous release).
    ``admitted_at`` (each in-flight unit's admission time) loses every unit that is gone."""
    if not stuck.due(ctl, now):
        return None
    released = ctl.release_stuck()
    stuck.reset()
    gone = set(released)
    escalated: list[UnitId] = []
    cutoff = stuck.released(ctl, now) if released else None
    if cutoff is not None:
        for unit in escalation(ctl, admitted_at, cutoff):
            if unit not in gone:  # not aborted by an earlier one's closing rule
                removal = ctl.abort(unit)
                gone |= {unit, *removal.aborted}
                escalated.append(unit)
    for unit in gone:
        admitted_at.pop(unit, None)
    return StuckRelease(list(released), escalated, gone)


E = TypeVar("E", bound=BaseException)
SettingError = Callable[[str, object, str], Exception]  # (key, value, requirement) -> error


def integer_setting(error: SettingError, key: str, value: object, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum``, else ``error(key, value, requirement)``
    raised. bool is an int subclass, and int() would truncate 1.7 or parse "2": each is a
    mistake, refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(key, value, f"must be an integer >= {minimum}")
    if value < minimum:
        raise error(key, value, f"must be >= {minimum}")
    return value


def seconds_setting(error: SettingError, key: str, value: object) -> float:
    """``value`` as float if it is a finite number of seconds > 0, else ``error`` raised."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(key, value, "must be a number of seconds")
    if not (math.isfinite(value) and value > 0):
        raise error(key, value, "must be finite and > 0")
    return float(value)


def own_error(exc: BaseException, kind: type[E]) -> E | None:
    """The plugin's own error (an instance of ``kind``) behind ``exc``: itself, what it was
    raised from, or the ``cause`` of a Ray task error (an error raised in an actor reaches the
    driver wrapped in one); None if there is none within 16 links."""
    for _ in range(16):  # a chain longer than this is not ours
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            exc = cause
        elif isinstance(exc, kind):
            return exc
        elif exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            return None
    return None


def missing_module(plugin: str, exc: ModuleNotFoundError, extra: str,
                   packages: dict[str, str] | None = None) -> str:
    """One line for a plugin's entry point whose framework (or one of the framework's imports)
    is not installed: the missing module, and how to install it -- ``packages`` maps a
    top-level module to its own instructions (a framework installed without its declared
    dependencies, a GPU package), else the project's ``extra``. Re-raises ``exc`` when this
    project's own module is missing: a broken install, not an extra."""
    top = (exc.name or "").split(".")[0]
    if not top or top in ("reserve_occupy", "runtime"):
        raise exc
    how = (packages or {}).get(top) or f"install it with pip install 'reserve-occupy[{extra}]'"
    return f"error: {plugin} needs the module {top!r}, which this install lacks; {how}"
