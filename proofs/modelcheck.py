"""Exhaustive explicit-state model checking of the *real* ``StalenessController``.

Theory of operation
-------------------
Breadth-first search from ``StalenessController(config)`` over every operation a runtime can
issue: ``reserve`` (a fresh unit), ``occupy``/``abort`` of each in-flight unit, ``filter`` of
each finished unit, ``consume`` and ``release_stuck`` (trainer idle), ``publish`` (training);
with ``Config.streaming`` also ``stream`` (which must be refused with ``IllegalOperation`` while
training) and ``filter`` of each STREAMED unit (refused with ``IllegalUnitState``); a refusal
must change nothing.
Every successor is produced by the real code (``clone()`` then the real method) and checked.

States are merged by a canonical key (``canonical``) that applies two abstractions:

* **Unit renaming.** Units are named by the position of the slot they hold (scan by buffer, then
  slot). The controller never looks at an id's value -- ids are only dictionary keys, and no rule
  iterates a dictionary in insertion order -- so renaming units commutes with every operation.
* **Version translation.** Buffer numbers and ``v_traj`` are stored relative to ``version``. Every
  guard and rule compares versions only with each other (``head <= b <= v_traj + eta``,
  ``top = version + eta``), so translating all of them commutes with every operation.

Together they make the reachable key space finite for each configuration: no bound on trace
length, on the number of units or on versions is needed; the search ends when no new key
appears, so it covers *every* reachable state of the configuration. Dropped from the key, and
checked per edge instead: the event log (write-only), ended units (they only make
``DuplicateUnit`` fire on reused ids; the checker never reuses one), the lifetime counters
(``admitted``/``consumed``/...: only the conservation total reads them, and the per-edge
``accounting`` check proves every edge keeps that total) and ``last_batch`` (read only by the
``staleness``/``batch`` invariants, which the per-edge ``consume`` check applies to the batch as
it is handed out).

The frontier holds keys, and a state is rebuilt for expansion by ``materialise`` (the real
classes, filled in from the key). ``test_modelcheck`` shows that this is sound where it matters:
the same search with real reached controllers in the frontier (``materialise=False``) visits the
same keys, and along random real traces ``materialise(canonical(c))`` has the same successors
as ``c`` for every operation.

Checks: every ``INVARIANTS`` entry plus the controller's private indexes
(``StalenessController.check``) on every new state -- or on every successor with
``check_every_edge`` --, the per-edge checks above, crashes (any exception), refused
operations that change the state, for streaming the per-edge ``stream`` checks (a stream hands
exactly the head's unhanded OCCUPIED units; no operation but consume moves a STREAMED unit;
consume's batch holds every one), optionally conformance of every edge to the Z3 encoding
(``proofs.refine``), and after the search two reachability properties: from every state a
consume is reachable (``progress``), and reachable with reserve/occupy/publish/consume alone
(``progress_cooperative``: a runtime whose units all finish never needs a timeout to make
progress).
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reserve_occupy import (
    Config,
    IllegalOperation,
    IllegalUnitState,
    InvariantViolation,
    StalenessController,
    UnitState,
)
from reserve_occupy.table import EMPTY, OCCUPIED, RESERVED, Buffer
from reserve_occupy.types import MoveReason

OPS = ("reserve", "occupy", "abort", "filter", "consume", "publish", "release_stuck", "stream")
_OP = {name: n for n, name in enumerate(OPS)}
COOPERATIVE = frozenset(_OP[o] for o in ("reserve", "occupy", "consume", "publish"))
_BIAS = 128
_CODE = {EMPTY: 0, RESERVED: 1, OCCUPIED: 2}
STREAMED_CODE = 3  # an OCCUPIED slot whose unit stream handed (the key's fourth slot kind)
_STATE = (EMPTY, RESERVED, OCCUPIED)
_PHASE = {"IDLE": 0, "TRAINING": 1}
_PHASE_NAME = ("IDLE", "TRAINING")
_LIVE = (UnitState.IN_FLIGHT, UnitState.FINISHED, UnitState.STREAMED)
_E3 = (0, 0, 0)


class KeyRange(Exception):
    """A state the key cannot represent (only broken controllers produce one)."""


def canonical(c: StalenessController) -> tuple[bytes, list]:
    """The state's key and the canonical unit order (unit ids by slot position)."""
    t, ver = c._table, c._version
    base = _BIAS - ver
    names: dict = {}
    out = [_PHASE[c._phase], t.head + base, t.top + base, c._in_flight, len(t.buffers)]
    code = _CODE
    streamed = c._streamed
    for v in sorted(t.buffers):
        buf = t.buffers[v]
        out.append(v + base)
        for st, u, w in zip(buf.state, buf.unit, buf.version):
            if st == EMPTY:
                out += _E3
            else:
                n = names.get(u)
                if n is None:
                    n = names[u] = len(names)
                out += (STREAMED_CODE if streamed and u in streamed else code[st], n, w + base)
    try:
        return bytes(out), list(names)
    except ValueError:
        raise KeyRange(f"state outside the key's range: {out}") from None


