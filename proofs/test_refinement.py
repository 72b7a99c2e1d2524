"""Keep Z3 honest: the real controller's steps are steps of both Z3 relations.

Hypothesis draws a configuration and a run (each step one of the operations enabled at that
point, on the real ``StalenessController``); every step's (pre, post) pair must be accepted by
the slot-level encoding through the Z3 solver (exactly: same guard, same post-state) and by the
counter abstraction (some choice of its nondeterministic variables reaches the post-state's
counts, and its guards agree with the code's refusals). The model checker additionally compares
every edge of its exhaustive runs with the slot-level encoding evaluated on Python values
(``test_modelcheck``). The last tests show the check is not vacuous: broken cores fail it.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reserve_occupy import Config, StalenessController

from . import report
from .modelcheck import canonical, enabled, run_op
from .mutants import MUTANTS
from .refine import concrete_ops, conformance
from .z3_refine import CounterRefinement, SlotRefinement

CONFIGS = [Config(1, 2, 3, 3), Config(2, 2, 2), Config(2, 2, 3), Config(2, 3, 4, 4),
           Config(3, 2, 2, 5), Config(1, 1, 3)]
COUNTER = CounterRefinement()
SLOT = SlotRefinement()
STATS = {"steps": 0, "runs": 0}


def _drive(c: StalenessController, choices: list[int]):
    """Yield (pre, op, unit, post, refused) for a run steered by ``choices``."""
    for n in choices:
        ops = enabled(c, canonical(c)[1])
        _, op, unit = ops[n % len(ops)]
        pre = c.clone()
        _, refused = run_op(c, op, unit)
        yield pre, op, unit, c, refused


@settings(max_examples=35, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cfg=st.sampled_from(CONFIGS),
       choices=st.lists(st.integers(0, 50), min_size=15, max_size=60))
def test_real_steps_are_accepted_by_both_z3_relations(cfg: Config, choices: list[int]) -> None:
    c = StalenessController(cfg)
    ops = concrete_ops(cfg)
    STATS["runs"] += 1
    for pre, op, unit, post, refused in _drive(c, choices):
        STATS["steps"] += 1
        assert conformance(ops, pre, op, unit, post, refused) is None
        assert SLOT.check(pre, op, unit, post, refused) is None
        assert COUNTER.check(pre, op, unit, post, refused) is None


def test_refinement_summary() -> None:
    """Runs last in this module: records how much the Hypothesis test checked."""
    report.add("Z3 refinement (Hypothesis)", f"{STATS['runs']} runs, {STATS['steps']} real "
               "steps accepted by the slot-level and the counter relation")
    assert STATS["steps"] > 500


def _first_rejection(mutant: str, ref, seed: int = 3, steps: int = 300) -> str | None:
    rng = random.Random(seed)
    for cfg in CONFIGS:
        c = MUTANTS[mutant].make(cfg)
        for pre, op, unit, post, refused in _drive(c, [rng.randrange(50) for _ in range(steps)]):
            why = ref.check(pre, op, unit, post, refused)
            if why:
                return why
    return None


def test_the_relations_reject_a_reservation_in_the_earliest_buffer() -> None:
    assert _first_rejection("reserve_earliest", SLOT) is not None
    assert _first_rejection("reserve_earliest", COUNTER) is not None


def test_the_relations_reject_placement_in_the_latest_buffer() -> None:
    assert _first_rejection("place_latest", SLOT) is not None
    assert _first_rejection("place_latest", COUNTER) is not None


def test_the_counter_relation_rejects_an_unordered_buffer() -> None:
    why = _first_rejection("reserve_first_empty", COUNTER)
    assert why is not None and "O* E* R*" in why
