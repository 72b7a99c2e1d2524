"""Exhaustive model checking of the real controller (proofs/modelcheck.py).

Every configuration below is explored to the end: every state reachable by any sequence of
operations, of any length, with any number of units and versions (up to the renaming and version
translation the key applies). Each edge is checked against every invariant, the per-edge
properties and the slot-level encoding (``conformance``); after the search, progress.
"""

from __future__ import annotations

import random

import pytest

from reserve_occupy import Config, StalenessController

from . import report
from .modelcheck import ModelChecker, canonical, check_config, enabled, materialise, run_op
from .mutants import MUTANTS

# (eta, batch_size, capacity, max_concurrency): eta <= 3, batch_size <= 3, capacity <=
# batch_size + 1 (batch-level oversampling), with and without a concurrency limit.
CONFIGS = [
    (0, 1, 1, None), (0, 2, 3, None), (1, 1, 1, None), (1, 1, 2, None), (1, 2, 2, None),
    (1, 2, 3, None), (1, 3, 3, None), (1, 3, 4, 2), (2, 1, 1, None), (2, 1, 2, 2),
    (2, 2, 2, None), (2, 2, 2, 2), (2, 2, 3, 2), (2, 2, 3, 3), (2, 3, 3, 2), (2, 3, 4, 3),
    (3, 1, 1, 3),
]


# Streaming consume (Config.streaming): the same search with ``stream`` and the refused filter
# of a STREAMED unit in the alphabet; both oversampling settings, eta 0 .. 2, with a limit.
# Larger ones run in ``make proofs-deep`` (proofs/deep.py --streaming).
STREAMING_CONFIGS = [(0, 2, 3, None), (1, 1, 1, None), (1, 2, 2, None), (1, 2, 3, None),
                     (1, 3, 4, 2), (2, 1, 2, 2)]


def _id(c: tuple) -> str:
    return f"eta{c[0]}-B{c[1]}-C{c[2]}-maxc{c[3]}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_every_reachable_state_satisfies_every_check(cfg: tuple) -> None:
    r = check_config(Config(*cfg), conformance=True, check_every_edge=True)
    report.add("model checking: real StalenessController, exhaustive", r.summary())
    assert r.complete
    assert r.violation is None, r.violation.render()
    assert r.states > 1


@pytest.mark.parametrize("cfg", STREAMING_CONFIGS, ids=[_id(c) for c in STREAMING_CONFIGS])
def test_every_reachable_state_with_streaming_satisfies_every_check(cfg: tuple) -> None:
    config = Config(*cfg, streaming=True)
    r = check_config(config, conformance=True, check_every_edge=True)
    report.add("model checking: real StalenessController, exhaustive", r.summary())
    assert r.complete
    assert r.violation is None, r.violation.render()
    # streaming adds states (units handed or not), so the search did reach STREAMED units
    assert r.states > check_config(Config(*cfg), liveness=False).states


def test_materialised_frontier_visits_the_same_states_as_real_runs() -> None:
    """The frontier may hold keys (rebuilt by ``materialise``) or the controllers the real code
    produced from the initial state; both searches must find exactly the same key set."""
    for cfg in [Config(1, 2, 3), Config(2, 2, 2), Config(2, 2, 3, 2)]:
        a = ModelChecker(cfg, materialise=True)
        b = ModelChecker(cfg, materialise=False)
        ra, rb = a.run(), b.run()
        assert ra.violation is None and rb.violation is None
        assert set(a.keys) == set(b.keys), cfg
        assert ra.states == rb.states and ra.edges == rb.edges


def test_materialise_is_bisimilar_along_random_real_traces() -> None:
    """For states reached by the real code (never rebuilt), the rebuilt controller has the same
    key, passes the private index checks, and every operation leads to the same key from both:
    the renaming and translation abstraction commutes with the code's operations."""
    rng = random.Random(7)
    checked = 0
    for cfg in [Config(2, 2, 3, 3), Config(3, 2, 2), Config(2, 3, 4)]:
        c = StalenessController(cfg)
        for _ in range(300):
            key, names = canonical(c)
            twin = materialise(key, StalenessController, cfg)
            twin.check()
            assert canonical(twin)[0] == key
            ops_c = enabled(c, names)
            ops_t = enabled(twin, canonical(twin)[1])
            assert [lab for lab, _, _ in ops_c] == [lab for lab, _, _ in ops_t]
            for (lab, op, unit), (_, _, unit_t) in zip(ops_c, ops_t):
                d, e = c.clone(), twin.clone()
                run_op(d, op, unit)
                run_op(e, op, unit_t)
                assert canonical(d)[0] == canonical(e)[0], (lab, op)
                checked += 1
            lab, op, unit = rng.choice(ops_c)
            run_op(c, op, unit)
    assert checked > 1000


def test_key_ignores_unit_names_and_absolute_versions() -> None:
    """Two runs that differ only in unit ids and in how many batches went before get one key."""
    cfg = Config(1, 1)
    a, b = StalenessController(cfg), StalenessController(cfg)
    for c in (b,):  # b first trains three batches
        for n in range(3):
            c.reserve(f"warm{n}")
            c.occupy(f"warm{n}")
            c.consume()
            c.publish()
    a.reserve("x")
    b.reserve(99)
    assert canonical(a)[0] == canonical(b)[0]
    a.occupy("x")
    assert canonical(a)[0] != canonical(b)[0]


def test_a_violation_comes_with_the_shortest_trace_replayed_on_the_real_code() -> None:
    m = MUTANTS["occupy_without_shift"]
    r = check_config(Config(1, 2, 3, 2), m.make)
    v = r.violation
    assert v is not None and v.check == "invariant:ordering" and v.reproduced
    steps = [line for line in v.trace if line[:1].isdigit()]
    assert [s.split(" ")[1] for s in steps] == ["reserve", "reserve", "occupy"]
    assert "reads _ R(1) _" in v.detail or "reads _ R(" in v.detail


def test_progress_detects_a_controller_that_can_never_consume() -> None:
    """``progress`` is a reachability property; a controller that refuses every admission
    passes every state invariant except that nothing can ever be consumed."""

    class NeverAdmits(StalenessController):
        def _can_reserve(self, unit_id):  # type: ignore[no-untyped-def]
            return False

    r = check_config(Config(1, 1), NeverAdmits)
    assert r.violation is not None
    assert r.violation.check in ("invariant:no_deadlock", "deadlock", "progress")


def test_progress_cooperative_needs_a_path_without_abort_filter_or_timeout() -> None:
    """The reachability pass itself, on a hand-made graph: state 2 reaches the consume state 0
    only through an abort edge, so ``progress`` holds and ``progress_cooperative`` fails there;
    with a cooperative edge added, both hold."""
    from array import array

    from .modelcheck import _OP

    mc = ModelChecker(Config(0, 1))
    goal = bytearray([1, 0, 0])
    src, dst = array("I", [1, 2]), array("I", [0, 1])
    ops = array("B", [_OP["occupy"], _OP["abort"]])
    assert mc._progress(3, goal, src, dst, ops) == (
        2, None, "progress_cooperative",
        "no consume is reachable from here with reserve/occupy/publish/consume")
    src.append(2)
    dst.append(0)
    ops.append(_OP["reserve"])
    assert mc._progress(3, goal, src, dst, ops) is None
    goal = bytearray([1, 0, 0])
    assert (mc._progress(3, goal, array("I", [1]), array("I", [0]), array("B", [1]))[2]
            == "progress")
