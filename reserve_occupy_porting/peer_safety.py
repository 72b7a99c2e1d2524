"""What ``check-trace --peer NAME`` checks of a peer's event log (a header with ``x_policy``,
written by ``runtime.peers.PeerController``): the rule is not Reserve–Occupy, so there is no
reference to replay and no slot table; what any staleness control must still do is checked. The
check runs only when the caller names the rule; the header never selects it.

* every unit's lifecycle: ``reserve`` once, then ``occupy`` or ``abort`` while in flight, then
  ``consume`` (trained) or ``filter`` (dropped untrained) once finished;
* ``reserve``'s ``v_traj`` is the version then, ``occupy``'s the unit's own;
* the version: each event logs the current one, ``publish`` moves it by one and only after a
  ``consume``, a ``consume`` trains the current version and waits for its ``publish``;
* full batches (``batch_size`` units); a batch unit's ``v_traj`` and ``staleness`` are optional
  (the trace format's), and where logged they are the unit's own (staleness = version - v_traj);
* ``head``, where logged, is the version (a peer has no buffers: ``PeerController`` writes
  head = version); refused lines' ``version`` and ``head`` are checked too;
* an occupy's ``served``, where logged: the first version not older than the unit's ``v_traj``,
  the last not newer than the published version;
* the staleness bound, for a rule that promises it (the named rule's ``bounded``): a unit
  staler than eta (the eta the named rule enforces at the config's eta: 0 for ``synchronous``;
  never the header's ``x_eta``, which must agree) is a violation. An unbounded rule breaks the
  bound by design: its trained staleness is reported (``over_eta``: units trained staler than
  eta), never called a failure.

* ``stream`` (a rule whose simulator policy streams, NeMo-RL's, in a log whose header has
  ``streaming``): the units handed are finished and not handed before, of the current version,
  their staleness within the bound as at ``consume`` (they train now), and no more than the
  step lacks; a streamed unit cannot be filtered, and the next ``consume`` must train every
  streamed unit (its ``batch.streamed`` naming exactly them). A streamed unit counts once, at
  that consume. A stream by a rule that does not stream, or in a log without streaming, is a
  violation.

``release_stuck`` is Reserve–Occupy's and a violation here, and so are a ``slot``, a ``moves``
or an ``aborted`` list that names anything (a peer's rule has no slot table and no closing rule;
it aborts with ``abort`` events).
"""

from __future__ import annotations

from reserve_occupy import Config
from reserve_occupy.trace import TraceEntry

from .safety import Violation

IN_FLIGHT, FINISHED, STREAMED, DONE = "in flight", "finished", "streamed", "done"


