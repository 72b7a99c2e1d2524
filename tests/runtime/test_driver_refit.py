"""In-flight refit (``rollout.refit: keep``) in the driver, on the scripted engine and the
virtual clock: a weight sync freezes running requests instead of ending them, they continue
under the new weights, every token records the version that made it (split at the refit),
``v_traj`` is never restamped so the staleness bound holds by token versions, and aborts, the
unit timeout and the STUCK timeout work as they do with ``abort``."""

from __future__ import annotations

import asyncio
import math

import pytest

from reserve_occupy import UnitState
from runtime.clock import VirtualClock
from runtime.rollout.base import GenerationRequest
from runtime.rollout.fake import FakeRollout, Plan, random_script
from runtime.records import DriverSettings

from .helpers import fixed_script, make, run, token_lag_violations


def _samples(trainer):
    return [(b, g, s) for b in trainer.batches for g in b.groups for s in g.samples]


@pytest.mark.parametrize("eta", [1, 2])
def test_keep_continues_requests_and_each_token_records_its_version(eta):
    # Requests take 0.2-1.6 s, training 0.05 s: weight syncs land while requests decode.
    driver, rollout, trainer, clock = make(script=random_script(4, per_token_s=0.2, max_len=7),
                                           max_staleness=eta, steps=8, max_tokens=8, refit="keep")
    run(driver, clock)
    assert set(rollout.pause_modes) == {"keep"} and rollout.kept
    refits = [n for n in driver.notes if n["event"] == "refit_kept"]
    assert len(refits) == 8 and sum(n["requests"] for n in refits) > 0  # one note per sync
    assert driver.counts["resumed"] == 0  # no request was ended by a sync ...
    assert all(s.segments == 1 for _, _, s in _samples(trainer))  # ... each ran in one piece
    mixed = [(b, g, s) for b, g, s in _samples(trainer) if len(set(s.versions)) > 1]
    assert mixed  # some requests ran across a refit
    frozen_at: dict[str, set[int]] = {}
    for _, rid, n in rollout.kept:
        frozen_at.setdefault(rid, set()).add(n)  # token counts where each request froze
    for batch, g, s in mixed:
        assert list(s.versions) == sorted(s.versions) and s.versions[0] >= g.v_traj
        # each split is where the engine froze the request, and the logprobs agree with it
        changes = {i for i in range(1, len(s.versions)) if s.versions[i] != s.versions[i - 1]}
        assert changes and changes <= frozen_at[f"{g.unit_id}-c{s.candidate}-s0"]
        assert list(s.logprobs) == [pytest.approx(-0.5 - 0.1 * v) for v in s.versions]
        assert batch.version - g.v_traj == g.staleness <= eta  # v_traj never restamped
    assert token_lag_violations(trainer, eta) == []


def test_abort_mode_ends_requests_at_a_sync():
    # The same run with refit "abort": the sync ends requests, which resume as new segments.
    # (The test above would fail on this behaviour: resumed > 0, segments > 1.)
    driver, rollout, trainer, clock = make(script=random_script(4, per_token_s=0.2, max_len=7),
                                           max_staleness=2, steps=8, max_tokens=8)
    run(driver, clock)
    assert set(rollout.pause_modes) == {"abort"} and not rollout.kept
    assert driver.counts["resumed"] > 0
    assert any(s.segments > 1 for _, _, s in _samples(trainer))


def _hang_g1() -> dict[str, Plan]:
    return {"g1-c0-s0": Plan(math.inf, [1, 2, 3])}


def test_keep_hung_request_is_released_by_the_stuck_timeout():
    driver, rollout, trainer, clock = make(script=fixed_script(0.1, special=_hang_g1()),
                                           max_staleness=0, batch_size=2, group_size=2, steps=4,
                                           stuck_s=2.0, refit="keep")
    run(driver, clock)
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert [e["units"] for e in released] == [["g1"]]
    assert released[0]["t"] == pytest.approx(2.0)
    assert any(rid == "g1-c0-s0" for _, rid in rollout.aborted)
    assert driver.controller.unit_state("g1") is UnitState.ABORTED
    assert len(trainer.batches) == 4 and rollout.active == []


