"""The checker against the proofs' mutant catalogue: every mutant's traces are rejected in strict
mode with a difference in the field its broken rule decides; the mutants that break a safety
invariant are also rejected in lenient mode, naming that invariant, and the others -- which place
differently, or only stall -- pass lenient mode, as a legal-but-different port should.

Traces come from driving each mutant with the rule scenarios, spec/scenarios and the first seeds
of every conformance family (``reserve_occupy_porting.drive``); the mutant's own event log is the
trace.
"""

from __future__ import annotations

import itertools
import random
from functools import cache

import pytest

from proofs.mutants import MUTANTS
from reserve_occupy import Config
from reserve_occupy.trace import dumps
from reserve_occupy_porting.checker import check
from reserve_occupy_porting.vector_runner import ReferenceAdapter, run
from reserve_occupy_porting.vectors import (
    FAMILIES,
    SCENARIOS,
    SPEC_SCENARIOS,
    _letters,
    load,
    spec_scenario,
)
from reserve_occupy_porting.drive import drive, play

SEEDS_PER_FAMILY = 8

# mutant -> (op, field) pairs its first strict divergence may show: the field the broken rule
# decides. "moves" matches moves[k].
STRICT: dict[str, set[tuple[str, str]]] = {
    "staleness_off_by_one": {("occupy", "moves"), ("abort", "moves")},
    "reserve_earliest": {("reserve", "slot")},
    "reserve_first_empty": {("reserve", "slot")},
    "reserve_into_ready": {("reserve", "decision")},
    "occupy_without_shift": {("occupy", "moves"), ("abort", "moves")},
    "shift_after_gap": {("occupy", "moves"), ("abort", "moves")},
    "literal_shift_no_relabel": {("occupy", "moves"), ("abort", "moves"), ("occupy", "slot")},
    "relabel_last": {("occupy", "moves"), ("abort", "moves")},
    "place_latest": {("occupy", "slot")},
    "place_into_ready": {("occupy", "slot")},
    "ready_not_closed": {("occupy", "aborted"), ("occupy", "moves")},
    "close_aborts_silently": {("occupy", "aborted")},
    "filter_without_refill": {("filter", "moves"), ("abort", "moves"),
                              ("release_stuck", "moves")},
    "donor_first_occupied": {("filter", "moves")},
    "ready_one_early": {("consume", "decision"), ("occupy", "aborted"), ("occupy", "moves")},
    "abort_keeps_slot": {("reserve", "decision"), ("abort", "moves")},
    "consume_before_ready": {("consume", "decision")},
    "publish_keeps_window": {("reserve", "decision")},
    "concurrency_unchecked": {("reserve", "decision")},
    "release_stuck_one": {("release_stuck", "aborted")},
    "stream_later_buffer": {("stream", "decision"), ("stream", "batch")},
    "stream_newest_first": {("stream", "batch")},
    "stream_while_training": {("stream", "error")},
    "filter_streamed": {("filter", "error")},
    "consume_leaves_out_streamed": {("consume", "batch")},
}

# mutants that break a safety invariant, and the invariant lenient mode must name. Every other
# mutant is safe: it places or moves units differently (reserve_earliest, reserve_first_empty,
# occupy_without_shift, shift_after_gap, literal_shift_no_relabel, relabel_last, place_latest,
# filter_without_refill, donor_first_occupied) or only admits or releases less than it could
# (abort_keeps_slot, publish_keeps_window, release_stuck_one: liveness bugs), so lenient mode must
# accept all of its traces and only strict mode can tell it from the reference.
SAFETY: dict[str, set[str]] = {
    "staleness_off_by_one": {"staleness"},
    "reserve_into_ready": {"capacity"},
    "place_into_ready": {"capacity"},
    # a reservation left in (or silently dropped from) a READY buffer: either too many live
    # units for the open slots, or, once that buffer is consumed, a unit that can never train
    "ready_not_closed": {"capacity", "staleness"},
    "close_aborts_silently": {"capacity", "staleness"},
    "ready_one_early": {"batch"},
    "consume_before_ready": {"batch"},
    "concurrency_unchecked": {"concurrency"},
    # streaming: a handed unit missing from its batch, a stream of a batch that is training, a
    # handed unit filtered (stream_newest_first is safe: it hands fewer units per call)
    "stream_later_buffer": {"streamed"},
    "consume_leaves_out_streamed": {"streamed"},
    "stream_while_training": {"order"},
    "filter_streamed": {"conservation"},
}

