"""The counter abstraction: Z3 proofs for every capacity and batch size (eta up to a bound).

Theory of operation
-------------------
Inside a buffer the slots read ``OCCUPIED* EMPTY* RESERVED*`` (the ``ordering`` invariant,
proved by the slot-level model and checked on every state the model checker reaches). Given the
ordering, a buffer is described by how many reserved and occupied units of each *age* it holds
(``age = version - v_traj``, 0 .. eta): ``r[k][d]`` and ``o[k][d]`` for the buffer at offset ``k``
from ``version``. Capacity ``C`` and batch size ``B`` stop being shape parameters and become
symbolic integers, so each proof here holds for **every** ``C >= B >= 1`` and every
``max_concurrency``; ``eta`` still fixes the shape (``(eta + 1)^2`` ages x offsets).

What the abstraction forgets, and how the relation covers it:

* Which unit of a buffer a rule picks (the first eligible reservation by slot, the last
  OCCUPIED unit of a donor buffer, the slot order in which closing visits reservations): the
  relation lets it be a unit of *any* age that the rule's condition admits (a choice variable).
* Moves inside one buffer (``relabel``, a shift or refill from the same buffer): no change of
  counts, so no step.
* Closing a READY buffer (correction 2) is stated by what it guarantees instead of by its loop,
  which has up to ``C - B`` rounds: every reservation of the buffer goes to a later, open, legal,
  not-READY buffer within that buffer's free room, or is aborted -- and one of age ``d`` is
  aborted only if, afterwards, no later legal buffer has room for age ``d``.

Every nondeterministic choice above includes what the code does, which ``test_refinement``
checks: for real (pre, post) pairs, Z3 must find choices that make the relation produce exactly
the post-state's counts, and the relation's guards must agree with the code's.

Identity (``no unit in two places``) and ``ordering`` are not expressible here; the slot-level
model (``z3_model``) proves them for small shapes and the model checker for every reachable
state of its configurations.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import z3

COUNTERS = ("in_flight", "finished", "admitted", "consumed", "aborted", "filtered")


@dataclass
class CState:
    training: Any
    r: list[list[Any]]  # r[k][d]: reserved units of age d in the buffer at offset k
    o: list[list[Any]]
    in_flight: Any
    finished: Any
    admitted: Any
    consumed: Any
    aborted: Any
    filtered: Any

    def copy(self) -> CState:
        return CState(self.training, [x[:] for x in self.r], [x[:] for x in self.o],
                      *[getattr(self, c) for c in COUNTERS])


@dataclass
class CStep:
    post: CState
    guard: Any
    constraints: list[Any] = field(default_factory=list)  # on the choice variables
    obligations: dict[str, Any] = field(default_factory=dict)


@dataclass
class CParams:
    batch_size: Any
    capacity: Any
    limited: Any
    max_concurrency: Any


def _sum(xs: list) -> Any:
    return z3.Sum(xs) if xs else z3.IntVal(0)


class CounterModel:
    """Operations of spec/PROTOCOL.md over ``CState`` for one ``eta``."""

    NAMES = ("reserve", "occupy", "abort", "filter", "consume", "publish", "release_stuck")

    def __init__(self, eta: int, params: CParams, fill_rounds: int | None = None,
                 tag: str = "") -> None:
        self.eta = eta
        self.K = range(eta + 1)
        self.p = params
        self.fill_rounds = eta if fill_rounds is None else fill_rounds
        self.tag = tag
        self._fresh = itertools.count()

    def choice(self, name: str) -> Any:
        return z3.Int(f"choice_{name}_{next(self._fresh)}{self.tag}")

    # ------------------------------------------------------------ derived ---------------------

    def occ(self, s: CState, k: int) -> Any:
        return _sum(s.o[k])

    def res(self, s: CState, k: int) -> Any:
        return _sum(s.r[k])

    def empty(self, s: CState, k: int) -> Any:
        return self.p.capacity - self.occ(s, k) - self.res(s, k)

    def ready(self, s: CState, k: int) -> Any:
        return self.occ(s, k) >= self.p.batch_size

    def is_open(self, s: CState, k: int) -> Any:
        return z3.BoolVal(True) if k > 0 else z3.Not(s.training)

    def legal(self, k: int, d: int) -> bool:
        return k + d <= self.eta

    def hole(self, s: CState, k: int) -> Any:
        return z3.And(self.is_open(s, k), z3.Not(self.ready(s, k)), self.empty(s, k) > 0)

    @staticmethod
    def first(cands: list[tuple[Any, int]]) -> tuple[Any, Any]:
        acc: Any = z3.IntVal(-1)
        for c, v in reversed(cands):
            acc = z3.If(c, v, acc)
        return z3.Or(*[c for c, _ in cands]) if cands else z3.BoolVal(False), acc

    def bump(self, grid: list[list[Any]], k: Any, d: Any, delta: Any, when: Any) -> None:
        """grid[k][d] += delta where (k, d) may be symbolic."""
        for kk in self.K:
            for dd in self.K:
                hit = z3.And(when, k == kk, d == dd)
                if z3.is_false(z3.simplify(hit)):
                    continue
                grid[kk][dd] = z3.If(hit, grid[kk][dd] + delta, grid[kk][dd])

    # ------------------------------------------------------------ rules -----------------------

    def shift(self, s: CState, g: int, cons: list[Any]) -> None:
        """Occupy/Abort (b) for a gap in buffer ``g``: the first earlier open, not-READY buffer
        holding a reservation legal in ``g`` gives one (any such age) to ``g``."""
        cands = []
        for k in range(g):
            eligible = _sum([s.r[k][d] for d in self.K if self.legal(g, d)]) > 0
            cands.append((z3.And(self.is_open(s, k), z3.Not(self.ready(s, k)), eligible), k))
        found, src = self.first(cands)
        c = self.choice("shift_age")
        read = _sum([z3.If(z3.And(src == k, c == d), s.r[k][d], 0)
                     for k in range(g) for d in self.K])
        cons.append(z3.Implies(found, z3.And(0 <= c, c <= self.eta - g, read > 0)))
        self.bump(s.r, src, c, -1, found)
        self.bump(s.r, g, c, 1, found)

    def place(self, s: CState, d: int) -> tuple[Any, Any]:
        """Occupy (c): the earliest open, legal, not-READY buffer with room takes the unit."""
        found, k = self.first([(self.hole(s, kk), kk) for kk in self.K if self.legal(kk, d)])
        self.bump(s.o, k, d, 1, found)
        return found, k

    def close(self, s: CState, b: Any, when: Any, cons: list[Any]) -> None:
        """Correction 2 by its guarantees (see the module docstring)."""
        pre = s.copy()
        zero = z3.IntVal(0)
        # Only later-legal targets get a variable; every other move count is the constant 0.
        x = {(j, d): self.choice(f"close_{j}_{d}") if self.legal(j, d) and j > 0 else zero
             for j in self.K for d in self.K}
        a = {d: self.choice(f"close_abort_{d}") for d in self.K}
        r_b = {d: _sum([z3.If(b == k, pre.r[k][d], 0) for k in self.K]) for d in self.K}
        for d in self.K:
            cons.append(z3.Implies(z3.Not(when), a[d] == 0))
            cons.append(a[d] >= 0)
            cons.append(z3.Implies(when, _sum([x[j, d] for j in self.K]) + a[d] == r_b[d]))
            for j in self.K:
                ok = z3.And(when, j > b, self.is_open(pre, j), z3.BoolVal(self.legal(j, d)),
                            z3.Not(self.ready(pre, j)))
                if not isinstance(x[j, d], z3.IntNumRef):
                    cons.append(x[j, d] >= 0)
                    cons.append(z3.Implies(x[j, d] > 0, ok))
        for j in self.K:
            cons.append(_sum([x[j, d] for d in self.K]) <= z3.If(
                self.empty(pre, j) > 0, self.empty(pre, j), 0))
        for k in self.K:
            for d in self.K:
                s.r[k][d] = z3.If(z3.And(when, b == k), 0, pre.r[k][d] + x[k, d])
        for d in self.K:
            for j in self.K:
                if self.legal(j, d):
                    cons.append(z3.Implies(z3.And(a[d] > 0, j > b, self.is_open(pre, j),
                                                  z3.Not(self.ready(pre, j))),
                                           self.empty(s, j) <= 0))
        n = _sum(list(a.values()))
        s.in_flight, s.aborted = s.in_flight - n, s.aborted + n

    def fill(self, s: CState, cons: list[Any]) -> Any:
        """Filter/Abort: while some hole has an OCCUPIED unit in a later buffer, the earliest
        such later buffer gives one (any age) to the earliest hole's buffer, which closes if it
        became READY. Returns the obligation that the unrolled rounds sufficed."""
        active: Any = z3.BoolVal(True)
        for _ in range(self.fill_rounds):
            hf, h = self.first([(self.hole(s, k), k) for k in self.K])
            donors = [(z3.And(k > h, self.occ(s, k) > 0), k) for k in self.K]
            df, j = self.first(donors)
            active = z3.And(active, hf, df)
            c = self.choice("fill_age")
            read = _sum([z3.If(z3.And(j == k, c == d), s.o[k][d], 0)
                         for k in self.K for d in self.K])
            cons.append(z3.Implies(active, z3.And(0 <= c, c <= self.eta, read > 0)))
            self.bump(s.o, j, c, -1, active)
            self.bump(s.o, h, c, 1, active)
            ready_h = _sum([z3.If(h == k, z3.If(self.ready(s, k), 1, 0), 0) for k in self.K]) > 0
            self.close(s, h, z3.And(active, ready_h), cons)
        hf, h = self.first([(self.hole(s, k), k) for k in self.K])
        df, _ = self.first([(z3.And(k > h, self.occ(s, k) > 0), k) for k in self.K])
        return z3.Not(z3.And(active, hf, df))

    # ------------------------------------------------------------ operations ------------------

    def reserve(self, s: CState) -> CStep:
        p = self.p
        found, k = self.first([(self.hole(s, kk), kk) for kk in reversed(self.K)])
        guard = z3.And(z3.Or(z3.Not(p.limited), s.in_flight < p.max_concurrency), found)
        t = s.copy()
        self.bump(t.r, k, 0, 1, guard)
        t.in_flight, t.admitted = s.in_flight + 1, s.admitted + 1
        return CStep(t, guard)

    def _unit_guard(self, s: CState, grid: list[list[Any]], k: int, d: int) -> Any:
        return z3.And(self.is_open(s, k), grid[k][d] > 0)

    def occupy(self, s: CState, k: int, d: int) -> CStep:
        t, cons = s.copy(), []
        t.r[k][d] = t.r[k][d] - 1
        self.shift(t, k, cons)
        placed, pk = self.place(t, d)
        t.in_flight, t.finished = t.in_flight - 1, t.finished + 1
        ready_pk = _sum([z3.If(pk == kk, z3.If(self.ready(t, kk), 1, 0), 0)
                         for kk in self.K]) > 0
        self.close(t, pk, z3.And(placed, ready_pk), cons)
        return CStep(t, self._unit_guard(s, s.r, k, d), cons, {"place finds a slot": placed})

    def abort(self, s: CState, k: int, d: int) -> CStep:
        t, cons = s.copy(), []
        t.r[k][d] = t.r[k][d] - 1
        self.shift(t, k, cons)
        done = self.fill(t, cons)
        t.in_flight, t.aborted = t.in_flight - 1, t.aborted + 1
        return CStep(t, self._unit_guard(s, s.r, k, d), cons, {"fill terminates": done})

    def filter(self, s: CState, k: int, d: int) -> CStep:
        t, cons = s.copy(), []
        t.o[k][d] = t.o[k][d] - 1
        done = self.fill(t, cons)
        t.finished, t.filtered = t.finished - 1, t.filtered + 1
        return CStep(t, self._unit_guard(s, s.o, k, d), cons, {"fill terminates": done})

    def consume(self, s: CState) -> CStep:
        guard = z3.And(z3.Not(s.training), self.ready(s, 0))
        t = s.copy()
        n = self.occ(s, 0)
        t.r[0] = [z3.IntVal(0)] * (self.eta + 1)
        t.o[0] = [z3.IntVal(0)] * (self.eta + 1)
        t.training = z3.BoolVal(True)
        t.finished, t.consumed = s.finished - n, s.consumed + n
        facts = {"batch has batch_size units": n == self.p.batch_size,
                 "batch holds no reservation": self.res(s, 0) == 0}
        return CStep(t, guard, [], facts)

    def publish(self, s: CState) -> CStep:
        """Ages grow by one, offsets shrink by one, a fresh buffer opens at offset eta."""
        t = s.copy()
        zero = z3.IntVal(0)
        for grid, src in ((t.r, s.r), (t.o, s.o)):
            for k in self.K:
                for d in self.K:
                    grid[k][d] = src[k + 1][d - 1] if k < self.eta and d > 0 else zero
        t.training = z3.BoolVal(False)
        dropped = [s.r[0][d] + s.o[0][d] for d in self.K] + [
            s.r[k][self.eta] + s.o[k][self.eta] for k in range(1, self.eta + 1)]
        return CStep(t, s.training, [], {"publish drops no unit": _sum(dropped) == 0})

    def release_stuck_round(self, s: CState, d: int) -> CStep:
        """One round of release_stuck: abort of a head reservation (of any age d)."""
        return self.abort(s, 0, d)

    def release_stuck_guard(self, s: CState) -> Any:
        return z3.And(z3.Not(s.training), z3.Not(self.ready(s, 0)), self.empty(s, 0) <= 0)


# ---------------------------------------------------------------- invariants ---------------

def invariants(m: CounterModel, s: CState) -> dict[str, Any]:
    K, p, eta = m.K, m.p, m.eta
    out: dict[str, Any] = {}
    out["counts_nonnegative"] = z3.And(*[x >= 0 for row in s.r + s.o for x in row],
                                       *[getattr(s, c) >= 0 for c in COUNTERS])
    out["window"] = z3.Implies(s.training, z3.And(m.res(s, 0) == 0, m.occ(s, 0) == 0))
    out["capacity"] = z3.And(*[z3.And(m.occ(s, k) <= p.batch_size, m.empty(s, k) >= 0)
                               for k in K])
    out["closure"] = z3.And(*[z3.Implies(m.ready(s, k), m.res(s, k) == 0) for k in K])
    out["staleness"] = z3.And(*[z3.And(s.r[k][d] == 0, s.o[k][d] == 0)
                                for k in K for d in K if k + d > eta])
    out["conservation"] = z3.And(
        _sum([m.res(s, k) for k in K]) == s.in_flight,
        _sum([m.occ(s, k) for k in K]) == s.finished,
        s.admitted == s.in_flight + s.finished + s.consumed + s.aborted + s.filtered)
    out["concurrency"] = z3.Implies(p.limited, s.in_flight <= p.max_concurrency)
    out["prefix"] = z3.And(*[z3.Implies(m.hole(s, k1), m.occ(s, k2) == 0)
                             for k1 in K for k2 in K if k1 < k2])
    out["no_deadlock"] = z3.Implies(z3.And(z3.Not(s.training), s.in_flight == 0), z3.Or(
        m.ready(s, 0), *[m.hole(s, k) for k in K]))
    return out


def symbolic_cstate(eta: int, tag: str = "") -> CState:
    n = eta + 1
    return CState(z3.Bool(f"training{tag}"),
                  [[z3.Int(f"r{tag}_{k}_{d}") for d in range(n)] for k in range(n)],
                  [[z3.Int(f"o{tag}_{k}_{d}") for d in range(n)] for k in range(n)],
                  *[z3.Int(f"{c}{tag}") for c in COUNTERS])


def symbolic_cparams() -> CParams:
    return CParams(z3.Int("batch_size"), z3.Int("capacity"), z3.Bool("limited"),
                   z3.Int("max_concurrency"))


def cparam_constraints(p: CParams) -> Any:
    return z3.And(p.batch_size >= 1, p.capacity >= p.batch_size,
                  z3.Implies(p.limited, p.max_concurrency >= 1))


def initial_cstate(eta: int) -> CState:
    zero = z3.IntVal(0)
    n = eta + 1
    return CState(z3.BoolVal(False), [[zero] * n for _ in range(n)],
                  [[zero] * n for _ in range(n)], *[zero] * len(COUNTERS))


def make_solver(timeout_ms: int) -> z3.Solver:
    """Linear integer arithmetic after preprocessing that solves the many definitional
    equalities and lifts the if-then-else terms the unrolled rules produce (about 8x faster here
    than the default QF_LIA solver)."""
    tactic = z3.Then(z3.With("simplify", som=True), "propagate-values", "solve-eqs",
                     "elim-term-ite", z3.With("smt", **{"arith.solver": 2}))
    s = tactic.solver()
    s.set("timeout", timeout_ms)
    return s


def discharge(solver: z3.Solver, goals: dict[str, Any], results: dict[str, Any], case: str,
              outcome: Callable[[str, str, float, str | None], Any],
              render: Callable[[z3.ModelRef], str]) -> None:
    """Discharge one case's goals (each the negation of a property) into ``results``.

    One query for "something fails"; unsat proves every property of the case (a disjunction is
    unsat iff each disjunct is). Only a sat case is split per goal, to name the failing property
    and show its counterexample. A property already failed by an earlier case keeps that
    failure; a proved one accumulates time over the cases. ``outcome(name, result, seconds,
    counterexample)`` builds the caller's outcome record."""
    t = time.perf_counter()
    solver.push()
    solver.add(z3.Or(*goals.values()))
    r = solver.check()
    solver.pop()
    dt = time.perf_counter() - t
    if r == z3.unsat:
        for name in goals:
            prior = results.get(name)
            if prior is None or prior.proved:
                results[name] = outcome(name, "unsat", dt + (prior.seconds if prior else 0.0),
                                        None)
        return
    for name, bad in goals.items():
        prior = results.get(name)
        if prior is not None and not prior.proved:
            continue
        solver.push()
        solver.add(bad)
        t = time.perf_counter()
        r = solver.check()
        dt = time.perf_counter() - t + (prior.seconds if prior else 0.0)
        cex = None
        if r == z3.sat:
            cex = f"case {case}\n" + render(solver.model())
        elif r == z3.unknown:
            cex = f"case {case}: unknown ({solver.reason_unknown()})"
        results[name] = outcome(name, str(r), dt, cex)
        solver.pop()


