"""What every framework plugin asks of the controller the same way: how many admissions would
succeed now. The stuck-head fail-safe is the core's rule (``reserve_occupy.stuck``); plugins own
the clock and pass it the times; what they do with released units is theirs."""

from __future__ import annotations

from ..machine import StalenessController
from ..types import BufferStatus, SlotState


def free_reservations(ctl: StalenessController) -> int:
    """How many reserve() calls in a row succeed: EMPTY slots of legal, not-READY buffers."""
    top = ctl.version + ctl.config.max_staleness
    return sum(sum(1 for state, _ in b.slots if state is SlotState.EMPTY)
               for b in ctl.snapshot().buffers
               if b.v_buffer <= top and b.status is not BufferStatus.READY)
