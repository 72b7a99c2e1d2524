"""reserve-occupy: a verified staleness controller for asynchronous RL of LLMs.

The pure core of the Reserve–Occupy protocol (spec/PROTOCOL.md). No I/O, clocks or threads:
a runtime feeds it events (``reserve``, ``occupy``, ``abort``, ``filter``, ``consume``,
``publish``, ``release_stuck``, and ``stream`` with ``Config.streaming``) and acts on what it
returns.
"""

from .config import Config
from .errors import (
    ConfigError,
    DuplicateUnit,
    EventsForgotten,
    GroupError,
    IllegalOperation,
    IllegalUnitState,
    InvalidUnitId,
    InvariantViolation,
    NotAnEvent,
    ProtocolError,
    ReplayDivergence,
    UnitError,
    UnknownUnit,
)
from .groups import Group, GroupProgress
from .invariants import INVARIANTS, check_snapshot, violations
from .machine import OPERATIONS, UNIT_LIFECYCLE, StalenessController, apply, replay
from .types import (
    Batch,
    BatchUnit,
    BatchUnits,
    BufferStatus,
    BufferView,
    Event,
    Move,
    MoveReason,
    Phase,
    Placement,
    Removal,
    Reservation,
    SlotRef,
    SlotState,
    Snapshot,
    UnitId,
    UnitState,
    UnitView,
)

__version__ = "0.1.0"

__all__ = [
    "INVARIANTS",
    "OPERATIONS",
    "UNIT_LIFECYCLE",
    "Batch",
    "BatchUnit",
    "BatchUnits",
    "BufferStatus",
    "BufferView",
    "Config",
    "ConfigError",
    "DuplicateUnit",
    "EventsForgotten",
    "Event",
    "Group",
    "GroupError",
    "GroupProgress",
    "IllegalOperation",
    "IllegalUnitState",
    "InvalidUnitId",
    "InvariantViolation",
    "Move",
    "MoveReason",
    "NotAnEvent",
    "Phase",
    "Placement",
    "ProtocolError",
    "Removal",
    "ReplayDivergence",
    "Reservation",
    "SlotRef",
    "SlotState",
    "Snapshot",
    "StalenessController",
    "UnitError",
    "UnitId",
    "UnitState",
    "UnitView",
    "UnknownUnit",
    "apply",
    "check_snapshot",
    "replay",
    "violations",
]
