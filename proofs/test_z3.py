"""Z3: the invariants are inductive (initiation and consecution for every operation).

Two encodings (spec/VERIFICATION.md says which invariant each covers):

* the counter abstraction (``counter_model``): every capacity C >= batch size B >= 1 and every
  max_concurrency, symbolically, for each eta in ``COUNTER_ETAS`` (larger eta: ``make
  proofs-deep``);
* the slot-level encoding (``z3_model`` over ``spec_model``): exact slots, so it also proves
  ``ordering`` and unit identity; every B <= C symbolically, for the (eta, C) shapes in
  ``SLOT_SHAPES``.

A solver answer of ``unknown`` (timeout) fails like ``sat``; every failure prints the
counterexample (pre-state, operation, post-state).
"""

from __future__ import annotations

import time

import pytest
import z3

from . import report
from .counter_model import CounterModel, CounterProver
from .spec_model import (
    E,
    O,
    Operations,
    Shape,
    distinct_ids,
    domain,
    invariants,
    is_hole,
    prefix_pairs,
)
from .z3_model import Prover

TIMEOUT_MS = 120_000
COUNTER_ETAS = [0, 1, 2, 3, 4]
# (eta, capacity): every batch_size 1..capacity is covered by each shape.
SLOT_SHAPES = [(0, 1), (0, 2), (0, 3), (0, 4), (0, 6), (1, 1), (1, 2), (1, 3), (2, 1), (2, 2),
               (3, 1), (4, 1), (5, 1)]
OPS = Operations.NAMES


def _check(outcomes: list, label: str, started: float) -> None:
    bad = [o for o in outcomes if not o.proved]
    seconds = time.perf_counter() - started
    report.add("Z3 proofs", f"{label}: {len(outcomes)} (operation, property) pairs proved in "
               f"{seconds:.1f}s" + ("" if not bad else f", {len(bad)} NOT PROVED"))
    assert not bad, "\n\n".join(f"{o.op} / {o.prop}: {o.result}\n{o.counterexample or ''}"
                                for o in bad)


@pytest.mark.parametrize("eta", COUNTER_ETAS, ids=[f"eta{e}-allC>=B>=1" for e in COUNTER_ETAS])
def test_counter_abstraction_invariants_are_inductive(eta: int) -> None:
    started = time.perf_counter()
    p = CounterProver(eta, TIMEOUT_MS)
    outcomes = p.initiation()
    for op in OPS:
        outcomes += p.consecution(op)
    _check(outcomes, f"counter model eta={eta}, every C >= B >= 1, every max_concurrency",
           started)


@pytest.mark.parametrize("shape", SLOT_SHAPES,
                         ids=[f"eta{e}-C{c}-allB<=C" for e, c in SLOT_SHAPES])
def test_slot_encoding_invariants_are_inductive(shape: tuple[int, int]) -> None:
    started = time.perf_counter()
    p = Prover(Shape(*shape), TIMEOUT_MS)
    outcomes = p.initiation()
    for op in OPS:
        outcomes += p.consecution(op)
    _check(outcomes, f"slot model eta={shape[0]} C={shape[1]}, every B <= C", started)


@pytest.mark.parametrize("shape", [(1, 2), (2, 2), (1, 3)])
def test_linear_forms_equal_the_pairwise_invariants(shape: tuple[int, int]) -> None:
    """The prover states ``prefix`` and unit distinctness with witnesses (an inverse function,
    a boundary position) as assumptions and with two symbolic positions as goals. Both must mean
    exactly the pairwise definitions of ``spec_model``, in both directions."""
    p = Prover(Shape(*shape), TIMEOUT_MS)
    m, s, flat = p.model, p.pre, p.flat
    pairwise = z3.And(distinct_ids(m, s), prefix_pairs(m, s))
    plain = z3.And(domain(m, s), *invariants(m, s, quadratic=False).values())

    solver = z3.Solver()  # witnesses => definitions
    solver.add(plain, *p.assume(s), z3.Not(pairwise))
    assert solver.check() == z3.unsat

    def slot_of(x: z3.ArithRef) -> z3.ArithRef:  # an explicit witness: first slot holding x
        acc: z3.ArithRef = z3.IntVal(-1)
        for n, (k, i) in reversed(flat):
            acc = z3.If(z3.And(s.st[k][i] != E, s.uid[k][i] == x), n, acc)
        return acc

    first_hole: z3.ArithRef = z3.IntVal(len(flat))
    for n, (k, i) in reversed(flat):
        first_hole = z3.If(is_hole(m, s, k, i), n, first_hole)
    witnessed = z3.And(*[z3.And(z3.Implies(s.st[k][i] != E, slot_of(s.uid[k][i]) == n),
                                z3.Implies(is_hole(m, s, k, i), first_hole <= n),
                                z3.Implies(s.st[k][i] == O, n < first_hole))
                         for n, (k, i) in flat])
    solver = z3.Solver()  # definitions => the witnesses exist
    solver.add(plain, pairwise, z3.Not(witnessed))
    assert solver.check() == z3.unsat

    # Goals: the violation formula (free positions witness_p, witness_q) is satisfiable exactly
    # when the definition fails. "Some pair witnesses it" is expanded over every concrete pair.
    bad = p.violated(s)
    wp, wq = z3.Int("witness_p"), z3.Int("witness_q")
    counts = invariants(m, s, quadratic=False)["conservation"]
    for name, definition in (("conservation", distinct_ids(m, s)),
                             ("prefix", prefix_pairs(m, s))):
        some_pair = z3.Or(*[z3.substitute(bad[name], (wp, z3.IntVal(a)), (wq, z3.IntVal(b)))
                            for a in range(len(flat)) for b in range(len(flat))])
        solver = z3.Solver()
        solver.add(plain, counts, z3.Not(definition), z3.Not(some_pair))
        assert solver.check() == z3.unsat, f"{name}: a violation the goal cannot witness"
        solver = z3.Solver()
        solver.add(domain(m, s), counts, definition, bad[name])
        assert solver.check() == z3.unsat, f"{name}: the goal fires on a good state"


def test_z3_finds_a_counterexample_in_a_broken_encoding() -> None:
    """The proofs can fail: with the shift's staleness bound off by one the counter model is
    not inductive, and the failure names the invariant and shows the states."""

    class OffByOne(CounterModel):
        def legal(self, k: int, d: int) -> bool:
            return k + d <= self.eta + 1

    p = CounterProver(2, TIMEOUT_MS)
    p.m = OffByOne(2, p.params)
    outcomes = p.consecution("occupy")
    failed = {o.prop: o for o in outcomes if not o.proved}
    assert "staleness" in failed
    assert failed["staleness"].result == "sat"
    assert "pre:" in failed["staleness"].counterexample
    report.add("Z3 proofs", "broken encoding (staleness bound + 1): occupy breaks "
               f"{sorted(failed)}; counterexample:\n    " +
               failed["staleness"].counterexample.replace("\n", "\n    "))


def test_unrolling_bounds_are_checked_not_assumed() -> None:
    """Loops are unrolled a fixed number of rounds; an obligation says the loop was done. One
    round is too few for eta=2, and the prover says so."""
    p = Prover(Shape(2, 2), TIMEOUT_MS, fill_rounds=1)
    outcomes = p.consecution("filter")
    assert any(o.prop == "[fill_holes terminates]" and o.result == "sat" for o in outcomes)
    c = CounterProver(3, TIMEOUT_MS)
    c.m.fill_rounds = 1
    outcomes = c.consecution("filter")
    assert any(o.prop == "[fill terminates]" and o.result == "sat" for o in outcomes)
