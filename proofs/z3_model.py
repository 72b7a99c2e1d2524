"""Z3 proofs that the protocol's invariants are inductive over the encoding in ``spec_model``.

Theory of operation
-------------------
For one ``Shape`` (``eta`` and ``capacity`` fix how many slots exist) the state is a set of Z3
constants: phase, version, and per slot a kind, a ``v_traj`` and a unit id, plus the unit
counters. ``batch_size`` (1 .. capacity) and ``max_concurrency`` (absent, or any value >= 1) are
symbolic, so one shape covers every batch size that fits it, with and without oversampling.

``prove(shape)`` checks, for every operation ``op`` and every invariant ``I``:

    domain(s) and Inv(s) and guard_op(s, args) ==> I(op(s, args))      (consecution)

where ``Inv`` is the conjunction of all invariants (plus ``aux_stamp``, a strengthening the
induction needs), and ``args`` (the slot whose unit finishes, is aborted or filtered) range over
every slot of the shape, one case each: a concrete slot keeps the terms small. Also proved:
each obligation of ``op`` (its unrolled loops had finished; ``place`` found a slot) and its
operation-level facts (a consumed batch has exactly ``batch_size`` units, staleness in [0, eta]).
``initiation`` checks ``Inv(initial)``. Per case, one query asks whether *any* property fails
(unsat proves them all); only a sat case is split per property. ``unsat`` is a proof, ``sat``
comes with a rendered counterexample (pre-state, arguments, post-state), ``unknown`` (timeout)
fails. ``release_stuck`` is proved as a loop of ``abort`` steps (see ``Prover.release_stuck``).

What is proved, exactly: the invariants are inductive for the *encoding*, for every state of the
shape, reachable or not. That it is the code's relation is checked separately
(``proofs/test_refinement.py`` and the model checker's ``conformance``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import z3

from .counter_model import discharge, make_solver
from .spec_model import (
    E,
    Model,
    O,
    Operations,
    Params,
    R,
    Shape,
    SpecState,
    domain,
    initial,
    invariants,
    is_hole,
)


class Z3Algebra:
    symbolic = True
    If = staticmethod(z3.If)
    Not = staticmethod(z3.Not)
    Implies = staticmethod(z3.Implies)

    @staticmethod
    def And(*xs: Any) -> Any:
        xs = tuple(x for x in xs if x is not True)
        if any(x is False for x in xs):
            return z3.BoolVal(False)
        return z3.And(*xs) if xs else z3.BoolVal(True)

    @staticmethod
    def Or(*xs: Any) -> Any:
        xs = tuple(x for x in xs if x is not False)
        if any(x is True for x in xs):
            return z3.BoolVal(True)
        return z3.Or(*xs) if xs else z3.BoolVal(False)

    @staticmethod
    def Count(conds: list) -> Any:
        return z3.Sum([z3.If(c, 1, 0) for c in conds]) if conds else z3.IntVal(0)


Z3 = Z3Algebra()


def symbolic_state(shape: Shape, tag: str = "") -> SpecState:
    n, cap = shape.eta + 1, shape.capacity

    def grid(name: str) -> list[list[Any]]:
        return [[z3.Int(f"{name}{tag}_{k}_{i}") for i in range(cap)] for k in range(n)]

    return SpecState(
        training=z3.Bool(f"training{tag}"), version=z3.Int(f"version{tag}"),
        st=grid("st"), w=grid("w"), uid=grid("uid"),
        **{c: z3.Int(f"{c}{tag}") for c in SpecState.COUNTERS})


def symbolic_params() -> Params:
    return Params(z3.Int("batch_size"), z3.Bool("limited"), z3.Int("max_concurrency"))


def param_constraints(shape: Shape, p: Params) -> Any:
    return z3.And(1 <= p.batch_size, p.batch_size <= shape.capacity,
                  z3.Implies(p.limited, p.max_concurrency >= 1))


@dataclass
class Outcome:
    shape: Shape
    op: str
    prop: str  # invariant, obligation or fact name
    result: str  # "unsat" (proved), "sat", "unknown"
    seconds: float
    counterexample: str | None = None

    @property
    def proved(self) -> bool:
        return self.result == "unsat"


class Prover:
    """Builds the encoding for one shape and discharges the proof obligations.

    Two invariants are stated in pairwise (quadratic) form in ``spec_model``; here they are
    encoded linearly, with witnesses: ids are distinct iff some function maps each id back to its
    slot (assumed with an uninterpreted ``slot_of``); ``prefix`` holds iff some position lies after
    every OCCUPIED slot and at or before every hole. As goals, their negations name two symbolic
    positions. ``test_z3`` proves both forms equivalent for every shape it uses.
    """

    def __init__(self, shape: Shape, timeout_ms: int = 60_000,
                 fill_rounds: int | None = None) -> None:
        self.shape = shape
        self.timeout_ms = timeout_ms
        self.params = symbolic_params()
        self.model = Model(shape, self.params, Z3)
        # eta + 1 rounds: one donation per buffer; the "fill_holes terminates" obligation proves
        # that this many suffice (a smaller count fails it, see test_z3).
        self.ops = Operations(self.model, fill_rounds=shape.eta + 1 if fill_rounds is None
                              else fill_rounds)
        self.pre = symbolic_state(shape)
        self.flat = list(enumerate(shape.positions()))

    def _solver(self) -> z3.Solver:
        return make_solver(self.timeout_ms)

    # -------------------------------------------------------------- linear forms ----------

    def _at(self, f: Any, p: Any) -> Any:
        """``f(k, i)`` at the symbolic flat position ``p``."""
        acc = f(*self.flat[0][1])
        for n, (k, i) in self.flat[1:]:
            acc = z3.If(p == n, f(k, i), acc)
        return acc

    def assume(self, s: SpecState) -> list[Any]:
        m = self.model
        slot_of = z3.Function("slot_of", z3.IntSort(), z3.IntSort())
        first_hole = z3.Int("first_hole")
        out = list(invariants(m, s, quadratic=False).values())
        for n, (k, i) in self.flat:
            out.append(z3.Implies(s.st[k][i] != E, slot_of(s.uid[k][i]) == n))
            out.append(z3.Implies(is_hole(m, s, k, i), first_hole <= n))
            out.append(z3.Implies(s.st[k][i] == O, n < first_hole))
        return out

    def violated(self, s: SpecState) -> dict[str, Any]:
        """For each invariant, a formula satisfiable iff ``s`` violates it."""
        m = self.model
        out = {name: z3.Not(v) for name, v in invariants(m, s, quadratic=False).items()}
        p, q = z3.Int("witness_p"), z3.Int("witness_q")
        n = len(self.flat)
        pair = z3.And(0 <= p, p < q, q < n)
        dup = z3.And(pair, self._at(lambda k, i: s.st[k][i] != E, p),
                     self._at(lambda k, i: s.st[k][i] != E, q),
                     self._at(lambda k, i: s.uid[k][i], p) ==
                     self._at(lambda k, i: s.uid[k][i], q))
        out["conservation"] = z3.Or(out["conservation"], dup)
        out["prefix"] = z3.And(pair, self._at(lambda k, i: is_hole(m, s, k, i), p),
                               self._at(lambda k, i: s.st[k][i] == O, q))
        return out

    # -------------------------------------------------------------- queries ---------------

    def cases(self, op: str):
        """(case label, extra assumption, step) for each way ``op`` can run: unit operations
        are split on the concrete slot of the unit (which keeps every query small)."""
        fn = getattr(self.ops, op)
        if op in ("occupy", "abort", "filter"):
            for _, (k, i) in self.flat:
                yield f"slot ({k},{i})", True, fn(self.pre, k, i)
        else:
            yield "", True, fn(self.pre)

    def initiation(self) -> list[Outcome]:
        m0 = Model(self.shape, self.params, Z3)
        s0 = initial(self.shape)
        out = []
        for name, inv in invariants(m0, s0).items():
            solver = self._solver()
            solver.add(param_constraints(self.shape, self.params), z3.Not(inv))
            t = time.perf_counter()
            r = solver.check()
            cex = None if r != z3.sat else f"initial state violates {name}"
            out.append(Outcome(self.shape, "initial", name, str(r), time.perf_counter() - t, cex))
        return out

    def consecution(self, op: str, props: list[str] | None = None) -> list[Outcome]:
        """Every invariant after ``op`` (all invariants assumed before) and every obligation of
        ``op``; one Outcome per property, its time summed over the cases, the first
        counterexample."""
        if op == "release_stuck":
            return self.release_stuck()
        m = self.model
        base = [param_constraints(self.shape, self.params), domain(m, self.pre),
                *self.assume(self.pre)]
        results: dict[str, Outcome] = {}
        for case, extra, step in self.cases(op):
            solver = self._solver()
            solver.add(*base, extra, step.guard)
            goals = self.violated(step.post)
            goals.update({f"[{n}]": z3.Not(v) for n, v in step.obligations.items()})
            if props is not None:
                goals = {n: g for n, g in goals.items() if n in props}
            discharge(solver, goals, results, case,
                      lambda name, r, dt, cex: Outcome(self.shape, op, name, r, dt, cex),
                      lambda model, step=step: self._render(model, op, step))
        return list(results.values())

    def release_stuck(self) -> list[Outcome]:
        """``release_stuck`` is a loop whose body is ``abort`` of the head's first reservation
        (``Operations.release_stuck``). Invariance of the body is ``abort``'s proof (that case is
        one of abort's slots); what is left is proved here: the loop starts (a STUCK head holds
        a reservation) and ends (each round strictly lowers the head's reservation count)."""
        m = self.model
        pre = self.pre
        base = [param_constraints(self.shape, self.params), domain(m, pre), *self.assume(pre)]
        out = []
        step = self.ops.release_stuck(pre)
        solver = self._solver()
        solver.add(*base, step.guard, z3.Not(m.has(pre, 0, R)))
        t = time.perf_counter()
        r = solver.check()
        out.append(Outcome(self.shape, "release_stuck", "[a STUCK head holds a reservation]",
                           str(r), time.perf_counter() - t))
        worst: Outcome | None = None
        n_res = lambda s: Z3.Count([x == R for x in s.st[0]])
        for i in range(self.shape.capacity):
            first = z3.And(pre.st[0][i] == R, *[pre.st[0][j] != R for j in range(i)])
            body = self.ops.abort(pre, 0, i)
            solver = self._solver()
            solver.add(*base, z3.Not(pre.training), z3.Not(m.ready(pre, 0)), first, body.guard,
                       z3.Not(n_res(body.post) < n_res(pre)))
            t = time.perf_counter()
            r = solver.check()
            dt = time.perf_counter() - t
            cex = self._render(solver.model(), "abort", body) if r == z3.sat else None
            o = Outcome(self.shape, "release_stuck", "[each round lowers the head's "
                        "reservations]", str(r), dt + (worst.seconds if worst else 0.0), cex)
            if worst is None or worst.proved:
                worst = o
        assert worst is not None
        out.append(worst)
        return out

    def truncate_stuck(self) -> list[Outcome]:
        """``release_stuck`` with ``Config.stuck_action="truncate"`` (spec §6.2, "Options of
        the release") is a loop whose body is ``occupy`` of the head's first reservation, as
        ``release_stuck``'s is ``abort``: invariance of the body is ``occupy``'s proof (that
        case is one of occupy's slots), whatever the threshold (it only chooses between this
        loop and ``release_stuck``'s). Proved here, for every first reservation of a STUCK
        head of an idle trainer: the round lowers the head's reservation count (the loop
        ends), and the truncated unit is OCCUPIED in the head -- no later than its reservation
        -- with the ``v_traj`` it was reserved with (the staleness argument of §6.2)."""
        m = self.model
        pre = self.pre
        base = [param_constraints(self.shape, self.params), domain(m, pre), *self.assume(pre)]
        stuck = [z3.Not(pre.training), z3.Not(m.ready(pre, 0)), z3.Not(m.has(pre, 0, E))]
        n_res = lambda s: Z3.Count([x == R for x in s.st[0]])
        out: list[Outcome] = []
        for name in ("[each round lowers the head's reservations]",
                     "[the truncated unit is OCCUPIED in the head with its v_traj]"):
            worst: Outcome | None = None
            for i in range(self.shape.capacity):
                first = z3.And(pre.st[0][i] == R, *[pre.st[0][j] != R for j in range(i)])
                body = self.ops.occupy(pre, 0, i)
                if name.startswith("[each"):
                    bad = z3.Not(n_res(body.post) < n_res(pre))
                else:
                    bad = z3.Not(z3.Or(*[z3.And(body.post.st[0][j] == O,
                                                body.post.uid[0][j] == pre.uid[0][i],
                                                body.post.w[0][j] == pre.w[0][i])
                                         for j in range(self.shape.capacity)]))
                solver = self._solver()
                solver.add(*base, *stuck, first, body.guard, bad)
                t = time.perf_counter()
                r = solver.check()
                dt = time.perf_counter() - t
                cex = self._render(solver.model(), "occupy", body) if r == z3.sat else None
                o = Outcome(self.shape, "truncate_stuck", name, str(r),
                            dt + (worst.seconds if worst else 0.0), cex)
                if worst is None or worst.proved:
                    worst = o
            assert worst is not None
            out.append(worst)
        return out

    def _render(self, model: z3.ModelRef, op: str, step: Any) -> str:
        def ev(x: Any) -> Any:
            v = model.eval(x, model_completion=True)
            if z3.is_true(v):
                return True
            if z3.is_false(v):
                return False
            return v.as_long()

        p = self.params
        lines = [(f"batch_size={ev(p.batch_size)} max_concurrency="
                  f"{ev(p.max_concurrency) if ev(p.limited) else None}"),
                 "pre:", self.pre.render(ev), op, "post:", step.post.render(ev)]
        return "\n".join(lines)


def prove(shape: Shape, timeout_ms: int = 60_000) -> list[Outcome]:
    prover = Prover(shape, timeout_ms)
    out = prover.initiation()
    for op in Operations.NAMES:
        out += prover.consecution(op)
    return out
