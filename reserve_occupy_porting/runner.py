"""Kept for one release: the old name of ``reserve_occupy_porting.vector_runner``
(the conformance vectors through an adapter). ``runner`` also names a module of the simulator
(``reserve_occupy_sim.model.runner``), so issue 35 renamed this one; importing it re-exports
the new module's public names, the same objects, and warns (``DeprecationWarning``).
Import ``reserve_occupy_porting.vector_runner`` instead.
"""

from __future__ import annotations

import warnings

from .vector_runner import (
    MAX_ANSWER_BYTES,
    STUCK_GRACE_S,
    UNIT_OPS,
    Adapter,
    AdapterError,
    AdapterTimeout,
    CallGuard,
    Failure,
    ReferenceAdapter,
    Result,
    SubprocessAdapter,
    outcome_record,
    run,
    run_vector,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "STUCK_GRACE_S",
    "UNIT_OPS",
    "Adapter",
    "AdapterError",
    "AdapterTimeout",
    "CallGuard",
    "Failure",
    "ReferenceAdapter",
    "Result",
    "SubprocessAdapter",
    "outcome_record",
    "run",
    "run_vector",
]

warnings.warn("reserve_occupy_porting.runner was renamed reserve_occupy_porting.vector_runner "
              "(issue 35); the old name is kept for one release", DeprecationWarning, stacklevel=2)
