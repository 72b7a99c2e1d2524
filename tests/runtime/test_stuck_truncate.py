"""``staleness.stuck_action=truncate`` (spec/PROTOCOL.md §6.2, "Options of the release") on the
driver, with the scripted engine and the virtual clock: when the STUCK timeout fires on a head
buffer with at most ``stuck_threshold`` groups missing, the core places those groups (its
truncate); the driver stops their requests, the tokens each decoded up to the abort become its
sample (``finish_reason`` "truncated"), the user's reward scores that text, and the group
trains. Nothing else is lost, the event log strict-checks, every token is within the bound,
and the run's notes and counts say what was cut. The config keys are checked."""

from __future__ import annotations

import io
import json
import math

import pytest

from reserve_occupy import UnitState
from reserve_occupy_porting.checker import STRICT, check
from runtime.config import load_config
from runtime.rollout.fake import Plan

from .helpers import fixed_script, make, run, token_lag_violations

# g1's first candidate: 40 digits and the end token over 400 s, one every ~10 s (the others
# take 0.1 s); they start "987...", which no other candidate's answer does (fixed_script)
LONG = [(9 - d) % 10 for d in range(40)]


def _straggler(*units: str, duration: float = 400.0) -> dict[str, Plan]:
    return {f"{u}-c0-s0": Plan(duration, LONG + [12]) for u in units}


def _strict_check(driver) -> None:
    text = "".join(json.dumps(r) + "\n" for r in driver.controller.trace_records("test"))
    report = check(io.StringIO(text), STRICT)
    assert report.ok, report.problem


def _trained(trainer) -> dict:
    return {g.unit_id: g for b in trainer.batches for g in b.groups}


def test_truncate_trains_the_straggler_with_what_it_decoded():
    # eta 0, two groups per batch: g1's candidate 0 decodes a token every ~10 s; buffer 0 is
    # STUCK with one group missing; the timeout (35 s) truncates it after 3 of its 41 tokens
    # (an odd length: parity_reward gives it 0 and its partner, 4 digits, 1)
    driver, rollout, trainer, clock = make(
        script=fixed_script(0.1, special=_straggler("g1")), max_staleness=0, batch_size=2,
        group_size=2, steps=4, max_tokens=64, stuck_s=35.0, stuck_action="truncate")
    run(driver, clock)
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert [(e["units"], e.get("truncated")) for e in released] == [(["g1"], ["g1"])]
    assert any(rid == "g1-c0-s0" for _, rid in rollout.aborted)  # the engine stopped it
    g1 = _trained(trainer)["g1"]
    by_index = {s.candidate: s for s in g1.samples}
    cut = by_index[0]
    assert cut.finish_reason == "truncated"
    assert 0 < len(cut.token_ids) < len(LONG)  # a strict prefix of what it would have said
    assert list(cut.token_ids) == LONG[:len(cut.token_ids)]
    assert len(cut.logprobs) == len(cut.versions) == len(cut.token_ids)
    assert by_index[1].finish_reason == "stop"  # the candidate that finished is kept whole
    # rewarded on the truncated text (parity_reward: 1 for an even length)
    assert len(cut.token_ids) == 3 and cut.reward == 0.0 and by_index[1].reward == 1.0
    note = next(e for e in driver.notes if e["event"] == "truncate")
    assert note["unit"] == "g1" and note["cut"] == [0]
    assert note["samples"] == [{"candidate": 0, "tokens_kept": len(cut.token_ids),
                                "at_most_cut": 64 - len(cut.token_ids)}]
    # nothing else lost: no group aborted but those the run's end stopped
    assert set(driver.log_counts.log.aborted_by_reason) <= {"shutdown"}
    assert driver.records[-1].counts["truncated"] == 1
    assert driver.records[-1].counts["released_stuck"] == 0
    assert driver.controller.unit_state("g1") is UnitState.CONSUMED
    assert token_lag_violations(trainer, 0) == []
    assert all(g.staleness == 0 for b in trainer.batches for g in b.groups)
    _strict_check(driver)


def test_a_candidate_with_no_token_yet_is_kept_empty_and_rewarded_on_the_empty_text():
    # the straggler hangs and never decodes a token: it is kept with an empty response
    seen: list[str] = []

    def reward(prompt, completion):
        seen.append(completion)
        return float(len(completion) % 2)

    hang = {"g1-c0-s0": Plan(math.inf, [1, 2, 3])}
    driver, _, trainer, clock = make(script=fixed_script(0.1, special=hang), reward=reward,
                                     max_staleness=0, batch_size=2, group_size=2, steps=3,
                                     stuck_s=2.0, stuck_action="truncate",
                                     filter_zero_variance=False)
    run(driver, clock)
    cut = next(s for s in _trained(trainer)["g1"].samples if s.candidate == 0)
    assert cut.finish_reason == "truncated" and cut.token_ids == () and cut.reward == 0.0
    assert "" in seen
    _strict_check(driver)