def materialise(key: bytes, make: Callable[[Config], StalenessController],
                config: Config) -> StalenessController:
    """A controller of ``make``'s class in the state ``key`` describes, at version
    ``eta + 2`` (so every ``v_traj`` is positive) with units named 0, 1, 2, ... by position."""
    c = make(config)
    base = config.max_staleness + 2
    t = c._table
    phase, head, top, in_flight, nbuf = key[:5]
    c._phase = _PHASE_NAME[phase]
    c._version = base
    t.head, t.top = head - _BIAS + base, top - _BIAS + base
    t.buffers, t.where, t.v_traj = {}, {}, {}
    units: dict = {}
    streamed: dict = {}
    pos = 5
    cap = config.capacity
    for _ in range(nbuf):
        buf = Buffer(key[pos] - _BIAS + base, cap)  # type: ignore[arg-type]
        pos += 1
        for i in range(cap):  # type: ignore[arg-type]
            code, n, w = key[pos], key[pos + 1], key[pos + 2]
            pos += 3
            if code:
                if code == STREAMED_CODE:
                    streamed[n] = None  # slot order: the order stream hands units in
                    code = _CODE[OCCUPIED]
                st = _STATE[code]
                if st == RESERVED:  # an in-flight unit: the table indexes its version
                    t.v_traj[n] = w - _BIAS + base
                t._put(buf, i, st, n, w - _BIAS + base)  # the slot and every index
                # a finished unit's record is its buffer (machine.py, "Unit records")
                units[n] = buf.v if st == OCCUPIED else UnitState.IN_FLIGHT
        t.buffers[buf.v] = buf
    c._units = dict(sorted(units.items()))
    c._consumed_below = t.head  # nothing consumed is part of the key
    c._streamed = streamed
    c._in_flight = in_flight
    return c


@dataclass
class Violation:
    check: str  # "invariant:<name>", "edge:<name>", "crash", "spec", "progress", ...
    detail: str
    trace: list[str] = field(default_factory=list)
    reproduced: bool = True

    def render(self) -> str:
        head = f"{self.check}: {self.detail}"
        if not self.reproduced:
            head += "\n(not reproduced when replayed from the initial state)"
        return head + "\n" + "\n".join(self.trace)

    @property
    def steps(self) -> list[str]:
        """The operations of the trace, one line each (without the snapshots)."""
        return [line for line in self.trace if line[:1].isdigit()]

    def compact(self) -> str:
        """Operations on one line each, then the state after the last one."""
        last = max((n for n, line in enumerate(self.trace) if line[:1].isdigit()), default=-1)
        return "\n".join(self.steps + self.trace[last + 1:])


@dataclass
class Report:
    config: Config
    states: int
    edges: int
    depth: int
    seconds: float
    violation: Violation | None
    complete: bool  # False when max_states stopped the search early

    def summary(self) -> str:
        c = self.config
        cfg = (f"eta={c.max_staleness} B={c.batch_size} C={c.capacity} "
               f"maxc={c.max_concurrency}{' streaming' if c.streaming else ''}")
        verdict = "OK" if self.violation is None else f"VIOLATION {self.violation.check}"
        more = "" if self.complete else " (stopped at max_states)"
        return (f"{cfg}: {self.states} states, {self.edges} edges, depth {self.depth}, "
                f"{self.seconds:.1f}s{more}: {verdict}")