def test_keep_unit_timeout_aborts_a_slow_group_across_refits():
    special = {"g2-": Plan(50.0, [1, 2, 3])}  # every candidate of g2 takes 50 s
    driver, rollout, trainer, clock = make(script=fixed_script(0.1, special=special),
                                           max_staleness=1, steps=6, unit_s=5.0, refit="keep")
    run(driver, clock)
    aborts = [e for e in driver.notes if e["event"] == "abort" and e["unit"] == "g2"]
    assert aborts and aborts[0]["reason"] == "timeout"
    assert aborts[0]["t"] == pytest.approx(5.0)
    # g2's requests ran through the refits (frozen, never restarted) and the abort stopped them
    assert {rid for _, rid in rollout.aborted} >= {f"g2-c{i}-s0" for i in range(4)}
    assert any(rid.startswith("g2-") for _, rid, _ in rollout.kept)
    assert not any(r.request_id.startswith("g2-") and not r.request_id.endswith("-s0")
                   for _, _, r in rollout.requests)
    assert all("g2" not in [g.unit_id for g in b.groups] for b in trainer.batches)
    assert rollout.active == []


def test_keep_a_kept_request_aborted_later_by_the_engine_is_not_resumed():
    # g2-c0 runs 50 s, through the keep syncs; at t=2 (after a sync, outside one) the engine
    # aborts it on its own. A kept request is no longer paused after the resume: the abort
    # fails the candidate ("aborted by the engine"), it is not taken for a pause and restarted.
    # (Before the fix its stale ``paused`` flag made it a "resume": a second segment g2-c0-s1.)
    special = {"g2-c0-": Plan(50.0, [1, 2, 3])}
    driver, rollout, trainer, clock = make(script=fixed_script(0.1, special=special),
                                           max_staleness=1, steps=4, refit="keep")

    async def engine_aborts():
        await clock.sleep(2.0)
        assert rollout.loaded and not rollout.paused and "g2-c0-s0" in rollout.active
        assert any(rid == "g2-c0-s0" for _, rid, _ in rollout.kept)  # kept across a refit
        await rollout.abort(["g2-c0-s0"])

    async def scenario():
        await asyncio.gather(driver.run(), engine_aborts())

    clock.run(scenario())
    assert driver.counts["resumed"] == 0
    assert not [e for e in driver.notes if e["event"] == "resume"]
    assert not any(r.request_id == "g2-c0-s1" for _, _, r in rollout.requests)
    aborts = [e for e in driver.notes if e["event"] == "abort" and e["unit"] == "g2"]
    assert aborts and aborts[0]["reason"] == "candidates_failed"
    assert len(trainer.batches) == 4 and rollout.active == []
    # every refit_kept note counts requests that were running after the load
    assert [n["requests"] for n in driver.notes if n["event"] == "refit_kept"][0] >= 1


def test_a_request_aborted_while_frozen_returns_its_tokens():
    clock = VirtualClock()
    rollout = FakeRollout(clock, lambda req, v: Plan(1.0, [1, 2, 3, 4], "length"))

    async def scenario():
        task = asyncio.ensure_future(rollout.generate(GenerationRequest("r", [0], 4)))
        await clock.sleep(0.5)  # two of four tokens
        await rollout.pause("keep")
        assert rollout.kept == [(0.5, "r", 2)] and not task.done()
        await rollout.load_weights("w", 3)
        await rollout.abort(["r"])
        return await task

    seg = clock.run(scenario())
    assert seg.finish_reason == "abort" and seg.token_ids == [1, 2] and seg.refits == []


def test_refit_settings_are_checked():
    with pytest.raises(ValueError, match="refit mode must be one of abort, keep"):
        DriverSettings(refit="bogus")


def test_keep_through_an_engine_pool():
    from runtime.controller import make_controller
    from runtime.driver import Driver
    from runtime.rollout.fake import FakeTrainer
    from runtime.rollout.pool import EnginePool

    from .helpers import PROMPTS, parity_reward

    clock = VirtualClock()
    engines = [FakeRollout(clock, random_script(4, per_token_s=0.2, max_len=7))
               for _ in range(2)]
    trainer = FakeTrainer(clock, 0.05)
    settings = DriverSettings(max_staleness=2, batch_size=4, group_size=4, steps=6, max_tokens=8,
                              check_invariants=True, refit="keep")
    driver = Driver(settings, EnginePool(engines), trainer, parity_reward, PROMPTS, clock,
                    controller=make_controller(settings, clock.now))
    run(driver, clock)
    assert all(set(e.pause_modes) == {"keep"} and e.kept for e in engines)
    assert all(e.version == trainer.version for e in engines)  # loaded as the version published
    assert driver.counts["resumed"] == 0
    assert any(len(set(s.versions)) > 1 for _, _, s in _samples(trainer))
    assert token_lag_violations(trainer, 2) == []
