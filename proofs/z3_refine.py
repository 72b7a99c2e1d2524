"""Keeping Z3 honest: the real controller's steps must be steps of both Z3 relations.

``SlotRefinement``: the slot-level encoding (``spec_model`` under the Z3 algebra) must accept the
real (pre, post) pair *through the solver* -- pre-state constants fixed to ``spec_state(pre)``,
every post-state term equal to ``spec_state(post)`` -- and its guard must have the code's value.
``CounterRefinement``: the counter abstraction (``counter_model``) must have *some* choice of its
nondeterministic variables that turns ``abstract(pre)`` into ``abstract(post)``, and its guards
must agree with the code's refusals. ``abstract`` is the abstraction function: counts of reserved
and occupied units per buffer offset and age. It also checks the fact the abstraction rests on:
the real buffer reads ``O* E* R*``.

Terms are built once per (shape, operation, case) and cached; each check is a push/pop on a
cached solver.
"""

from __future__ import annotations

from typing import Any

import z3

from reserve_occupy import Config, StalenessController, UnitState
from reserve_occupy.table import EMPTY, OCCUPIED, RESERVED

from .counter_model import COUNTERS, CounterModel, CParams, CState, symbolic_cstate
from .refine import locate, shape_of, spec_state
from .spec_model import Model, Operations, SpecState
from .z3_model import Z3, symbolic_params, symbolic_state

_UNIT_OPS = ("occupy", "abort", "filter")


class NotAbstractable(Exception):
    """The real state lies outside the counter abstraction (a unit of an impossible age, or a
    buffer not in O* E* R* order)."""


def abstract(c: StalenessController) -> dict[str, Any]:
    """Counts per (offset, age) of reserved and occupied units, the phase and the counters."""
    eta, t, ver = c.config.max_staleness, c._table, c._version
    n = eta + 1
    r = [[0] * n for _ in range(n)]
    o = [[0] * n for _ in range(n)]
    rank = {OCCUPIED: 0, EMPTY: 1, RESERVED: 2}
    for v, buf in t.buffers.items():
        k = v - ver
        ranks = [rank[x] for x in buf.state]
        if ranks != sorted(ranks):
            raise NotAbstractable(f"buffer {v} is not O* E* R*")
        for st, u, w in zip(buf.state, buf.unit, buf.version):
            if st == EMPTY:
                continue
            d = ver - w
            if not (0 <= k <= eta and 0 <= d <= eta):
                raise NotAbstractable(f"unit {u!r} at offset {k} with age {d}")
            (r if st == RESERVED else o)[k][d] += 1
    states = list(c._unit_states().values())
    return {"training": c._phase == "TRAINING", "r": r, "o": o,
            "in_flight": c._in_flight,
            "finished": states.count(UnitState.FINISHED) + states.count(UnitState.STREAMED),
            "admitted": len(c._units), "consumed": c._consumed, "aborted": c._aborted,
            "filtered": c._filtered}


def _bind_c(s: CState, a: dict[str, Any]) -> list[Any]:
    out = [s.training == a["training"]]
    for grid, vals in ((s.r, a["r"]), (s.o, a["o"])):
        for row, vrow in zip(grid, vals):
            out += [x == v for x, v in zip(row, vrow)]
    out += [getattr(s, c) == a[c] for c in COUNTERS]
    return out


def _bind_params(p: Any, config: Config, counter: bool) -> list[Any]:
    out = [p.batch_size == config.batch_size,
           p.limited == (config.max_concurrency is not None),
           p.max_concurrency == (config.max_concurrency or 1)]
    if counter:
        out.append(p.capacity == config.capacity)
    return out