Label = tuple[int, int]  # (operation index, canonical unit name or 0)


def enabled(c: StalenessController, names: list) -> list[tuple[Label, str, Any]]:
    """Every operation to try in ``c``: (label, operation, unit id or None)."""
    ops: list[tuple[Label, str, Any]] = [((0, 0), "reserve", len(c._units))]
    for n, u in enumerate(names):
        st = c._state_of(u)
        if st is UnitState.IN_FLIGHT:
            ops.append(((1, n), "occupy", u))
            ops.append(((2, n), "abort", u))
        elif st is UnitState.FINISHED or st is UnitState.STREAMED:
            ops.append(((3, n), "filter", u))  # of a STREAMED unit: must be refused
    if c._phase == "IDLE":
        ops.append(((4, 0), "consume", None))
        ops.append(((6, 0), "release_stuck", None))
        if c.config.streaming:
            ops.append(((7, 0), "stream", None))
    else:
        ops.append(((5, 0), "publish", None))
        if c.config.streaming:
            ops.append(((7, 0), "stream", None))  # must be refused: IllegalOperation
    return ops


def run_op(c: StalenessController, op: str, unit: Any) -> tuple[Any, bool]:
    """Run one operation on ``c``; returns (result, refused). A filter of a STREAMED unit and a
    stream while training are refused by a typed error (returned as the result), which must
    change nothing."""
    if op == "stream" and c._phase == "TRAINING":
        try:
            return c.stream(), False
        except IllegalOperation as e:
            return e, True
    if unit is None:
        result = getattr(c, op)()
    elif op == "filter" and unit in c._streamed:
        try:
            return c.filter(unit), False
        except IllegalUnitState as e:
            return e, True
    else:
        result = getattr(c, op)(unit)
    # release_stuck returns [] only when its guard refused: a STUCK head holds a reservation;
    # stream returns () only when the head holds no OCCUPIED unit it has not handed yet.
    refused = result is None if op in ("reserve", "consume") else (
        (op == "release_stuck" and result == []) or (op == "stream" and result == ()))
    return result, refused


def _live(c: StalenessController) -> dict:
    return {u: s for u, s in c._unit_states().items() if s in _LIVE}


def truncate_checks(pre: StalenessController, post: StalenessController,
                    result: Any) -> tuple[str, str] | None:
    """``release_stuck`` (spec §6.2, "Options of the release"): it returns the units it
    truncated (its event's ``truncate`` moves) and then those it aborted; it truncates only when
    ``release_action`` said so before; and each truncated unit was a reservation of the head,
    is FINISHED after, with its ``v_traj``, at a slot no later than that reservation."""
    ev = post._events[-1]
    truncated = [m.unit_id for m in ev.moves if m.reason is MoveReason.TRUNCATE]
    if list(result) != truncated + list(ev.aborted):
        return "edge:release", (f"release_stuck returned {list(result)} but truncated "
                                f"{truncated} and aborted {list(ev.aborted)}")
    if truncated and pre.release_action != "truncate":
        return "edge:truncate", (f"release_stuck truncated {truncated} where release_action "
                                 f"was {pre.release_action!r}")
    for u in truncated:
        if u not in pre._table.where:
            return "edge:truncate", f"truncated unit {u!r} was not in flight"
        buf, i = pre._table.where[u]
        v_traj = pre._table.v_traj[u]
        if buf.v != pre.head:
            return "edge:truncate", f"truncated unit {u!r} was reserved in buffer {buf.v}"
        if post._state_of(u) is not UnitState.FINISHED:
            return "edge:truncate", f"truncated unit {u!r} is {post._state_of(u)}"
        qbuf, j = post._table.locate(u)
        if (qbuf.v, j) > (buf.v, i) or qbuf.version[j] != v_traj:
            return "edge:truncate", (
                f"truncated unit {u!r} (v_traj {v_traj}) reserved at b{buf.v}[{i}] is "
                f"placed at b{qbuf.v}[{j}] with v_traj {qbuf.version[j]}: later than its "
                f"reservation or restamped")
    return None


