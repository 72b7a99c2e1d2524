"""What ``check-trace --peer NAME`` checks of a peer's event log (a header with ``x_policy``,
written by ``runtime.peers.PeerController``): the rule is not Reserve–Occupy, so there is no
reference to replay and no slot table; what any staleness control must still do is checked. The
check runs only when the caller names the rule; the header never selects it.

* every unit's lifecycle: ``reserve`` once, then ``occupy`` or ``abort`` while in flight, then
  ``consume`` (trained) or ``filter`` (dropped untrained) once finished;
* ``reserve``'s ``v_traj`` is the version then, ``occupy``'s the unit's own;
* the version: each event logs the current one, ``publish`` moves it by one and only after a
  ``consume``, a ``consume`` trains the current version and waits for its ``publish``;
* full batches (``batch_size`` units), each unit's logged staleness = version - v_traj;
* the staleness bound, for a rule that promises it (the named rule's ``bounded``): a unit
  staler than eta (the eta the named rule enforces at the config's eta: 0 for ``synchronous``;
  never the header's ``x_eta``, which must agree) is a violation. An unbounded rule breaks the
  bound by design: its trained staleness is reported (``over_eta``: units trained staler than
  eta), never called a failure.

``stream`` and ``release_stuck`` are Reserve–Occupy's and a violation here.
"""

from __future__ import annotations

from reserve_occupy import Config
from reserve_occupy.trace import TraceEntry

from .safety import Violation

IN_FLIGHT, FINISHED, DONE = "in flight", "finished", "done"


class PeerTracker:
    """Follows a peer's trace; ``step`` returns the first violation of each event."""

    def __init__(self, config: Config, policy: str, bounded: bool,
                 eta: int | None = None) -> None:
        self.config = config
        self.policy = policy
        self.bounded = bounded
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
        if entry.refused:
            return None
        e = entry.event
        if e.version is not None and e.version != self.version:
            return Violation("version", f"{e.op} logs version {e.version}, the version is "
                                        f"{self.version}")
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
            self.units[u] = FINISHED if op == "occupy" else DONE
            self.in_flight -= 1
        elif op == "filter":
            if state != FINISHED:
                return Violation("lifecycle", f"filter of unit {u!r}, which is "
                                              f"{state or 'unknown'}, not finished")
            self.units[u] = DONE
        elif op == "consume":
            return self._consume(e.batch)  # type: ignore[arg-type]
        elif op == "publish":
            if not self.training:
                return Violation("phase", "publish without a consumed batch")
            self.training = False
            self.version += 1
        else:
            return Violation("operation", f"{op} is Reserve–Occupy's; {self.policy} has none")
        return None

    def _consume(self, batch) -> Violation | None:  # type: ignore[no-untyped-def]
        if self.training:
            return Violation("phase", "consume while the previous batch is not published")
        if batch.version != self.version:
            return Violation("version", f"batch of version {batch.version} at version "
                                        f"{self.version}")
        if len(batch.units) != self.config.batch_size:
            return Violation("full-batch", f"{len(batch.units)} units, batch_size is "
                                           f"{self.config.batch_size}")
        for unit in batch.units:
            u = unit.unit_id
            if self.units.get(u) != FINISHED:
                return Violation("lifecycle", f"consume of unit {u!r}, which is "
                                              f"{self.units.get(u) or 'unknown'}, not finished")
            staleness = self.version - self.v_traj[u]
            if unit.v_traj != self.v_traj[u] or unit.staleness != staleness:
                return Violation("staleness", f"unit {u!r} logged v_traj {unit.v_traj} "
                                              f"staleness {unit.staleness}; it was reserved at "
                                              f"{self.v_traj[u]}: staleness {staleness}")
            if staleness > self.eta:
                if self.bounded:
                    return Violation("staleness-bound", f"unit {u!r} trained at staleness "
                                                        f"{staleness} > eta {self.eta}; "
                                                        f"{self.policy} promises the bound")
                self.over_eta += 1
            self.units[u] = DONE
            self.max_staleness_seen = max(self.max_staleness_seen, staleness)
            self.staleness[staleness] = self.staleness.get(staleness, 0) + 1
        self.batches += 1
        self.training = True
        return None
