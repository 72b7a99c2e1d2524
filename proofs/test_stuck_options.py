"""The STUCK release's options (spec/PROTOCOL.md §6.2, "Options of the release"):
``Config.stuck_action`` ``retry`` and ``truncate`` with ``stuck_threshold``.

* the exhaustive model checking of the real controller explores them (every reachable state of
  each configuration below, each edge against every invariant, the per-edge checks -- with
  ``truncate_checks``: a truncated unit was a reservation of the head, is FINISHED with its
  ``v_traj`` at a slot no later than it -- and conformance to the slot-level encoding, whose
  ``release_stuck`` runs ``occupy`` rounds under truncate), and the search does take them;
* Z3 proves ``truncate``'s loop body (``occupy`` of the head's first reservation) ends and
  keeps the truncated unit in the head with its ``v_traj`` (``Prover.truncate_stuck``);
  invariance of the body is ``occupy``'s consecution (proofs/test_z3.py);
* the mutant ``truncate_places_late`` (``STUCK_MUTANTS``) is killed.
"""

from __future__ import annotations

from collections import Counter

import pytest

from reserve_occupy import Config, StalenessController

from . import report
from .modelcheck import check_config
from .mutants import STUCK_MUTANTS
from .spec_model import Shape
from .z3_model import Prover

# (eta, batch_size, capacity, max_concurrency, stuck_action, stuck_threshold, streaming)
STUCK_CONFIGS = [
    (0, 2, 2, None, "truncate", None, False), (1, 1, 1, None, "truncate", None, False),
    (1, 2, 2, None, "truncate", None, False), (1, 2, 3, None, "truncate", None, False),
    (1, 3, 3, None, "truncate", 1, False), (2, 2, 2, None, "truncate", 1, False),
    (2, 2, 3, 2, "truncate", None, False), (1, 2, 2, None, "truncate", None, True),
    (1, 3, 3, None, "retry", 2, False), (2, 2, 2, None, "retry", None, False),
]


def _config(c: tuple) -> Config:
    eta, b, cap, maxc, action, threshold, streaming = c
    return Config(eta, b, cap, maxc, streaming=streaming, stuck_action=action,
                  stuck_threshold=threshold)


def _id(c: tuple) -> str:
    return (f"eta{c[0]}-B{c[1]}-C{c[2]}-maxc{c[3]}-{c[4]}-th{c[5]}"
            + ("-str" if c[6] else ""))


def _counting() -> tuple[type[StalenessController], Counter]:
    """A controller class that counts the releases the search runs, by the action taken (the
    model checker clones and materialises controllers of ``make``'s class)."""
    seen: Counter = Counter()

    class Counting(StalenessController):
        def _do_release_stuck(self) -> None:
            seen[self._stuck_choice(self._table.buffers[self._table.head])] += 1
            super()._do_release_stuck()

    return Counting, seen


@pytest.mark.parametrize("cfg", STUCK_CONFIGS, ids=[_id(c) for c in STUCK_CONFIGS])
def test_every_reachable_state_with_a_stuck_option_satisfies_every_check(cfg: tuple) -> None:
    config = _config(cfg)
    cls, seen = _counting()
    r = check_config(config, cls, conformance=True, check_every_edge=True)
    report.add("model checking: real StalenessController, exhaustive", r.summary())
    assert r.complete
    assert r.violation is None, r.violation.render()
    # the search did take the option, and with a threshold below batch_size also the plain
    # release the threshold leaves to larger gaps
    assert seen[config.stuck_action] > 0, seen
    if config.stuck_threshold is not None and config.batch_size - config.stuck_threshold >= 1:
        assert seen["release"] > 0, seen
    if config.stuck_action == "retry":
        # retry releases as release does (the caller re-admits): the same reachable states
        plain = check_config(Config(config.max_staleness, config.batch_size, config.capacity,
                                    config.max_concurrency), liveness=False)
        assert r.states == plain.states


# Z3 shapes (eta, capacity): every batch_size 1..capacity, with and without a limit.
TRUNCATE_SHAPES = [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]


@pytest.mark.parametrize("shape", TRUNCATE_SHAPES,
                         ids=[f"eta{e}-C{c}" for e, c in TRUNCATE_SHAPES])
def test_truncate_round_ends_and_keeps_the_unit_in_the_head(shape: tuple) -> None:
    outcomes = Prover(Shape(*shape), 120_000).truncate_stuck()
    report.add("Z3 proofs", f"truncate_stuck eta={shape[0]} C={shape[1]}: "
               f"{sum(o.proved for o in outcomes)}/{len(outcomes)} proved")
    bad = [o for o in outcomes if not o.proved]
    assert len(outcomes) == 2
    assert not bad, "\n\n".join(f"{o.prop}: {o.result}\n{o.counterexample or ''}" for o in bad)


MUTANT_CONFIGS = [c for c in STUCK_CONFIGS if c[4] == "truncate"]


@pytest.mark.parametrize("name", list(STUCK_MUTANTS))
def test_stuck_mutant_is_caught(name: str) -> None:
    m = STUCK_MUTANTS[name]
    for cfg in MUTANT_CONFIGS:
        r = check_config(_config(cfg), m.make, conformance=True, check_every_edge=True,
                         stop_on_spec=False)
        if r.violation is not None:
            v = r.violation
            report.add("mutant kill table", f"{name:26} {_id(cfg)}: {v.check}, "
                       f"{len(v.steps)} steps  {m.rule}")
            assert v.reproduced, f"{name}: the counterexample does not replay on the real code"
            return
    pytest.fail(f"mutant {name} survived every configuration")