class PeerTracker:
    """Follows a peer's trace; ``step`` returns the first violation of each event."""

    def __init__(self, config: Config, policy: str, bounded: bool,
                 eta: int | None = None, streams: bool = False) -> None:
        self.config = config
        self.policy = policy
        self.bounded = bounded
        self.streams = streams  # the named rule's policy streams (Policy.streams)
        self.step_units: list[object] = []  # streamed for the open step
        self.eta = config.max_staleness if eta is None else eta  # the named rule's own
        self.version = 0
        self.training = False
        self.units: dict[object, str] = {}
        self.v_traj: dict[object, int] = {}
        self.batches = 0
        self.max_staleness_seen = -1
        self.max_in_flight_seen = 0
        self.in_flight = 0
        self.over_eta = 0  # units trained staler than eta (unbounded rules only)
        self.staleness: dict[int, int] = {}
        # what the log discarded untrained: finished units (``filter``: the rule's drops) and
        # in-flight ones (``abort``: the rule's or the runtime's)
        self.dropped = 0
        self.aborted = 0

    @property
    def live(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for state in self.units.values():
            if state != DONE:
                out[state] = out.get(state, 0) + 1
        return out

    def describe(self) -> str:
        return (f"policy={self.policy} version={self.version} "
                f"training={self.training} live={self.live}")

    def step(self, entry: TraceEntry) -> Violation | None:
        e = entry.event
        for name in ("version", "head"):
            logged = getattr(e, name)
            if logged is not None and logged != self.version:
                return Violation("version", f"{e.op} logs {name} {logged}, the version is "
                                            f"{self.version}" + (
                                                "" if name == "version" else
                                                " (a peer's log has no buffers: head is the "
                                                "version)"))
        if entry.refused:
            return None
        for name, named in (("slot", e.slot is not None), ("moves", bool(e.moves)),
                            ("aborted", bool(e.aborted))):
            if named:
                return Violation("operation", f"{e.op} logs {name}, which is Reserve–Occupy's "
                                              f"slot table's; {self.policy} has none (it "
                                              f"aborts with abort events)")
        op, u = e.op, e.unit_id
        state = self.units.get(u)
        if op == "reserve":
            if state is not None:
                return Violation("lifecycle", f"unit {u!r} reserved twice")
            if "v_traj" in entry.logged and e.v_traj != self.version:
                return Violation("version", f"unit {u!r} reserved with v_traj {e.v_traj} at "
                                            f"version {self.version}")
            self.units[u], self.v_traj[u] = IN_FLIGHT, self.version
            self.in_flight += 1
            self.max_in_flight_seen = max(self.max_in_flight_seen, self.in_flight)
        elif op in ("occupy", "abort"):
            if state != IN_FLIGHT:
                return Violation("lifecycle", f"{op} of unit {u!r}, which is "
                                              f"{state or 'unknown'}, not in flight")
            if op == "occupy" and "v_traj" in entry.logged and e.v_traj != self.v_traj[u]:
                return Violation("version", f"unit {u!r} occupied with v_traj {e.v_traj}, "
                                            f"reserved at {self.v_traj[u]}")
            served = entry.served if op == "occupy" else None
            if served is not None and not self.v_traj[u] <= served[0] <= served[1] <= (
                    self.version):
                return Violation("version", f"unit {u!r} logs served={list(served)}: its "
                                            f"weights must be no older than its v_traj "
                                            f"{self.v_traj[u]} and no newer than the published "
                                            f"version {self.version}")
            self.units[u] = FINISHED if op == "occupy" else DONE
            self.in_flight -= 1
            if op == "abort":
                self.aborted += 1
        elif op == "filter":
            if state != FINISHED:
                return Violation("lifecycle", f"filter of unit {u!r}, which is "
                                              f"{state or 'unknown'}, not finished")
            self.units[u] = DONE
            self.dropped += 1
        elif op == "consume":
            return self._consume(e.batch, "batch.streamed" in entry.logged)  # type: ignore
        elif op == "stream" and self.streams and self.config.streaming:
            return self._stream(e.batch)  # type: ignore[arg-type]
        elif op == "publish":
            if not self.training:
                return Violation("phase", "publish without a consumed batch")
            self.training = False
            self.version += 1
        elif op == "stream":
            why = ("the log's header has no streaming" if self.streams else
                   f"{self.policy} does not stream")
            return Violation("operation", f"stream: {why}")
        else:
            return Violation("operation", f"{op} is Reserve–Occupy's; {self.policy} has none")
        return None

    def _trained_at(self, unit) -> Violation | None:  # type: ignore[no-untyped-def]
        """A unit handed to the trainer (``consume`` or ``stream``) at the current version:
        its logged v_traj and staleness are its own, and a bounded rule's is within eta."""
        u = unit.unit_id
        staleness = self.version - self.v_traj[u]
        # both optional (absent: not logged, not compared); the reader has checked that they
        # agree with each other where both are logged
        if (unit.v_traj is not None and unit.v_traj != self.v_traj[u]) or (
                unit.staleness is not None and unit.staleness != staleness):
            return Violation("staleness", f"unit {u!r} logged v_traj {unit.v_traj} "
                                          f"staleness {unit.staleness}; it was reserved at "
                                          f"{self.v_traj[u]}: staleness {staleness}")
        if staleness > self.eta and self.bounded:
            return Violation("staleness-bound", f"unit {u!r} trained at staleness "
                                                f"{staleness} > eta {self.eta}; "
                                                f"{self.policy} promises the bound")
        return None

    def _stream(self, batch) -> Violation | None:  # type: ignore[no-untyped-def]
        if self.training:
            return Violation("phase", "stream while the previous batch is not published")
        if batch.version != self.version:
            return Violation("version", f"stream of version {batch.version} at version "
                                        f"{self.version}")
        lacks = self.config.batch_size - len(self.step_units)
        if not batch.units or len(batch.units) > lacks:
            return Violation("full-batch", f"stream of {len(batch.units)} units; the step "
                                           f"lacks {lacks}")
        for unit in batch.units:
            u = unit.unit_id
            if self.units.get(u) != FINISHED:
                return Violation("lifecycle", f"stream of unit {u!r}, which is "
                                              f"{self.units.get(u) or 'unknown'}, not finished")
            bad = self._trained_at(unit)
            if bad is not None:
                return bad
            self.units[u] = STREAMED
            self.step_units.append(u)
        return None

    def _consume(self, batch, streamed_logged: bool = True  # type: ignore[no-untyped-def]
                 ) -> Violation | None:
        if self.training:
            return Violation("phase", "consume while the previous batch is not published")
        if batch.version != self.version:
            return Violation("version", f"batch of version {batch.version} at version "
                                        f"{self.version}")
        if len(batch.units) != self.config.batch_size:
            return Violation("full-batch", f"{len(batch.units)} units, batch_size is "
                                           f"{self.config.batch_size}")
        ids = [u.unit_id for u in batch.units]
        left_out = [u for u in self.step_units if u not in ids]
        if left_out:
            return Violation("lifecycle", f"unit {left_out[0]!r} was streamed but the batch "
                                          f"does not train it")
        if streamed_logged and (set(batch.streamed) != set(self.step_units)
                                or len(batch.streamed) != len(self.step_units)):
            return Violation("lifecycle", f"batch.streamed names {list(batch.streamed)}; "
                                          f"streamed were {self.step_units}")
        for unit in batch.units:
            u = unit.unit_id
            if self.units.get(u) not in (FINISHED, STREAMED):  # DONE once trained
                return Violation("lifecycle", f"consume of unit {u!r}, which is "
                                              f"{self.units.get(u) or 'unknown'}, not finished")
            bad = self._trained_at(unit)
            if bad is not None:
                return bad
            staleness = self.version - self.v_traj[u]
            if staleness > self.eta:
                self.over_eta += 1
            self.units[u] = DONE
            self.max_staleness_seen = max(self.max_staleness_seen, staleness)
            self.staleness[staleness] = self.staleness.get(staleness, 0) + 1
        self.batches += 1
        self.step_units = []
        self.training = True
        return None
