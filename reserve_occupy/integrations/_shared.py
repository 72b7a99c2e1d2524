"""What every framework plugin asks of the controller the same way: how many admissions would
succeed now; and how a plugin checks the numbers its user gives it (a whole number with a
minimum, a number of seconds). The stuck-head fail-safe is the core's rule
(``reserve_occupy.stuck``); plugins own the clock and pass it the times; what they do with
released units is theirs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from ..machine import StalenessController
from ..types import BufferStatus, SlotState


def free_reservations(ctl: StalenessController) -> int:
    """How many reserve() calls in a row succeed: EMPTY slots of legal, not-READY buffers."""
    top = ctl.version + ctl.config.max_staleness
    return sum(sum(1 for state, _ in b.slots if state is SlotState.EMPTY)
               for b in ctl.snapshot().buffers
               if b.v_buffer <= top and b.status is not BufferStatus.READY)


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
