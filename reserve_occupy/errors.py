"""Every error the core raises.

One base class, ``ProtocolError``, so an embedding runtime can catch the whole family.
Each subclass names what was wrong; every operation validates its input before it changes
anything, so an error always leaves the controller exactly as it was.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every error raised by ``reserve_occupy``."""


class ConfigError(ProtocolError, ValueError):
    """A ``Config`` field has an invalid value. ``field`` names it."""

    def __init__(self, field: str, value: object, requirement: str) -> None:
        self.field = field
        self.value = value
        self.requirement = requirement
        super().__init__(f"invalid Config.{field}={value!r}: {requirement}")


class IllegalOperation(ProtocolError):
    """The operation is not allowed in the trainer's current phase.

    Raised for ``consume`` while a batch is training, ``publish`` while the trainer is idle,
    ``release_stuck`` or ``stream`` while training; ``requires`` names a ``Config`` option the
    operation needs and the controller lacks (``stream`` without ``Config.streaming``).
    """

    def __init__(self, operation: str, phase: str, requires: str | None = None) -> None:
        self.operation = operation
        self.phase = phase
        self.requires = requires
        if requires is None:
            super().__init__(f"can't {operation} when trainer={phase}")
        else:
            super().__init__(f"can't {operation}: {requires}")


class UnitError(ProtocolError):
    """Base class of errors about one unit (trajectory or group)."""

    def __init__(self, operation: str, unit_id: object, message: str) -> None:
        self.operation = operation
        self.unit_id = unit_id
        super().__init__(message)


class UnknownUnit(UnitError, KeyError):
    """The unit id was never admitted by this controller."""

    def __init__(self, operation: str, unit_id: object) -> None:
        super().__init__(operation, unit_id, f"can't {operation} unit {unit_id!r}: never reserved")

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class DuplicateUnit(UnitError):
    """``reserve`` was called with an id this controller has already seen."""

    def __init__(self, unit_id: object, state: str) -> None:
        self.state = state
        super().__init__(
            "reserve", unit_id, f"can't reserve unit {unit_id!r}: already known (state {state})"
        )


class InvalidUnitId(UnitError, TypeError):
    """Unit ids must be ``str`` or ``int`` so that traces serialise faithfully."""

    def __init__(self, operation: str, unit_id: object) -> None:
        super().__init__(
            operation,
            unit_id,
            f"can't {operation} unit {unit_id!r}: id must be str or int, "
            f"not {type(unit_id).__name__}",
        )


class IllegalUnitState(UnitError):
    """The unit exists but the operation does not apply to its lifecycle state.

    Examples: occupy twice, occupy after abort, filter of a unit that is still in flight.
    """

    def __init__(self, operation: str, unit_id: object, state: str) -> None:
        self.state = state
        super().__init__(operation, unit_id, f"can't {operation} unit {unit_id!r} in state {state}")


class InvariantViolation(ProtocolError, AssertionError):
    """A named invariant of ``spec/PROTOCOL.md`` does not hold. ``invariant`` names it."""

    def __init__(self, invariant: str, detail: str) -> None:
        self.invariant = invariant
        self.detail = detail
        super().__init__(f"invariant {invariant!r} violated: {detail}")


class ReplayDivergence(ProtocolError):
    """Replaying an event log produced a different outcome than the one recorded."""

    def __init__(self, seq: int, expected: object, actual: object) -> None:
        self.seq = seq
        self.expected = expected
        self.actual = actual
        super().__init__(f"event {seq}: recorded {expected!r}, replay gave {actual!r}")


class EventsForgotten(ProtocolError, LookupError):
    """The events asked for were dropped from memory by ``forget_events`` (a runtime that
    journals every event to a file keeps only the events it has not yet counted). ``first`` is
    the number of the oldest event still held; read older ones from where they were written."""

    def __init__(self, asked: str, first: int) -> None:
        self.first = first
        super().__init__(f"{asked}: events 0..{first - 1} were forgotten (forget_events); "
                         f"this controller holds the events from {first} on -- read the "
                         f"earlier ones from the log they were written to")


class NotAnEvent(ProtocolError, TypeError):
    """``replay`` or ``apply`` was given something that is not an ``Event`` (a trace record
    dict, text, None), or ``replay`` events that are not an iterable of them. ``index`` is the
    position in the events (None: the argument as a whole)."""

    def __init__(self, value: object, index: int | None = None, sequence: bool = False) -> None:
        self.index = index
        self.value = value
        shown = repr(value)
        got = f"{type(value).__name__} {shown if len(shown) <= 80 else shown[:77] + '...'}"
        if sequence:
            super().__init__(f"replay's events must be an iterable of reserve_occupy.Event "
                             f"(such as controller.events), got {got}")
            return
        where = f"event {index}" if index is not None else "the event"
        hint = (" (a trace line becomes one with reserve_occupy.trace.parse_record(record, "
                "line).event)" if isinstance(value, dict) else "")
        super().__init__(f"{where} is not a reserve_occupy.Event: {got}{hint}")


class GroupError(ProtocolError):
    """Misuse of a ``Group`` (unknown candidate, candidate reported twice, group closed)."""