def test_a_truncated_group_with_equal_rewards_is_filtered_not_trained():
    # cut at 40 s the straggler kept 4 tokens, as many as its partner: equal rewards, no
    # gradient, known only after the core placed it; the driver filters it (spec §6.3)
    driver, _, trainer, clock = make(
        script=fixed_script(0.1, special=_straggler("g1")), max_staleness=0, batch_size=2,
        group_size=2, steps=3, max_tokens=64, stuck_s=40.0, stuck_action="truncate")
    run(driver, clock)
    assert len(driver.records) == 3  # the run went on
    ops = [(e.op, e.unit_id) for e in driver.controller.events]
    assert ("release_stuck", None) in ops and ("filter", "g1") in ops
    filt = next(e for e in driver.controller.events if e.op == "filter")
    assert driver.controller.metas[filt.seq] == {"reason": "no_gradient"}
    assert "g1" not in _trained(trainer)
    _strict_check(driver)


def test_a_truncated_group_whose_reward_raises_is_filtered_and_the_run_goes_on():
    def reward(prompt, completion):
        if completion.startswith("98"):  # only the straggler's answer
            raise ValueError("cannot score an unfinished answer")
        return float(len(completion) % 2)

    driver, _, trainer, clock = make(
        script=fixed_script(0.1, special=_straggler("g1")), reward=reward,
        max_staleness=0, batch_size=2, group_size=2, steps=3, max_tokens=64, stuck_s=35.0,
        stuck_action="truncate")
    run(driver, clock)
    filt = [e for e in driver.controller.events if e.op == "filter"]
    assert [e.unit_id for e in filt] == ["g1"]
    assert driver.controller.metas[filt[0].seq] == {"reason": "reward_error"}
    assert "g1" not in _trained(trainer) and len(driver.records) == 3
    assert any(e["event"] == "reward_error" and e["unit"] == "g1" for e in driver.notes)
    _strict_check(driver)


def test_over_the_threshold_the_release_is_the_sources():
    # three groups per batch, g1 and g2 straggle: two missing > threshold 1: both aborted
    driver, _, trainer, clock = make(
        script=fixed_script(0.1, special=_straggler("g1", "g2")), max_staleness=0,
        batch_size=3, group_size=2, steps=3, max_tokens=64, stuck_s=35.0,
        stuck_action="truncate", stuck_threshold=1)
    run(driver, clock)
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert released and sorted(released[0]["units"]) == ["g1", "g2"]
    assert "truncated" not in released[0]
    assert driver.controller.unit_state("g1") is UnitState.ABORTED
    assert not any(e["event"] == "truncate" for e in driver.notes)
    assert driver.records[-1].counts["truncated"] == 0
    _strict_check(driver)


def test_truncate_with_streaming_and_batch_oversampling():
    # capacity 3 > batch 2, eta 0, streaming: g1 and g2 straggle; g0 finishes and is streamed;
    # the head (1 of 2 placed, 2 reserved) is STUCK; the release truncates the first
    # reservation, the head is READY and the closing rule aborts the other (no later buffer is
    # legal at eta 0). The truncated group trains in that batch, once its samples exist.
    driver, _, trainer, clock = make(
        script=fixed_script(0.1, special=_straggler("g1", "g2")), max_staleness=0,
        batch_size=2, capacity=3, group_size=2, steps=3, max_tokens=64, stuck_s=35.0,
        stuck_action="truncate", streaming=True, chunk_groups=1)
    run(driver, clock)
    released = next(e for e in driver.notes if e["event"] == "release_stuck")
    assert len(released["truncated"]) == 1 and len(released["units"]) == 2
    cut = released["truncated"][0]
    other = next(u for u in released["units"] if u != cut)
    assert driver.controller.unit_state(other) is UnitState.ABORTED
    first = {g.unit_id: g for g in trainer.batches[0].groups}
    assert set(first) == {"g0", cut}
    assert [s.finish_reason for s in first[cut].samples if s.candidate == 0] == ["truncated"]
    assert ("g0",) in trainer.chunks  # streamed while the trainer waited
    assert driver.records[-1].counts["truncated"] == 1
    assert token_lag_violations(trainer, 0) == []
    _strict_check(driver)


@pytest.mark.parametrize("overrides", [
    {"staleness.stuck_action": "truncate"},
    {"staleness.stuck_action": "truncate", "staleness.stuck_threshold": 2},
])
def test_truncate_is_accepted_and_reaches_the_controller(overrides):
    cfg = load_config(None, overrides=overrides)
    config = cfg.driver_settings().controller_config()
    assert config.stuck_action == "truncate"
    assert config.stuck_threshold == overrides.get("staleness.stuck_threshold")


@pytest.mark.parametrize("overrides, message", [
    ({"staleness.stuck_action": "truncate", "staleness.stuck_threshold": 99,
      "staleness.batch_size": 4}, "must be <= batch_size"),
    ({"staleness.stuck_action": "truncate", "timeouts.stuck_s": None}, "set timeouts.stuck_s"),
    ({"staleness.stuck_action": "truncate", "staleness.policy": "verl_drop",
      "recovery.enabled": False}, "Reserve–Occupy's"),
    ({"staleness.stuck_threshold": 1}, "only with stuck_action=retry or truncate"),
])
def test_bad_truncate_options_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(None, overrides=overrides)