def edge_checks(pre: StalenessController, op: str, unit: Any, post: StalenessController,
                result: Any, refused: bool, pre_key: bytes | None = None
                ) -> tuple[str, str] | None:
    """Per-edge properties: accounting (nothing leaves silently), consume order and batch,
    publish, refusals change nothing."""
    if refused:
        if pre_key is None:
            pre_key = canonical(pre)[0]
        if pre_key != canonical(post)[0] or len(post._events) != len(pre._events):
            return "edge:refusal", f"refused {op} changed the state"
        return None
    live_pre, live_post = _live(pre), _live(post)
    left = set(live_pre) - set(live_post)
    arrived = set(live_post) - set(live_pre)
    expect_arrived = {unit} if op == "reserve" else set()
    if arrived != expect_arrived:
        return "edge:accounting", f"{op} made {sorted(map(str, arrived))} live"
    if op == "consume":
        reported = {bu.unit_id: UnitState.CONSUMED for bu in result.units}
    elif op == "release_stuck":
        bad = truncate_checks(pre, post, result)
        if bad is not None:
            return bad
        reported = {u: UnitState.ABORTED for u in post._events[-1].aborted}
    elif op in ("occupy", "abort", "filter"):
        reported = {u: UnitState.ABORTED for u in result.aborted}
        if op == "abort":
            reported[unit] = UnitState.ABORTED
        elif op == "filter":
            reported[unit] = UnitState.FILTERED
    else:
        reported = {}
    if set(reported) != left:
        return "edge:accounting", (
            f"{op}: units {sorted(map(str, left))} left the live set but "
            f"{sorted(map(str, reported))} were reported")
    for u, want in reported.items():
        if post._state_of(u) is not want:
            return "edge:accounting", (f"{op}: unit {u!r} reported as {want.value} is "
                                       f"{post._state_of(u)}")
    totals = (post._consumed - pre._consumed, post._aborted - pre._aborted,
              post._filtered - pre._filtered)
    want_totals = tuple(sum(1 for s in reported.values() if s is k)
                        for k in (UnitState.CONSUMED, UnitState.ABORTED, UnitState.FILTERED))
    if totals != want_totals:
        return "edge:accounting", f"{op}: counters moved by {totals}, reported {want_totals}"
    if op == "consume":
        cfg = pre.config
        if result.version != pre.head or post.head != pre.head + 1:
            return "edge:order", (f"consumed buffer {result.version} with head {pre.head} "
                                  f"(head after: {post.head})")
        if len(result.units) != cfg.batch_size:
            return "edge:batch", f"batch of {len(result.units)} units, batch_size {cfg.batch_size}"
        head_units = {u for st, u in zip(pre._table.buffers[pre.head].state,
                                         pre._table.buffers[pre.head].unit) if st == OCCUPIED}
        for bu in result.units:
            if (not (0 <= bu.staleness <= cfg.max_staleness)
                    or bu.staleness != result.version - bu.v_traj):
                return "edge:batch_staleness", f"batch {result.version} trained {bu}"
            if bu.unit_id not in head_units:
                return "edge:batch", f"unit {bu.unit_id!r} was not OCCUPIED in the head buffer"
    if op == "publish" and post._version != pre._version + 1:
        return "edge:publish", f"version {pre._version} -> {post._version}"
    if pre._streamed or post._streamed or op == "stream":
        return stream_checks(pre, op, post, result)
    return None


