"""What every framework plugin asks of the controller the same way: how many admissions would
succeed now, and when the stuck-head fail-safe is due. Plugins own the clock (the core has
none); what they do with the released units is theirs."""

from __future__ import annotations

import time
from typing import Optional

from ..machine import StalenessController
from ..types import BufferStatus, SlotState


def free_reservations(ctl: StalenessController) -> int:
    """How many reserve() calls in a row succeed: EMPTY slots of legal, not-READY buffers."""
    top = ctl.version + ctl.config.max_staleness
    return sum(sum(1 for state, _ in b.slots if state is SlotState.EMPTY)
               for b in ctl.snapshot().buffers
               if b.v_buffer <= top and b.status is not BufferStatus.READY)


class StuckTimer:
    """The wall-clock side of ``release_stuck``: ``due`` is true once the head buffer has been
    STUCK for ``timeout_s`` in a row (``None``: never); a consume or a release ``reset``s it."""

    def __init__(self, timeout_s: Optional[float]) -> None:
        self.timeout_s = timeout_s
        self._since: Optional[float] = None

    def reset(self) -> None:
        self._since = None

    def due(self, ctl: StalenessController) -> bool:
        if self.timeout_s is None or ctl.head_status is not BufferStatus.STUCK:
            self._since = None
            return False
        now = time.monotonic()
        if self._since is None:
            self._since = now
            return False
        return now - self._since >= self.timeout_s
