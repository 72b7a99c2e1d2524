"""The STUCK release's options in the simulator (spec/PROTOCOL.md §6.2, "Options of the
release"): ``Simulator.truncate`` finishes a running group with what it decoded (the ledger
records the cut lengths, nothing is wasted), Reserve–Occupy's ``stuck_action`` ``truncate``
and ``retry`` act at the timeout, and ``release`` is the run it always was."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from sim_helpers import run_policy

from reserve_occupy_sim.model.checks import CheckFailed, check_run, check_truncated
from reserve_occupy_sim.model.core import PolicyError
from reserve_occupy_sim.model.filtering import RewardFilter
from reserve_occupy_sim.model.core import Simulator
from reserve_occupy_sim.model.metrics import summarize
from reserve_occupy_sim.studies.stuck_options import table
from reserve_occupy_peers.reserve_occupy import ReserveOccupy

TIMEOUT = 20.0  # short enough that the release fires on the 128-group test workload


@pytest.mark.parametrize("eta", [1, 2])
def test_truncate_finishes_the_head_groups_with_their_decoded_tokens(eta, workload, cost):
    policy = ReserveOccupy(eta, stuck_timeout_s=TIMEOUT, stuck_action="truncate", check_every=1)
    sim = run_policy(policy, workload, cost, batches=12)
    check_run(sim)  # conservation, truncated, tokens, batches, staleness <= eta
    assert policy.truncated, "the timeout never truncated; the setting is too gentle"
    assert not policy.released  # at any gap (no threshold) nothing is aborted
    cut = sim.ledger.truncated
    assert check_truncated(sim) == len(cut) > 0
    assert all(0 <= kept <= planned for _, planned, kept in cut)
    assert any(kept < planned for _, planned, kept in cut)
    trained = {t for b in sim.ledger.batches for t in b.tids}
    gids = set(policy.truncated)
    # every truncated group trained (no filtering here), with its cut lengths
    by_tid = {r.tid: r for r in sim.ledger.requests}
    assert {by_tid[t].group.gid for t, _, _ in cut} <= gids
    for gid in gids:
        assert all(r.tid in trained for r in sim.groups[gid].requests)
    assert summarize(sim).waste_l2_tokens == 0  # the release wasted nothing


def test_truncate_with_filtering_filters_what_carries_no_gradient(workload, cost):
    policy = ReserveOccupy(1, stuck_timeout_s=TIMEOUT, stuck_action="truncate", check_every=1)
    sim = Simulator(policy, workload, cost, batches=12, batch_size=8,
                    filtering=RewardFilter(0.4, 1.0, 0)).run()
    check_run(sim)
    assert policy.truncated
    states = Counter(sim.groups[g].state for g in policy.truncated)
    assert set(states) <= {"done", "filtered"}


def test_retry_readmits_the_released_prompts_before_new_ones(workload, cost):
    policy = ReserveOccupy(1, stuck_timeout_s=TIMEOUT, stuck_action="retry", check_every=1)
    sim = run_policy(policy, workload, cost, batches=12)
    check_run(sim)
    assert policy.retried and set(policy.retried) <= set(policy.released)
    admitted = Counter(g.tag for g in sim.groups)
    for gid in policy.retried:
        prompt = sim.groups[gid].tag
        later = [g for g in sim.groups if g.gid > gid and g.tag == prompt]
        # admitted again, or still queued for it when the run ended
        assert later or prompt in policy._retry, f"retried group {gid}'s prompt {prompt} lost"
    # fresh prompts still come in order, none skipped: the indices admitted are a prefix of
    # the prompt stream, and only retried prompts were admitted twice
    assert sorted(admitted) == list(range(len(admitted)))
    assert {p for p, k in admitted.items() if k > 1} <= {sim.groups[g].tag for g in policy.retried}


def test_release_is_the_source_protocols_run(workload, cost):
    def run(**kw):
        sim = run_policy(ReserveOccupy(1, stuck_timeout_s=TIMEOUT, **kw), workload, cost,
                         batches=10)
        return json.dumps(summarize(sim).to_json(), sort_keys=True)

    assert run() == run(stuck_action="release")


def test_a_threshold_leaves_larger_gaps_to_the_release(workload, cost):
    policy = ReserveOccupy(1, stuck_timeout_s=TIMEOUT, stuck_action="truncate",
                           stuck_threshold=1)
    sim = run_policy(policy, workload, cost, batches=12)
    check_run(sim)
    assert policy.released  # gaps of two or more groups were released


def test_options_are_refused_in_one_line(workload, cost):
    with pytest.raises(ValueError, match="stuck_action must be one of"):
        ReserveOccupy(1, stuck_timeout_s=TIMEOUT, stuck_action="drop")
    with pytest.raises(ValueError, match="set stuck_timeout_s"):
        ReserveOccupy(1, stuck_action="retry")
    with pytest.raises(ValueError, match="stuck_threshold"):
        run_policy(ReserveOccupy(1, stuck_timeout_s=TIMEOUT, stuck_action="retry",
                                 stuck_threshold=99), workload, cost, batches=1)


def test_truncate_refuses_a_group_that_is_not_running(workload, cost):
    policy = ReserveOccupy(1)
    sim = run_policy(policy, workload, cost, batches=2)
    done = next(g for g in sim.groups if g.state != "running")
    with pytest.raises(PolicyError, match="only running groups can be truncated"):
        sim.truncate(done)


def test_check_truncated_catches_a_cut_longer_than_planned(workload, cost):
    policy = ReserveOccupy(1, stuck_timeout_s=TIMEOUT, stuck_action="truncate")
    sim = run_policy(policy, workload, cost, batches=12)
    tid, planned, kept = sim.ledger.truncated[0]
    sim.ledger.truncated[0] = (tid, planned, planned + 1)
    with pytest.raises(CheckFailed, match="truncated"):
        check_truncated(sim)


def test_the_measurement_table_compares_each_row_with_its_own_baseline():
    def run(steady, spb, length, lost=0.0, ended=0, kept=None):
        return {"steady": steady, "seconds_per_batch": spb, "lost": lost, "ended_groups": ended,
                "truncated_kept": kept, "trained_len": length, "max_staleness": 1}

    payload = {"batches": 10, "cells": [
        {"regime": "r", "eta": 1, "setting": "no timeout", "stuck_action": None,
         "runs": [run(100.0, 10.0, 1000.0), run(200.0, 20.0, 2000.0)]},
        {"regime": "r", "eta": 1, "setting": "truncate", "stuck_action": "truncate",
         "runs": [run(50.0, 5.0, 500.0, 0.0, 10, 0.5), run(200.0, 30.0, 2000.0, 0.0, 10, 0.7)]},
    ]}
    text = table(payload)
    row = text.splitlines()[-1]
    # steady ÷: mean(0.5, 1.0) = 0.75; s/batch ÷: mean(0.5, 1.5) = 1.00; length ÷ 0.75;
    # groups ended per batch: mean(10, 10) / 10 = 1.00; share kept: mean(0.5, 0.7) = 60 %
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:] == ["truncate", "125", "0.75", "1.00", "0.0%", "1.00", "0.75", "60%", "1"]
