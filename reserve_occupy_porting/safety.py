"""Lenient mode: the protocol's safety invariants, tracked from the events alone.

An implementation may place units differently from the reference and still be safe. This
tracker needs no slots and no moves -- only reserve, occupy, abort, filter, release_stuck,
consume, publish and stream with their units -- and checks, after every event:

* ``staleness``   -- every consumed unit has ``0 <= batch.version - v_traj <= eta`` with the
  ``v_traj`` recorded at its reserve; a unit is stamped with the current version; no live unit
  outlives its last legal buffer (``v_traj + eta < head``); a logged slot lies in a legal buffer;
  where an occupy logs ``served`` (the weight versions the generators really used), the first is
  not older than ``v_traj`` -- otherwise publish ran ahead of the weights; where a batch unit
  logs ``v_traj`` or ``staleness`` (consume and stream alike), they are the unit's own.
* ``conservation`` -- each unit is reserved once and then ends at most once: occupy and abort only
  in flight, filter only finished (not streamed), consume only finished, nothing twice.
* ``streamed``    -- stream only with streaming on, while idle, of finished units not handed
  yet, at a staleness in ``[0, eta]`` for buffer ``head``; the next batch contains every unit
  handed (and, where it logs ``streamed``, names exactly those, each once: an empty list says
  none was handed).
* ``order``       -- consume only while idle, of buffer ``head`` (= the published version), and
  publish only after a consume: batches train strictly in order.
* ``batch``       -- every batch has exactly ``batch_size`` distinct units.
* ``capacity``    -- the live units could all sit in legal slots: for every open buffer ``k``, the
  units whose last legal buffer is ``<= k`` fit into buffers ``head .. k`` (``capacity`` slots
  each, at most ``batch_size`` of them finished). Slots the protocol never has cannot be promised.
* ``concurrency`` -- at most ``max_concurrency`` units in flight.
* ``window``      -- where a trace logs ``version`` or ``head`` (refused lines too), they agree
  with the events; an occupy's ``served`` names no version newer than the published one (the
  generators cannot run weights not published yet: publish was logged late).
* ``moves``       -- where an event logs moves (lenient mode places nothing itself), each names
  a unit the trace reserved and moves a live one only between buffers legal for it; an abort's
  or filter's ``slot`` lies in a legal buffer, like a reserve's or occupy's.

Refused operations change nothing (waiting is always safe); only their logged ``version`` and
``head`` are checked.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from reserve_occupy import Config, Event, MoveReason
from reserve_occupy.trace import TraceEntry

IN_FLIGHT, FINISHED, ENDED = "in flight", "finished", "ended"
STREAMED = "streamed"  # finished and handed to the trainer (counted as finished)


class Violation(NamedTuple):
    invariant: str
    detail: str


class SafetyTracker:
    """Follows one trace and reports the first safety violation of each event."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.eta = config.max_staleness
        self.version = 0
        self.head = 0
        self.training = False
        self.units: dict[object, tuple[str, int]] = {}  # unit -> (state, v_traj)
        self.ends: dict[object, str] = {}  # unit -> how it ended (for messages)
        self.live = Counter()  # last legal buffer -> live units
        self.finished = Counter()  # last legal buffer -> finished units
        self.in_flight = 0
        self.batches = 0
        self.max_staleness_seen = -1
        self.max_in_flight_seen = 0
        self._served: tuple[int, int] | None = None
        self._logged: frozenset[str] = frozenset()  # the current entry's logged fields
        self.streamed: dict[object, None] = {}  # units handed by stream since the last consume

    # ------------------------------------------------------------------ bookkeeping -------

    def _deadline(self, unit_id: object) -> int:
        return self.units[unit_id][1] + self.eta

    def state(self, unit_id: object) -> str | None:
        entry = self.units.get(unit_id)
        return None if entry is None else entry[0]

    @staticmethod
    def _count(counter: Counter, key: int, delta: int) -> None:
        # Zero entries are dropped so the per-event scans stay O(eta), not O(versions).
        n = counter[key] + delta
        if n:
            counter[key] = n
        else:
            del counter[key]

    def _set(self, unit_id: object, state: str, how: str = "") -> None:
        old, v = self.units[unit_id]
        d = v + self.eta
        if old == IN_FLIGHT:
            self.in_flight -= 1
        if old in (IN_FLIGHT, FINISHED, STREAMED):
            self._count(self.live, d, -1)
        if old in (FINISHED, STREAMED):
            self._count(self.finished, d, -1)
        if state == IN_FLIGHT:
            self.in_flight += 1
        if state in (IN_FLIGHT, FINISHED, STREAMED):
            self._count(self.live, d, 1)
        if state in (FINISHED, STREAMED):
            self._count(self.finished, d, 1)
        if state == ENDED:
            self.ends[unit_id] = how
        self.units[unit_id] = (state, v)

    def _require(self, op: str, unit_id: object, state: str) -> Violation | None:
        have = self.state(unit_id)
        if have == state:
            return None
        if have is None:
            return Violation("conservation", f"{op} of unit {unit_id!r}, which was never reserved")
        if have == ENDED:
            have = f"already {self.ends[unit_id]}"
        return Violation("conservation", f"{op} of unit {unit_id!r}, which is {have} "
                                         f"(needs {state})")

    def _legal_slot(self, event: Event, what: str) -> Violation | None:
        if event.slot is None:
            return None
        b, d = event.slot.buffer, self._deadline(event.unit_id)
        if not self.head <= b <= d:
            return Violation("staleness", f"unit {event.unit_id!r} {what} buffer {b}; legal "
                                          f"buffers are {self.head}..{d} (v_traj + eta = {d})")
        return None

    # ------------------------------------------------------------------ events ------------

    def step(self, entry: TraceEntry) -> Violation | None:
        """Apply one logged event; return the first invariant it breaks, or None."""
        e = entry.event
        for name, have in (("version", self.version), ("head", self.head)):
            if name in entry.logged and getattr(e, name) != have:
                refused = " (refused)" if entry.refused else ""
                return Violation("window", f"{e.op}{refused} logs {name}={getattr(e, name)}, "
                                           f"but the events so far give {name}={have} "
                                           f"('{name}' is the value before the event)")
        if entry.refused:
            return None
        self._served, self._logged = entry.served, entry.logged
        handler = getattr(self, "_" + e.op)
        return handler(e) or self._after(e)

    def _reserve(self, e: Event) -> Violation | None:
        if e.unit_id in self.units:
            return Violation("conservation", f"unit {e.unit_id!r} reserved twice")
        v = self.version if e.v_traj is None else e.v_traj
        if v != self.version:
            return Violation("staleness", f"unit {e.unit_id!r} stamped v_traj={v}, but the "
                                          f"published version is {self.version}")
        self.units[e.unit_id] = (ENDED, v)
        self._set(e.unit_id, IN_FLIGHT)
        return self._legal_slot(e, "reserved in")

    def _moved(self, e: Event) -> Violation | None:
        """The event's logged moves: each names a unit the trace reserved, and a live one only
        between buffers legal for it. (Which unit a rule moves is placement, strict mode's
        business; a move of an ended unit moves a slot its end did not free: wasteful, not
        unsafe, as the ``abort_keeps_slot`` mutant shows.)"""
        for k, m in enumerate(e.moves):
            have = self.state(m.unit_id)
            if have is None:
                return Violation("conservation", f"{e.op} moves[{k}] ({m.reason.value}) moves "
                                                 f"unit {m.unit_id!r}, which was never "
                                                 f"reserved")
            if have == ENDED:
                continue
            d = self._deadline(m.unit_id)
            for end, ref in (("from", m.src), ("to", m.dst)):
                if not self.head <= ref.buffer <= d:
                    return Violation("staleness", f"{e.op} moves[{k}] moves unit {m.unit_id!r} "
                                                  f"{end} buffer {ref.buffer}; legal buffers "
                                                  f"are {self.head}..{d} (v_traj + eta = {d})")
        return None

    def _drop(self, e: Event, why: str) -> Violation | None:
        for unit_id in e.aborted:
            bad = self._require(f"{e.op} aborting", unit_id, IN_FLIGHT)
            if bad:
                return bad
            self._set(unit_id, ENDED, why)
        return None

    def _occupy(self, e: Event) -> Violation | None:
        bad = self._require("occupy", e.unit_id, IN_FLIGHT)
        if bad:
            return bad
        v = self.units[e.unit_id][1]
        if e.v_traj is not None and e.v_traj != v:
            return Violation("staleness", f"occupy logs v_traj={e.v_traj} for unit "
                                          f"{e.unit_id!r}, reserved with v_traj={v}")
        if self._served is not None and self._served[0] < v:
            return Violation("staleness", f"unit {e.unit_id!r} was generated with weights "
                                          f"v{self._served[0]} but stamped v_traj={v}: the "
                                          f"version was published before those weights were "
                                          f"live, so its staleness is under-counted")
        if self._served is not None and self._served[1] > self.version:
            return Violation("window", f"unit {e.unit_id!r} logs served={list(self._served)}, "
                                       f"but the published version is {self.version}: "
                                       f"generators cannot run weights not published yet "
                                       f"(publish logged late, or served in another "
                                       f"numbering)")
        self._set(e.unit_id, FINISHED)
        return (self._moved(e) or self._legal_slot(e, "occupies")
                or self._drop(e, "aborted by the closing rule"))

    def _abort(self, e: Event) -> Violation | None:
        bad = self._require("abort", e.unit_id, IN_FLIGHT)
        if bad:
            return bad
        self._set(e.unit_id, ENDED, "aborted")
        return (self._legal_slot(e, "freed a slot in") or self._moved(e)
                or self._drop(e, "aborted by the closing rule"))

    def _filter(self, e: Event) -> Violation | None:
        bad = self._require("filter", e.unit_id, FINISHED)
        if bad:
            return bad
        self._set(e.unit_id, ENDED, "filtered")
        return (self._legal_slot(e, "freed a slot in") or self._moved(e)
                or self._drop(e, "aborted by the closing rule"))

    def _release_stuck(self, e: Event) -> Violation | None:
        if self.training:
            return Violation("order", "release_stuck while a batch is training")
        return (self._drop(e, "released by release_stuck") or self._moved(e)
                or self._truncated(e))

    def _truncated(self, e: Event) -> Violation | None:
        """``release_stuck`` with ``stuck_action: "truncate"``: each ``truncate`` move finishes
        an in-flight unit at its placement (``_moved`` checked the placement is legal)."""
        for m in e.moves:
            if m.reason is MoveReason.TRUNCATE:
                bad = self._require("release_stuck truncating", m.unit_id, IN_FLIGHT)
                if bad:
                    return bad
                self._set(m.unit_id, FINISHED)
        return None

    def _consume(self, e: Event) -> Violation | None:
        b = e.batch
        if self.training:
            return Violation("order", f"consume of batch {b.version} while batch "  # type: ignore
                                      f"{self.head - 1} is still training (no publish between)")
        if b.version != self.head:  # type: ignore[union-attr]
            return Violation("order", f"consumed batch {b.version}, but the next buffer in order "
                                      f"is {self.head} (version {self.version})")
        ids = [u.unit_id for u in b.units]  # type: ignore[union-attr]
        missing = [u for u in self.streamed if u not in set(ids)]
        if missing:
            return Violation("streamed", f"batch {b.version} leaves out unit {missing[0]!r}, "
                                         f"which stream had handed to the trainer")
        if len(ids) != self.config.batch_size or len(set(ids)) != len(ids):
            return Violation("batch", f"batch {b.version} has {len(ids)} units "
                                      f"({len(set(ids))} distinct), batch_size is "
                                      f"{self.config.batch_size}")
        if "batch.streamed" in self._logged and (  # logged, even empty: "none streamed"
                set(b.streamed) != set(self.streamed)  # type: ignore[union-attr]
                or len(set(b.streamed)) != len(b.streamed)):  # type: ignore[union-attr]
            names, version = list(b.streamed), b.version  # type: ignore[union-attr]
            return Violation("streamed", f"batch {version} names {names} as streamed; "
                                         f"stream handed {list(self.streamed)}")
        for u in b.units:  # type: ignore[union-attr]
            if self.state(u.unit_id) == STREAMED:
                self._set(u.unit_id, FINISHED)
            bad = self._require("consume", u.unit_id, FINISHED)
            if bad:
                return bad
            bad = self._batch_unit(f"batch {b.version}", b.version, u)
            if bad:
                return bad
            v = self.units[u.unit_id][1]
            stale = b.version - v
            if not 0 <= stale <= self.eta:
                return Violation("staleness", f"batch {b.version} trains unit {u.unit_id!r} "
                                              f"(v_traj={v}) with staleness {stale} > eta="
                                              f"{self.eta}" if stale > 0 else
                                 f"batch {b.version} trains unit {u.unit_id!r} with v_traj={v} "
                                 f"from the future")
            self.max_staleness_seen = max(self.max_staleness_seen, stale)
            self._set(u.unit_id, ENDED, f"consumed in batch {b.version}")
        self.training = True
        self.head += 1
        self.batches += 1
        self.streamed = {}
        return None

    def _stream(self, e: Event) -> Violation | None:
        if not self.config.streaming:
            return Violation("streamed", "stream in a trace whose config has streaming off")
        if self.training:
            return Violation("order", "stream while a batch is training (the weights of the "
                                      "head buffer do not exist yet)")
        b = e.batch
        if b.version != self.head:  # type: ignore[union-attr]
            return Violation("streamed", f"stream hands units for buffer "
                                         f"{b.version}, but the head buffer is "  # type: ignore
                                         f"{self.head}")
        for u in b.units:  # type: ignore[union-attr]
            bad = self._require("stream", u.unit_id, FINISHED)
            if bad:
                return bad
            bad = self._batch_unit(f"stream for buffer {b.version}", b.version, u)
            if bad:
                return bad
            v = self.units[u.unit_id][1]
            if not 0 <= self.head - v <= self.eta:
                return Violation("staleness", f"stream hands unit {u.unit_id!r} (v_traj={v}) "
                                              f"for buffer {self.head}, eta={self.eta}")
            self._set(u.unit_id, STREAMED)
            self.streamed[u.unit_id] = None
        return None

    def _batch_unit(self, what: str, version: int, u) -> Violation | None:  # type: ignore
        """A batch unit's logged ``v_traj`` and ``staleness`` are its own (the trace reader
        has checked that the two agree with each other where both are logged)."""
        v = self.units[u.unit_id][1]
        if u.v_traj is not None and u.v_traj != v:
            return Violation("staleness", f"{what} logs v_traj={u.v_traj} for unit "
                                          f"{u.unit_id!r}, reserved with v_traj={v}")
        if u.staleness is not None and u.staleness != version - v:
            return Violation("staleness", f"{what} logs staleness={u.staleness} for unit "
                                          f"{u.unit_id!r}, reserved with v_traj={v}: its "
                                          f"staleness is {version - v}")
        return None

    def _publish(self, e: Event) -> Violation | None:
        if not self.training:
            return Violation("order", f"publish of version {self.version + 1} without a "
                                      f"consumed batch training")
        self.training = False
        self.version += 1
        return None

    # ------------------------------------------------------------------ state checks ------

    def _after(self, e: Event) -> Violation | None:
        c = self.config
        self.max_in_flight_seen = max(self.max_in_flight_seen, self.in_flight)
        if c.max_concurrency is not None and self.in_flight > c.max_concurrency:
            return Violation("concurrency", f"{self.in_flight} units in flight > "
                                            f"max_concurrency {c.max_concurrency}")
        stranded = [d for d in self.live if d < self.head]
        if stranded:
            d = min(stranded)
            who = [u for u, (s, v) in self.units.items() if s != ENDED and v + self.eta == d]
            return Violation("staleness", f"unit {who[0]!r} (v_traj={d - self.eta}) is still "
                                          f"live but its last legal buffer {d} is gone "
                                          f"(head={self.head}): it can never train within eta")
        live = fin = 0
        for k in range(self.head, self.version + self.eta + 1):
            live += self.live.get(k, 0)
            fin += self.finished.get(k, 0)
            n = k - self.head + 1
            if live > c.capacity * n:  # type: ignore[operator]
                return Violation("capacity", f"{live} live units can only train in buffers "
                                             f"{self.head}..{k}, which have "
                                             f"{c.capacity * n} slots")  # type: ignore[operator]
            if fin > c.batch_size * n:
                return Violation("capacity", f"{fin} finished units can only train in buffers "
                                             f"{self.head}..{k}, which take "
                                             f"{c.batch_size * n} units")
        return None

    def describe(self) -> str:
        """The tracked state, for a report (lenient mode has no slot table)."""
        phase = "TRAINING" if self.training else "IDLE"
        lines = [(f"version={self.version} head={self.head} phase={phase} "
                 f"in_flight={self.in_flight}")]
        by_v: dict[int, list[str]] = {}
        for u, (s, v) in self.units.items():
            if s != ENDED:
                by_v.setdefault(v, []).append(f"{'R' if s == IN_FLIGHT else 'O'}({u})")
        for v in sorted(by_v):
            lines.append(f"  v_traj={v} (legal up to buffer {v + self.eta}): "
                         + " ".join(by_v[v]))
        return "\n".join(lines)
