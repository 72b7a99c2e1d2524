"""``staleness.stuck_action=retry`` (spec/PROTOCOL.md §6.2, "Options of the release") on the
driver, with the scripted engine and the virtual clock: the STUCK release is the same, and the
released group's prompt is admitted again (the re-admission queue, logged ``readmit_of``), and
trains; over ``stuck_threshold`` the release is the source's. The config keys are checked."""

from __future__ import annotations

import math

import pytest

from reserve_occupy import UnitState, replay
from runtime.config import load_config
from runtime.rollout.fake import Plan

from .helpers import fixed_script, make, run


def _hang(*units: str) -> dict[str, Plan]:
    return {f"{u}-c0-s0": Plan(math.inf, [1, 2, 3]) for u in units}


def _reserve_meta(driver) -> dict:
    metas = driver.controller.metas
    return {e.unit_id: metas.get(e.seq, {}) for e in driver.controller.events
            if e.op == "reserve"}


def test_retry_readmits_the_released_groups_prompt_and_it_trains():
    # eta 0, two groups per batch: g1 hangs, buffer 0 is STUCK with one group missing
    driver, rollout, trainer, clock = make(script=fixed_script(0.1, special=_hang("g1")),
                                           max_staleness=0, batch_size=2, group_size=2, steps=4,
                                           stuck_s=2.0, stuck_action="retry")
    run(driver, clock)
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert [(e["units"], e.get("retry")) for e in released] == [(["g1"], True)]
    assert driver.controller.unit_state("g1") is UnitState.ABORTED
    assert any(rid == "g1-c0-s0" for _, rid in rollout.aborted)  # the engine stopped it
    meta = _reserve_meta(driver)
    again = [u for u, m in meta.items() if m.get("readmit_of") == "g1"]
    assert len(again) == 1 and meta[again[0]]["prompt"] == meta["g1"]["prompt"]
    assert "draw" not in meta[again[0]]  # not a new draw of the prompt stream
    trained = {g.unit_id for b in trainer.batches for g in b.groups}
    assert again[0] in trained and "g1" not in trained
    # the log replays on the core with the header's options
    assert replay(driver.controller.config, driver.controller.events).snapshot() \
        == driver.controller.snapshot()


def test_release_draws_the_next_prompt_instead():
    driver, _, _, clock = make(script=fixed_script(0.1, special=_hang("g1")), max_staleness=0,
                               batch_size=2, group_size=2, steps=4, stuck_s=2.0)
    run(driver, clock)
    assert not any("readmit_of" in m for m in _reserve_meta(driver).values())


def test_over_the_threshold_the_release_is_the_sources():
    # three groups per batch, g1 and g2 hang: two missing > threshold 1
    driver, _, _, clock = make(script=fixed_script(0.1, special=_hang("g1", "g2")), max_staleness=0,
                               batch_size=3, group_size=2, steps=3, stuck_s=2.0,
                               stuck_action="retry", stuck_threshold=1)
    run(driver, clock)
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert released and sorted(released[0]["units"]) == ["g1", "g2"]
    assert "retry" not in released[0]
    assert not any("readmit_of" in m for m in _reserve_meta(driver).values())


@pytest.mark.parametrize("overrides, message", [
    ({"staleness.stuck_action": "drop"}, "'release', 'retry' or 'truncate'"),
    ({"staleness.stuck_threshold": 1}, "only with stuck_action=retry"),
    ({"staleness.stuck_action": "retry", "staleness.stuck_threshold": 99,
      "staleness.batch_size": 4}, "must be <= batch_size"),
    ({"staleness.stuck_action": "retry", "timeouts.stuck_s": None}, "set timeouts.stuck_s"),
    ({"staleness.stuck_action": "retry", "staleness.policy": "verl_drop",
      "recovery.enabled": False}, "Reserve–Occupy's"),
])
def test_bad_stuck_options_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(None, overrides=overrides)


def test_the_keys_reach_the_controller():
    cfg = load_config(None, overrides={"staleness.stuck_action": "retry",
                                       "staleness.stuck_threshold": 2})
    config = cfg.driver_settings().controller_config()
    assert (config.stuck_action, config.stuck_threshold) == ("retry", 2)