@dataclass
class COutcome:
    eta: int
    op: str
    prop: str
    result: str
    seconds: float
    counterexample: str | None = None

    @property
    def proved(self) -> bool:
        return self.result == "unsat"


class CounterProver:
    def __init__(self, eta: int, timeout_ms: int = 60_000) -> None:
        self.eta = eta
        self.timeout_ms = timeout_ms
        self.params = symbolic_cparams()
        self.m = CounterModel(eta, self.params)
        self.pre = symbolic_cstate(eta)

    def _solver(self) -> z3.Solver:
        return make_solver(self.timeout_ms)

    def cases(self, op: str):
        m, pre = self.m, self.pre
        if op in ("occupy", "abort", "filter"):
            for k in m.K:
                for d in m.K:
                    if m.legal(k, d):  # other ages are empty by the staleness invariant
                        yield f"unit in buffer +{k}, age {d}", getattr(m, op)(pre, k, d)
        else:
            yield "", getattr(m, op)(pre)

    def initiation(self) -> list[COutcome]:
        s0 = initial_cstate(self.eta)
        out = []
        for name, inv in invariants(self.m, s0).items():
            solver = self._solver()
            solver.add(cparam_constraints(self.params), z3.Not(inv))
            t = time.perf_counter()
            r = solver.check()
            out.append(COutcome(self.eta, "initial", name, str(r), time.perf_counter() - t))
        return out

    def consecution(self, op: str) -> list[COutcome]:
        """Per case, one query for "some invariant or obligation fails after ``op``"; unsat
        proves each of them for the case (a disjunction is unsat iff every disjunct is). Only
        a sat case is split per property, to name what fails and show a counterexample."""
        if op == "release_stuck":
            return self.release_stuck()
        base = [cparam_constraints(self.params), *invariants(self.m, self.pre).values()]
        results: dict[str, COutcome] = {}
        for case, step in self.cases(op):
            solver = self._solver()
            solver.add(*base, step.guard, *step.constraints)
            goals = {n: z3.Not(v) for n, v in invariants(self.m, step.post).items()}
            goals.update({f"[{n}]": z3.Not(v) for n, v in step.obligations.items()})
            discharge(solver, goals, results, case,
                      lambda name, r, dt, cex: COutcome(self.eta, op, name, r, dt, cex),
                      lambda model, step=step: self.render(model, step))
        return list(results.values())

    def release_stuck(self) -> list[COutcome]:
        """The loop's body is abort of a head reservation (proved with ``abort``); here: the
        loop starts (a STUCK head holds a reservation) and each round lowers the head's
        reservation count (so it ends)."""
        m, pre = self.m, self.pre
        base = [cparam_constraints(self.params), *invariants(m, pre).values()]
        out = []
        solver = self._solver()
        solver.add(*base, m.release_stuck_guard(pre), m.res(pre, 0) <= 0)
        t = time.perf_counter()
        out.append(COutcome(self.eta, "release_stuck", "[a STUCK head holds a reservation]",
                            str(solver.check()), time.perf_counter() - t))
        total, worst = 0.0, "unsat"
        for d in m.K:
            step = m.release_stuck_round(pre, d)
            solver = self._solver()
            solver.add(*base, z3.Not(pre.training), z3.Not(m.ready(pre, 0)), step.guard,
                       *step.constraints, z3.Not(m.res(step.post, 0) < m.res(pre, 0)))
            t = time.perf_counter()
            r = str(solver.check())
            total += time.perf_counter() - t
            if worst == "unsat":
                worst = r
        out.append(COutcome(self.eta, "release_stuck", "[each round lowers the head's "
                            "reservations]", worst, total))
        return out

    def render(self, model: z3.ModelRef, step: CStep) -> str:
        def ev(x: Any) -> Any:
            v = model.eval(x, model_completion=True)
            return bool(z3.is_true(v)) if z3.is_bool(v) else v.as_long()

        p = self.params
        head = (f"B={ev(p.batch_size)} C={ev(p.capacity)} max_concurrency="
                f"{ev(p.max_concurrency) if ev(p.limited) else None}")
        return "\n".join([head, "pre:", render_cstate(self.m, self.pre, ev), "post:",
                          render_cstate(self.m, step.post, ev)])


def render_cstate(m: CounterModel, s: CState, ev: Any) -> str:
    lines = [("TRAINING " if ev(s.training) else "IDLE ") +
             " ".join(f"{c}={ev(getattr(s, c))}" for c in COUNTERS)]
    for k in m.K:
        rs = {d: ev(s.r[k][d]) for d in m.K}
        os_ = {d: ev(s.o[k][d]) for d in m.K}
        cells = ([f"O(age{d})x{n}" for d, n in os_.items() if n]
                 + [f"R(age{d})x{n}" for d, n in rs.items() if n])
        lines.append(f"  +{k}: " + (" ".join(cells) or "-"))
    return "\n".join(lines)