class CounterRefinement:
    def __init__(self) -> None:
        self._cache: dict[tuple, tuple[z3.Solver, CState, Any, Any]] = {}

    def _case(self, eta: int, op: str, k: int, d: int):
        key = (eta, op, k, d)
        if key not in self._cache:
            params = CParams(z3.Int("B"), z3.Int("C"), z3.Bool("limited"), z3.Int("maxc"))
            m = CounterModel(eta, params)
            pre = symbolic_cstate(eta, "_pre")
            if op in _UNIT_OPS:
                step = getattr(m, op)(pre, k, d)
            elif op == "release_stuck":
                step = None
            else:
                step = getattr(m, op)(pre)
            solver = z3.Solver()
            if step is not None:
                solver.add(*step.constraints)
            self._cache[key] = (solver, pre, step, m)
        return self._cache[key]

    def check(self, pre_c: StalenessController, op: str, unit: Any,
              post_c: StalenessController, refused: bool) -> str | None:
        """None when the counter relation accepts the real step, else why not."""
        config = pre_c.config
        eta = config.max_staleness
        try:
            a_pre = abstract(pre_c)
            a_post = abstract(post_c)
        except NotAbstractable as e:
            return f"not abstractable: {e}"
        if op == "release_stuck":
            return self._release_stuck(pre_c, post_c, refused, a_pre, a_post)
        k = d = 0
        if op in _UNIT_OPS:
            buf, i = pre_c._table.locate(unit)
            k, d = buf.v - pre_c._version, pre_c._version - buf.version[i]
        solver, pre, step, m = self._case(eta, op, k, d)
        solver.push()
        try:
            solver.add(*_bind_c(pre, a_pre), *_bind_params(m.p, config, True))
            if refused:
                solver.add(step.guard)
                r = solver.check()
                return None if r == z3.unsat else f"{op}: the counter guard holds, code refused"
            solver.add(step.guard, *_bind_c(step.post, a_post))
            r = solver.check()
            if r == z3.sat:
                return None
            return (f"{op}: no choice makes the counter relation reach the code's post-state"
                    f" ({r}): pre={a_pre} post={a_post}")
        finally:
            solver.pop()

    def _release_stuck(self, pre_c, post_c, refused, a_pre, a_post) -> str | None:
        """The counter guard of release_stuck, and its post-state reached by rounds of abort
        of a head reservation (each checked against the abort relation)."""
        eta = pre_c.config.max_staleness
        params = CParams(*[z3.IntVal(x) for x in (pre_c.config.batch_size,
                                                  pre_c.config.capacity)],
                         z3.BoolVal(pre_c.config.max_concurrency is not None),
                         z3.IntVal(pre_c.config.max_concurrency or 1))
        m = CounterModel(eta, params)
        s = symbolic_cstate(eta, "_rs")
        g = z3.simplify(z3.substitute(m.release_stuck_guard(s), *[
            (x, z3.BoolVal(v) if isinstance(v, bool) else z3.IntVal(v))
            for x, v in _pairs(s, a_pre)]))
        if z3.is_true(g) == refused:
            return f"release_stuck: counter guard {g} but the code refused={refused}"
        if refused:
            return None
        c = pre_c.clone()
        while True:
            buf = c._table.buffers[c._table.head]
            if not buf.n_res or c._table.ready(buf):
                break
            unit = buf.unit[buf.state.index(RESERVED)]
            before = c.clone()
            c.abort(unit)
            why = self.check(before, "abort", unit, c, False)
            if why:
                return "release_stuck round: " + why
        if abstract(c) != a_post:
            return "release_stuck differs from its rounds of abort"
        return None


def _pairs(s: CState, a: dict[str, Any]):
    yield s.training, a["training"]
    for grid, vals in ((s.r, a["r"]), (s.o, a["o"])):
        for row, vrow in zip(grid, vals):
            yield from zip(row, vrow)
    for c in COUNTERS:
        yield getattr(s, c), a[c]


class SlotRefinement:
    """The slot-level encoding as Z3 terms, checked against real steps through the solver."""

    def __init__(self) -> None:
        self._cache: dict[tuple, tuple[z3.Solver, SpecState, Any, Any]] = {}

    def _case(self, config: Config, op: str, where: tuple[int, int] | None):
        shape = shape_of(config)
        key = (shape, op, where)
        if key not in self._cache:
            params = symbolic_params()
            ops = Operations(Model(shape, params, Z3))
            pre = symbolic_state(shape, "_pre")
            step = getattr(ops, op)(pre, *where) if where else getattr(ops, op)(pre)
            self._cache[key] = (z3.Solver(), pre, step, params)
        return self._cache[key]

    def check(self, pre_c: StalenessController, op: str, unit: Any,
              post_c: StalenessController, refused: bool) -> str | None:
        where = locate(pre_c, unit) if op in _UNIT_OPS else None
        solver, pre, step, params = self._case(pre_c.config, op, where)
        solver.push()
        try:
            solver.add(*_bind_spec(pre, spec_state(pre_c)),
                       *_bind_params(params, pre_c.config, False))
            solver.add(step.guard if refused else z3.Not(step.guard))
            if solver.check() != z3.unsat:
                return f"{op}: Z3 guard disagrees with the code (refused={refused})"
            if refused:
                return None
            solver.pop()
            solver.push()
            solver.add(*_bind_spec(pre, spec_state(pre_c)),
                       *_bind_params(params, pre_c.config, False))
            post = spec_state(post_c)
            bad = z3.Or(*[z3.Not(x == v) for x, v in _spec_pairs(step.post, post)])
            solver.add(bad)
            r = solver.check()
            return None if r == z3.unsat else f"{op}: Z3 post-state differs from the code's ({r})"
        finally:
            solver.pop()


def _spec_pairs(s: SpecState, concrete: SpecState):
    yield s.training, concrete.training
    yield s.version, concrete.version
    for c in SpecState.COUNTERS:
        yield getattr(s, c), getattr(concrete, c)
    for grid, vals in ((s.st, concrete.st), (s.w, concrete.w), (s.uid, concrete.uid)):
        for row, vrow in zip(grid, vals):
            yield from zip(row, vrow)


def _bind_spec(s: SpecState, concrete: SpecState) -> list[Any]:
    return [x == v for x, v in _spec_pairs(s, concrete)]