# Requests the reference refuses with an error, which no generated workload makes (they hold
# legal request sequences only): a mutant that accepts one shows only on such a script. The
# reference's recording ends at the error; the mutant's goes on and logs the operation.
ILLEGAL_SCRIPTS: list[tuple[Config, str]] = [
    (Config(1, 1, streaming=True), "reserve A B; occupy A; consume; occupy B; stream"),
    (Config(1, 2, streaming=True), "reserve A B; occupy A; stream; filter A; occupy B; consume"),
]
# Vectors hold legal request sequences only, so a mutant that accepts an illegal one passes
# them; check-trace (above) catches it.
ONLY_ILLEGAL = {"stream_while_training", "filter_streamed"}


@cache
def traces(name: str) -> list[tuple[str, list[str]]]:
    """(workload id, trace lines) for every workload run on the mutant, in a fixed order."""
    mutant = MUTANTS[name]
    out = []
    for scenario, (config, script, _) in SCENARIOS.items():
        rec = play(mutant.make(config), _letters(script), reraise=False)
        out.append((f"scenarios/{scenario}", [dumps(r) for r in rec.lines()]))
    for path in sorted(SPEC_SCENARIOS.glob("*.json")):
        config, script, _ = spec_scenario(path)
        rec = play(mutant.make(config), script, reraise=False)
        out.append((f"spec/{path.stem}", [dumps(r) for r in rec.lines()]))
    for k, (config, script) in enumerate(ILLEGAL_SCRIPTS):
        rec = play(mutant.make(config), _letters(script), reraise=False)
        out.append((f"illegal/{k}", [dumps(r) for r in rec.lines()]))
    for family, fam in FAMILIES.items():
        for seed in range(SEEDS_PER_FAMILY):
            config, profile = fam.pick(random.Random(f"{family}/{seed}"))
            rec = drive(mutant.make(config), seed, profile)
            out.append((f"{family}/{seed:05d}", [dumps(r) for r in rec.lines()]))
    return out


def test_catalogue_is_covered() -> None:
    assert set(STRICT) == set(MUTANTS), "a mutant was added or renamed: classify it here"
    assert set(SAFETY) <= set(MUTANTS)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_strict_mode_rejects_the_mutant(name: str) -> None:
    rejected = [(workload, report) for workload, lines in traces(name)
                if not (report := check(lines)).ok]
    if not rejected:
        pytest.fail(f"strict mode accepted every trace of mutant {name}")
    workload, report = rejected[0]
    p = report.problem
    assert p.differences, f"{name} ({workload}): a violation without a divergence: {p.violation}"
    field = p.differences[0].field.split("[")[0].split(".")[0]
    assert (p.entry.op, field) in STRICT[name], (name, workload, p.entry.op, p.differences)
    assert p.differences[0].rule  # the message names the rule


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_lenient_mode_rejects_exactly_the_unsafe_mutants(name: str) -> None:
    rejected = None
    for workload, lines in traces(name):
        report = check(lines, "lenient")
        if not report.ok:
            rejected = (workload, report.problem)
            break
    if name in SAFETY:
        assert rejected is not None, f"lenient mode missed unsafe mutant {name}"
        workload, p = rejected
        assert p.violation.invariant in SAFETY[name], (name, workload, p.violation)
    else:
        assert rejected is None, f"lenient mode rejected safe mutant {name}: {rejected}"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_conformance_scenarios_catch_the_mutant(name: str) -> None:
    """The scenario family alone fails every mutant run as a port through the runner (for a
    streaming mutant, the streaming family's first vectors)."""
    if name in ONLY_ILLEGAL:
        pytest.skip("accepts an illegal request, which no vector makes (check-trace catches it)")
    if MUTANTS[name].streaming:
        vecs = list(itertools.islice(load(["streaming"]), 60))
    else:
        vecs = list(load(["scenarios"]))
    result = run(ReferenceAdapter(MUTANTS[name].make), vecs, "strict")
    assert result.failures, f"the conformance vectors pass mutant {name}"
