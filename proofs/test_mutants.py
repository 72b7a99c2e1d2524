"""Every mutant of proofs/mutants.py must be caught; the kill table goes to the summary.

Each mutant runs through the model checker (configurations from small to large; invariants,
per-edge properties and progress, with conformance to the encoding reported only when nothing
more specific notices) and through the Hypothesis state machine (generation only: the model
checker already gives the shortest counterexample). A mutant that no check catches fails the
suite.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from reserve_occupy import Config

from . import report
from .modelcheck import check_config
from .mutants import MUTANTS
from .stateful import Violation, machine_for

# Smallest first; (2, 3, 3) is the smallest found to expose relabel_last (depth 17).
MC_CONFIGS = [Config(1, 2, 3, 2), Config(1, 2, 2), Config(2, 2, 2), Config(2, 3, 3),
              Config(2, 2, 3, 3), Config(2, 3, 4, 4)]
# Streaming mutants break rules that exist only with Config.streaming: the same sizes, streaming.
STREAM_MC_CONFIGS = [Config(0, 2, 2, streaming=True), Config(1, 2, 2, streaming=True),
                     Config(1, 2, 3, 2, streaming=True), Config(2, 2, 3, 3, streaming=True)]
HYPOTHESIS = settings(max_examples=200, stateful_step_count=60, deadline=None,
                      derandomize=True, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
TABLE = "mutant kill table"


def _model_check(name: str):
    make = MUTANTS[name].make
    for cfg in STREAM_MC_CONFIGS if MUTANTS[name].streaming else MC_CONFIGS:
        r = check_config(cfg, make, conformance=True, check_every_edge=True, stop_on_spec=False)
        if r.violation is not None:
            return cfg, r.violation
    return None, None


def _hypothesis(name: str) -> str:
    try:
        run_state_machine_as_test(machine_for(MUTANTS[name].make), settings=HYPOTHESIS)
    except Violation as e:
        return e.check
    except Exception as e:  # noqa: BLE001 - anything else the machine raised still caught it
        return f"error:{type(e).__name__}"
    return "-"


@pytest.fixture(scope="module", autouse=True)
def _table_header():
    report.add(TABLE, f"{'mutant':26} {'model checker (config: check, trace length)':58} "
                      f"{'Hypothesis':22} rule broken")
    yield


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_is_caught(name: str) -> None:
    m = MUTANTS[name]
    cfg, v = _model_check(name)
    hyp = _hypothesis(name)
    if v is not None:
        where = (f"eta={cfg.max_staleness} B={cfg.batch_size} C={cfg.capacity} "
                 f"maxc={cfg.max_concurrency}{' str' if cfg.streaming else ''}: {v.check}, "
                 f"{len(v.steps)} steps")
    else:
        where = "-"
    report.add(TABLE, f"{name:26} {where:58} {hyp:22} {m.rule}")
    if v is not None:
        report.add("mutant counterexamples (shortest, from the model checker)",
                   f"{name}: {v.check}: {v.detail}\n    " + v.compact().replace("\n", "\n    "))
    assert v is not None or hyp != "-", f"mutant {name} survived every check"
    if v is not None:
        assert v.reproduced, f"{name}: the counterexample does not replay on the real code"
