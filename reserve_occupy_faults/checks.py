"""Kept for one release: the old name of ``reserve_occupy_faults.properties``
(what every fault-injection run must satisfy). ``checks`` also names a module of the simulator
(``reserve_occupy_sim.model.checks``), so issue 35 renamed this one; importing it re-exports
the new module's public names, the same objects, and warns (``DeprecationWarning``).
Import ``reserve_occupy_faults.properties`` instead.
"""

from __future__ import annotations

import warnings

from .properties import (
    AFTER_RANK_LOSS,
    CHECKS,
    CrashPoint,
    Evidence,
    RankLoss,
    check_conservation,
    check_lineage,
    check_rank_loss,
    check_recovery,
    check_staleness,
    check_trace,
)

__all__ = [
    "AFTER_RANK_LOSS",
    "CHECKS",
    "CrashPoint",
    "Evidence",
    "RankLoss",
    "check_conservation",
    "check_lineage",
    "check_rank_loss",
    "check_recovery",
    "check_staleness",
    "check_trace",
]

warnings.warn("reserve_occupy_faults.checks was renamed reserve_occupy_faults.properties "
              "(issue 35); the old name is kept for one release", DeprecationWarning, stacklevel=2)