def stream_checks(pre: StalenessController, op: str, post: StalenessController,
                  result: Any) -> tuple[str, str] | None:
    """Streaming's per-edge properties (spec/PROTOCOL.md §3.8): ``stream`` hands exactly the
    head's OCCUPIED units not handed yet, in slot order, at their staleness; no other operation
    but consume moves, drops or adds a STREAMED unit; consume's batch holds every STREAMED unit
    of the pre-state and names exactly those as streamed."""
    if op == "stream":
        if pre._phase != "IDLE":
            return "edge:stream", f"stream ran while the trainer was {pre._phase}"
        buf = pre._table.buffers[pre.head]
        want = [(u, w, pre.head - w) for st, u, w in zip(buf.state, buf.unit, buf.version)
                if st == OCCUPIED and u not in pre._streamed]
        if [tuple(bu) for bu in result] != want:
            return "edge:stream", f"stream handed {list(result)}, the head's new units are {want}"
        if list(post._streamed) != [*pre._streamed, *(bu.unit_id for bu in result)]:
            return "edge:stream", "the streamed set is not the old one plus the units handed"
    elif op == "consume":
        if (set(result.streamed) != set(pre._streamed)
                or not set(pre._streamed) <= set(result.unit_ids)):
            return "edge:stream", (f"batch {result.version} names {list(result.streamed)} as "
                                   f"streamed; {list(pre._streamed)} were handed")
    else:
        if list(post._streamed) != list(pre._streamed):
            return "edge:stream", (f"{op} changed the streamed set {list(pre._streamed)} -> "
                                   f"{list(post._streamed)}")
        for u in pre._streamed:
            try:
                a, b = pre._table.locate(u), post._table.locate(u)
            except KeyError:
                return "edge:stream", f"{op} removed STREAMED unit {u!r} from the table"
            if (a[0].v, a[1]) != (b[0].v, b[1]):
                return "edge:stream", (f"{op} moved STREAMED unit {u!r} from ({a[0].v}, {a[1]}) "
                                       f"to ({b[0].v}, {b[1]})")
    return None


def check_state(c: StalenessController) -> tuple[str, str] | None:
    """Every ``INVARIANTS`` entry and the private indexes (``StalenessController.check``), then
    ``aux_stamp``: the strengthening the Z3 proofs assume (no unit newer than ``version``)."""
    try:
        c.check()
    except InvariantViolation as e:
        return f"invariant:{e.invariant}", e.detail
    for u, v in c._table.live_versions().items():
        if v > c._version:
            return "invariant:aux_stamp", f"unit {u!r} has v_traj={v} > version={c._version}"
    return None


