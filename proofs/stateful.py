"""The Hypothesis state machine: a runtime driving a controller, checking every invariant.

``machine_for(make)`` builds a ``RuleBasedStateMachine`` for a controller factory (the real one
or a mutant). One rule per operation; bundles of in-flight and finished units; GRPO groups with
group-level oversampling (more candidates than the group size) and configurations with
batch-level oversampling (capacity > batch_size), with and without streaming consume (``stream``
while idle; while training it must raise ``IllegalOperation``, and ``filter`` of a streamed unit
``IllegalUnitState``, both changing nothing). After every operation the rule checks the
per-edge properties of the model checker and conformance to the slot-level encoding; an
``@invariant`` per entry of ``INVARIANTS`` (plus the private indexes and the runtime's own view:
every unit it admitted is live or ended in a way it was told about) runs after every step; the
teardown replays the event log and requires the same snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from reserve_occupy import (
    INVARIANTS,
    Config,
    Group,
    IllegalOperation,
    IllegalUnitState,
    Phase,
    ReplayDivergence,
    SlotState,
    StalenessController,
    UnitState,
    apply,
    replay,
)

from .modelcheck import check_state, edge_checks
from .refine import concrete_ops, conformance

CONFIGS = st.builds(
    lambda eta, b, spare, limit, streaming, stuck: Config(eta, b, b + spare, limit, streaming,
                                                          *stuck),
    st.integers(0, 3), st.integers(1, 3), st.integers(0, 2),
    st.one_of(st.none(), st.integers(1, 6)), st.booleans(),
    # the STUCK release's options (spec §6.2); the source protocol's release first
    st.sampled_from([("release", None), ("retry", None), ("truncate", None), ("truncate", 1)]))


class Violation(AssertionError):
    """A check of the state machine failed; ``check`` names it (as in the kill table)."""

    def __init__(self, check: str, detail: str) -> None:
        self.check = check
        super().__init__(f"{check}: {detail}")


def _invariant_method(name: str) -> Callable[[Any], None]:
    check = INVARIANTS[name]

    def method(self: Any) -> None:
        if getattr(self, "c", None) is None:
            return
        detail = check(self.c.snapshot())
        if detail is not None:
            raise Violation(f"invariant:{name}", detail)

    method.__name__ = f"invariant_{name}"
    return invariant()(method)


def _head_holds(c: StalenessController, kind: SlotState) -> bool:
    buf = c._table.head_buffer()
    return buf is not None and kind in buf.slot_states()


class ControllerMachine(RuleBasedStateMachine):
    make: Callable[[Config], StalenessController] = StalenessController

    in_flight = Bundle("in_flight")
    finished = Bundle("finished")

    def __init__(self) -> None:
        super().__init__()
        self.c: StalenessController | None = None
        self.failed = False  # a check already failed: teardown must not mask it

    @initialize(config=CONFIGS)
    def start(self, config: Config) -> None:
        self.c = type(self).make(config)
        self.ops = concrete_ops(config)
        self.view: dict[Any, str] = {}  # what the runtime was told about each unit
        self.groups: dict[str, Group] = {}
        self.next_unit = 0

    # -------------------------------------------------------------- plumbing -------------

    def _run(self, op: str, unit: Any = None) -> Any:
        c = self.c
        pre = c.clone()
        try:
            result = getattr(c, op)(unit) if unit is not None else getattr(c, op)()
        except IllegalUnitState:
            raise
        except Exception as e:
            self.failed = True
            raise Violation("crash", f"{op}({unit!r}): {type(e).__name__}: {e}") from e
        refused = result is None if op in ("reserve", "consume") else (
            (op == "release_stuck" and result == []) or (op == "stream" and result == ()))
        # Same order as the model checker: per-edge properties, then the invariants of the new
        # state, then conformance to the encoding (so the kill table names the most specific
        # check that noticed).
        bad = edge_checks(pre, op, unit, c, result, refused) or check_state(c)
        if bad:
            self._fail(*bad)
        why = conformance(self.ops, pre, op, unit, c, refused)
        if why:
            self._fail("spec", why)
        self._tell(op, unit, result, refused)
        return result, refused

    def _fail(self, check: str, detail: str) -> None:
        self.failed = True
        raise Violation(check, detail)

    def _tell(self, op: str, unit: Any, result: Any, refused: bool) -> None:
        """Update the runtime's view from what the operation reported (nothing else)."""
        if refused:
            return
        view = self.view
        if op == "reserve":
            view[unit] = "in_flight"
        elif op == "occupy":
            view[unit] = "finished"
        elif op == "abort":
            view[unit] = "aborted"
        elif op == "filter":
            view[unit] = "filtered"
        elif op == "consume":
            for u in result.unit_ids:
                view[u] = "consumed"
        elif op == "stream":
            for bu in result:
                view[bu.unit_id] = "streamed"
        if op in ("occupy", "abort", "filter"):
            for u in result.aborted:
                view[u] = "aborted"
        if op == "release_stuck":  # truncated units (FINISHED) first, then aborted ones
            aborted = set(c.last_event.aborted) if (c := self.c) is not None else set()
            for u in result:
                view[u] = "aborted" if u in aborted else "finished"

    # -------------------------------------------------------------- rules ----------------

    @rule(target=in_flight)
    def reserve(self) -> Any:
        unit = self.next_unit
        self.next_unit += 1
        _, refused = self._run("reserve", unit)
        return multiple() if refused else unit

    @rule(target=finished, unit=consumes(in_flight))
    def occupy(self, unit: int) -> Any:
        if self.view[unit] != "in_flight":  # closing or release_stuck aborted it meanwhile
            try:
                self.c.occupy(unit)
            except IllegalUnitState:
                return multiple()
            self._fail("edge:accounting", f"occupy of ended unit {unit} was accepted")
        self._run("occupy", unit)
        return unit

    @rule(unit=consumes(in_flight))
    def abort(self, unit: int) -> None:
        if self.view[unit] == "in_flight":
            self._run("abort", unit)

    @rule(unit=consumes(finished))
    def filter(self, unit: int) -> None:
        if self.view[unit] == "finished":
            self._run("filter", unit)
        elif self.view[unit] == "streamed":
            self._refused_by(IllegalUnitState, "filter", unit)

    def _refused_by(self, error: type, op: str, unit: Any = None) -> None:
        """The operation must raise ``error`` and change nothing (snapshot and log)."""
        c = self.c
        before, n = c.snapshot(), c.event_count
        try:
            getattr(c, op)(*(() if unit is None else (unit,)))
        except error:
            if c.snapshot() != before or c.event_count != n:
                self._fail("edge:refusal", f"{op}({unit!r}) raised but changed the state")
            return
        self._fail("edge:stream", f"{op}({unit!r}) was accepted; {error.__name__} expected")

    @precondition(lambda self: self.c is not None and self.c.config.streaming)
    @rule()
    def stream(self) -> None:
        if self.c.phase is Phase.IDLE:
            self._run("stream")
        else:
            self._refused_by(IllegalOperation, "stream")

    # consume and release_stuck only when the head holds something they act on: refusals on an
    # empty head are checked exhaustively by the model checker, and here they would crowd out
    # the steps that change the state.
    @precondition(lambda self: self.c is not None and self.c.phase is Phase.IDLE
                  and _head_holds(self.c, SlotState.OCCUPIED))
    @rule()
    def consume(self) -> None:
        self._run("consume")

    @precondition(lambda self: self.c is not None and self.c.phase is Phase.TRAINING)
    @rule()
    def publish(self) -> None:
        self._run("publish")

    @precondition(lambda self: self.c is not None and self.c.phase is Phase.IDLE
                  and _head_holds(self.c, SlotState.RESERVED))
    @rule()
    def release_stuck(self) -> None:
        self._run("release_stuck")

    @rule(size=st.integers(1, 3), extra=st.integers(0, 2))
    def admit_group(self, size: int, extra: int) -> None:
        """A GRPO group takes one slot; ``extra`` > 0 is group-level oversampling (spec §6.5)."""
        gid = f"g{self.next_unit}"
        self.next_unit += 1
        _, refused = self._run("reserve", gid)
        if not refused:
            self.groups[gid] = Group(gid, size, size + extra)

    @precondition(lambda self: self.c is not None and bool(self.groups))
    @rule(data=st.data())
    def group_candidate_reports(self, data: st.DataObject) -> None:
        gid = data.draw(st.sampled_from(sorted(self.groups)))
        group = self.groups[gid]
        if self.view[gid] != "in_flight":  # the controller aborted the group's unit
            del self.groups[gid]
            return
        cand = data.draw(st.sampled_from(group.running))
        running_before = set(group.running)
        fails = data.draw(st.integers(0, 3)) == 0  # candidates mostly finish
        progress = group.fail(cand) if fails else group.finish(cand)
        assert set(progress.surplus) <= running_before - {cand}
        if progress.complete:
            assert len(group.committed) == group.size
            del self.groups[gid]
            self._run("occupy", gid)
        elif progress.failed:
            del self.groups[gid]
            self._run("abort", gid)

    # -------------------------------------------------------------- invariants -----------

    for _name in INVARIANTS:
        locals()[f"invariant_{_name}"] = _invariant_method(_name)
    del _name

    @invariant()
    def private_indexes(self) -> None:
        if self.c is None:
            return
        try:
            self.c.check()
        except AssertionError as e:
            raise Violation(f"invariant:{getattr(e, 'invariant', 'private')}", str(e)) from e

    @invariant()
    def nothing_lost_silently(self) -> None:
        """Every admitted unit is live or ended consumed/aborted/filtered, and the runtime was
        told so: its view matches the controller's records unit for unit."""
        if self.c is None:
            return
        want = {"in_flight": UnitState.IN_FLIGHT, "finished": UnitState.FINISHED,
                "consumed": UnitState.CONSUMED, "aborted": UnitState.ABORTED,
                "filtered": UnitState.FILTERED, "streamed": UnitState.STREAMED}
        if set(self.view) != set(self.c._units):
            raise Violation("edge:accounting", "admitted units and the runtime's view differ")
        for u, seen in self.view.items():
            if self.c._state_of(u) is not want[seen]:
                raise Violation("edge:accounting", f"unit {u!r}: runtime was told {seen}, "
                                f"controller says {self.c._state_of(u).value}")

    def teardown(self) -> None:
        """The event log replays, outcome for outcome, to the same snapshot (on a fresh
        controller from the same factory; ``reserve_occupy.replay`` for the real one)."""
        if self.c is None or self.failed:
            return
        make = type(self).make
        if make is StalenessController:
            try:
                again = replay(self.c.config, self.c.events)
            except ReplayDivergence as e:
                raise Violation("replay", str(e)) from e
        else:
            again = make(self.c.config)
            for event in self.c.events:
                if apply(again, event) != event:
                    raise Violation("replay", f"event {event.seq} replays differently")
        if again.snapshot() != self.c.snapshot():
            raise Violation("replay", "replaying the event log gave a different snapshot")


def machine_for(make: Callable[[Config], StalenessController]) -> type[ControllerMachine]:
    return type(f"Machine_{getattr(make, '__qualname__', 'real')}", (ControllerMachine,),
                {"make": staticmethod(make)})