class ModelChecker:
    """BFS over one configuration of one controller factory (the real one or a mutant)."""

    def __init__(self, config: Config,
                 make: Callable[[Config], StalenessController] = StalenessController, *,
                 check_every_edge: bool = True, conformance: bool = False,
                 materialise: bool = True, liveness: bool = True,
                 max_states: int | None = None, stop_on_spec: bool = True,
                 progress: Callable[[int, int, int, float], None] | None = None,
                 progress_every: int = 100_000) -> None:
        self.config = config
        self.make = make
        self.check_every_edge = check_every_edge
        self.materialise = materialise
        self.liveness = liveness
        self.max_states = max_states
        # False: a conformance failure is remembered but the search goes on, so that a broken
        # controller is reported by the most specific check that notices (an invariant or an
        # edge property) when there is one, and by ``spec`` only otherwise.
        self.stop_on_spec = stop_on_spec
        self.progress = progress
        self.progress_every = progress_every
        self.spec_ops = None
        if conformance:
            from .refine import concrete_ops

            self.spec_ops = concrete_ops(config)
        self.keys: list[bytes] = []

    # ------------------------------------------------------------------------ search -------

    def run(self) -> Report:
        start = time.perf_counter()
        init = self.make(self.config)
        key0, _ = canonical(init)
        index: dict[bytes, int] = {key0: 0}
        keys = self.keys = [key0]
        parent = array("i", [-1])
        label = array("H", [0])
        depth = array("H", [0])
        frontier: deque = deque([(0, None if self.materialise else init)])
        edges_src, edges_dst, edges_op = array("I"), array("I"), array("B")
        goal = bytearray()  # per state: 1 if consume is enabled there
        exits = bytearray()  # per state: 1 if some operation leads to another state
        n_edges = 0
        violation: tuple[int, Label | None, str, str] | None = None
        first_spec: tuple[int, Label | None, str, str] | None = None
        bad = check_state(init)
        if bad:
            violation = (0, None, *bad)
        complete = True
        while frontier and violation is None:
            s, c = frontier.popleft()
            if c is None:
                c = materialise(keys[s], self.make, self.config)
            pre_key, names = canonical(c)
            goal.append(0)
            exits.append(0)
            for lab, op, unit in enabled(c, names):
                n_edges += 1
                d = c.clone()
                try:
                    result, refused = run_op(d, op, unit)
                    bad = edge_checks(c, op, unit, d, result, refused, pre_key)
                    if bad is None and self.spec_ops is not None:
                        from .refine import conformance

                        msg = conformance(self.spec_ops, c, op, unit, d, refused)
                        bad = ("spec", msg) if msg else None
                        if bad and not self.stop_on_spec:
                            first_spec = first_spec or (s, lab, *bad)
                            bad = None
                    if refused:
                        if bad:
                            violation = (s, lab, *bad)
                            break
                        continue
                    if op == "consume":
                        goal[s] = 1
                    if bad is None and self.check_every_edge:
                        bad = check_state(d)
                    key = canonical(d)[0]
                except Exception as e:  # noqa: BLE001 - any crash of the code is a finding
                    bad = ("crash", f"{op}: {type(e).__name__}: {e}")
                    key = None
                if bad:
                    violation = (s, lab, *bad)
                    break
                t = index.get(key)  # type: ignore[arg-type]
                if t is None:
                    if not self.check_every_edge:
                        bad = check_state(d)
                        if bad:
                            violation = (s, lab, *bad)
                            break
                    t = index[key] = len(keys)  # type: ignore[index]
                    keys.append(key)  # type: ignore[arg-type]
                    parent.append(s)
                    label.append(lab[0] * 256 + lab[1])
                    depth.append(depth[s] + 1)
                    d._events.clear()  # the log is write-only; keep frontier states small
                    frontier.append((t, None if self.materialise else d))
                    if self.progress and len(keys) % self.progress_every == 0:
                        self.progress(len(keys), n_edges, depth[t], time.perf_counter() - start)
                    if self.max_states and len(keys) >= self.max_states:
                        complete = False
                if t != s:
                    exits[s] = 1
                if self.liveness and t != s:
                    edges_src.append(s)
                    edges_dst.append(t)
                    edges_op.append(lab[0])
            if not complete:
                break
        if violation is None and first_spec is not None:
            violation = first_spec
        if violation is None and complete:
            terminal = exits.find(0)
            if terminal >= 0:
                violation = (terminal, None, "deadlock", "no operation changes this state")
        if violation is None and complete and self.liveness:
            violation = self._progress(len(keys), goal, edges_src, edges_dst, edges_op)
        seconds = time.perf_counter() - start
        found = None
        if violation is not None:
            s, lab, check, detail = violation
            found = self._counterexample(parent, label, s, lab, check, detail)
        return Report(self.config, len(keys), n_edges, max(depth) if depth else 0, seconds,
                      found, complete)

    def _progress(self, n: int, goal: bytearray, src: array, dst: array,
                  ops: array) -> tuple[int, None, str, str] | None:
        """Backward reachability from the states where consume is enabled. Predecessor lists
        are kept as flat arrays (CSR), so a run with millions of edges fits in memory."""
        for name, allowed in (("progress", None), ("progress_cooperative", COOPERATIVE)):
            start = array("I", bytes(4 * (n + 1)))
            for b, o in zip(dst, ops):
                if allowed is None or o in allowed:
                    start[b + 1] += 1
            for s in range(n):
                start[s + 1] += start[s]
            fill = array("I", start)
            preds = array("I", bytes(4 * start[n]))
            for a, b, o in zip(src, dst, ops):
                if allowed is None or o in allowed:
                    preds[fill[b]] = a
                    fill[b] += 1
            seen = bytearray(goal)
            todo = [s for s in range(n) if goal[s]]
            while todo:
                b = todo.pop()
                for a in preds[start[b]:start[b + 1]]:
                    if not seen[a]:
                        seen[a] = 1
                        todo.append(a)
            bad = seen.find(0)
            if bad >= 0:
                how = "any operation" if allowed is None else "reserve/occupy/publish/consume"
                return (bad, None, name, f"no consume is reachable from here with {how}")
        return None

    # ------------------------------------------------------------------------ traces -------

    def _counterexample(self, parent: array, label: array, s: int, lab: Label | None,
                        check: str, detail: str) -> Violation:
        path: list[Label] = []
        while s > 0:
            code = label[s]
            path.append((code // 256, code % 256))
            s = parent[s]
        path.reverse()
        if lab is not None:
            path.append(lab)
        lines, again = replay_labels(self.config, self.make, path, check)
        if check in ("progress", "progress_cooperative", "deadlock"):
            return Violation(check, detail, lines, True)
        if again is None:
            return Violation(check, detail, lines, False)
        # The replayed run is at the real versions and unit ids: report its words.
        return Violation(check, again[1] if again[0] == check else detail, lines, True)


def describe(op: str, unit: Any, result: Any) -> str:
    if op == "reserve":
        return f"reserve u{unit}" + (" -> refused" if result is None else
                                     f" -> b{result.slot.buffer}[{result.slot.index}]")
    if op == "occupy":
        extra = f" aborted {list(result.aborted)}" if result.aborted else ""
        return f"occupy u{unit} -> b{result.slot.buffer}[{result.slot.index}]{extra}"
    if isinstance(result, Exception):
        return f"{op} u{unit} -> refused ({type(result).__name__}: {result})"
    if op in ("abort", "filter"):
        extra = f" aborted {list(result.aborted)}" if result.aborted else ""
        return f"{op} u{unit}{extra}"
    if op == "consume":
        return "consume -> " + ("refused" if result is None else
                                f"batch b{result.version} {list(result.unit_ids)}")
    if op == "release_stuck":
        return "release_stuck -> " + (f"ended {result}" if result else "refused")
    if op == "stream":
        return "stream -> " + ("refused" if result == () else
                               f"handed {[bu.unit_id for bu in result]}")
    return f"publish -> version {result}"


def replay_labels(config: Config, make: Callable[[Config], StalenessController],
                  path: list[Label], check: str
                  ) -> tuple[list[str], tuple[str, str] | None]:
    """Re-run a path of labels on a fresh controller (no abstraction involved) and render it.
    Returns the lines and the violation the last step shows when run for real (or None)."""
    c = make(config)
    lines = ["  " + line for line in c.snapshot().render().splitlines()]
    bad = None
    for step, (op_i, n) in enumerate(path):
        names = canonical(c)[1]
        op = OPS[op_i]
        unit = len(c._units) if op == "reserve" else (names[n] if op_i in (1, 2, 3) else None)
        pre = c.clone()
        last = step == len(path) - 1
        try:
            result, refused = run_op(c, op, unit)
        except Exception as e:  # noqa: BLE001
            lines.append(f"{step + 1}. {op} u{unit} -> {type(e).__name__}: {e}")
            return lines, ("crash", f"{op}: {type(e).__name__}: {e}")
        lines.append(f"{step + 1}. {describe(op, unit, result)}")
        try:
            lines += ["     " + x for x in c.snapshot().render().splitlines()]
        except Exception as e:  # noqa: BLE001
            lines.append(f"     (snapshot fails: {type(e).__name__}: {e})")
        if last:
            bad = edge_checks(pre, op, unit, c, result, refused) or check_state(c)
            if bad is None and check == "spec":
                from .refine import concrete_ops, conformance

                msg = conformance(concrete_ops(config), pre, op, unit, c, refused)
                bad = ("spec", msg) if msg else None
    return lines, bad


def check_config(config: Config, make: Callable[[Config], StalenessController] =
                 StalenessController, **kw: Any) -> Report:
    return ModelChecker(config, make, **kw).run()

