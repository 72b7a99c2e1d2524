"""The driver on the scripted engine and the virtual clock: fast, exact, deterministic.

Each test drives one behaviour the issue asks for (bounded staleness by actual token versions,
partial rollout, timeouts, failures, oversampling, filtering) and, where it is not obvious, shows
that its check fails on a broken variant.
"""

from __future__ import annotations

import math

import pytest

from reserve_occupy import UnitState, replay
from runtime.rollout.base import RolloutDead
from runtime.rollout.fake import Plan, random_script

from .helpers import PROMPTS, fixed_script, make, run, token_lag_violations


@pytest.mark.parametrize("eta", [0, 1, 2])
def test_every_batch_respects_eta_by_token_versions(eta):
    driver, _, trainer, clock = make(script=random_script(3, long_tail=0.1), max_staleness=eta,
                                           steps=15, candidates=6)
    records = run(driver, clock)
    assert len(records) == len(trainer.batches) == 15
    assert token_lag_violations(trainer, eta) == []
    assert all(len(b.groups) == 4 for b in trainer.batches)
    assert max(max(r.token_version_lag) for r in records) <= eta
    if eta:  # the runs are genuinely asynchronous: some data is stale, within the bound
        assert any(max(r.staleness) > 0 for r in records)


def test_the_eta_check_catches_overstale_batches():
    # The same checker on a run whose controller allows eta=3 must report eta=1 violations:
    # the check above is not vacuous.
    driver, _, trainer, clock = make(script=random_script(3, long_tail=0.3), max_staleness=3,
                                     steps=15, train_s=0.2)
    run(driver, clock)
    assert token_lag_violations(trainer, 3) == []
    assert token_lag_violations(trainer, 1) != []


def test_virtual_runs_are_deterministic_and_replay():
    logs = []
    for _ in range(2):
        driver, _, _, clock = make(script=random_script(5, long_tail=0.1), candidates=6,
                                         stuck_s=0.5, steps=10)
        run(driver, clock)
        logs.append((driver.controller.events, driver.notes, clock.now()))
        replay(driver.controller.config, driver.controller.events)  # the log is the run
    assert logs[0] == logs[1]


def test_partial_rollout_resumes_with_kept_tokens_and_oldest_version():
    # Requests take 0.2-1.6 s, training 0.05 s: weight updates interrupt requests part-way.
    driver, rollout, trainer, clock = make(script=random_script(4, per_token_s=0.2, max_len=7),
                                           max_staleness=2, steps=8, max_tokens=8)
    run(driver, clock)
    assert driver.counts["resumed"] > 0
    resumed = [(b, g, s) for b in trainer.batches for g in b.groups for s in g.samples
               if s.segments > 1]
    mixed = [(b, g, s) for b, g, s in resumed if len(set(s.versions)) > 1]
    assert mixed  # some samples hold tokens of more than one version
    for batch, g, s in resumed:
        assert list(s.versions) == sorted(s.versions)  # the oldest first ...
        assert s.versions[0] >= g.v_traj  # ... never older than the unit's version
        assert batch.version - g.v_traj == g.staleness <= 2  # v_traj was never restamped
    # Each resumed request's prompt is the original prompt plus every token kept so far.
    by_id = {req.request_id: req for _, _, req in rollout.requests}
    kept_some = False
    for _, g, smp in resumed:
        first = by_id[f"{g.unit_id}-c{smp.candidate}-s0"]
        for seg in range(1, smp.segments):
            req = by_id[f"{g.unit_id}-c{smp.candidate}-s{seg}"]
            kept = req.prompt_ids[len(first.prompt_ids):]
            assert req.prompt_ids[:len(first.prompt_ids)] == first.prompt_ids
            assert kept == list(smp.token_ids[:len(kept)])
            assert req.max_tokens == 8 - len(kept)
            kept_some = kept_some or bool(kept)
    assert kept_some


def test_without_partial_rollout_interrupted_requests_restart_from_scratch():
    driver, rollout, trainer, clock = make(script=fixed_script(1.0, n_tokens=5), max_staleness=2,
                                           steps=6, max_tokens=8, partial_rollout=False)
    run(driver, clock)
    by_id = {req.request_id: req for _, _, req in rollout.requests}
    restarted = [r for rid, r in by_id.items() if not rid.endswith("-s0")]
    assert restarted
    for req in restarted:
        unit, cand, _ = req.request_id.rsplit("-", 2)
        assert req.prompt_ids == by_id[f"{unit}-{cand}-s0"].prompt_ids
    for b in trainer.batches:  # no sample mixes versions when tokens are not kept
        assert all(len(set(s.versions)) == 1 for g in b.groups for s in g.samples)


def _hang_g1() -> dict[str, Plan]:
    return {"g1-c0-s0": Plan(math.inf, [1, 2, 3])}


def test_hung_request_is_released_by_the_stuck_timeout_and_the_run_continues():
    # eta=0, two groups per batch: g1 hangs, so buffer 0 is STUCK (g0 occupied, g1 reserved).
    driver, rollout, trainer, clock = make(script=fixed_script(0.1, special=_hang_g1()),
                                           max_staleness=0, batch_size=2, group_size=2, steps=4,
                                           stuck_s=2.0)
    run(driver, clock)
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert [e["units"] for e in released] == [["g1"]]
    # Exactly on time: the trainer waits from 0 on a head buffer that is STUCK from 0 (both
    # slots reserved), and the release fires stuck_s later, by the virtual clock.
    assert released[0]["t"] == pytest.approx(2.0)
    assert any(rid == "g1-c0-s0" for _, rid in rollout.aborted)  # engine told to stop it
    assert driver.controller.unit_state("g1") is UnitState.ABORTED
    assert len(trainer.batches) == 4 and "g1" not in trainer.batches[0].groups
    assert rollout.active == []


def test_without_the_stuck_timeout_the_hung_request_wedges_the_run():
    driver, _, _, clock = make(script=fixed_script(0.1, special=_hang_g1()), max_staleness=0,
                               batch_size=2, group_size=2, steps=4)
    with pytest.raises(RuntimeError, match="deadlock"):
        run(driver, clock)


def test_unit_timeout_aborts_a_slow_group():
    special = {"g2-": Plan(50.0, [1, 2, 3])}  # every candidate of g2 takes 50 s
    driver, rollout, trainer, clock = make(script=fixed_script(0.1, special=special),
                                           max_staleness=1, steps=6, unit_s=5.0)
    run(driver, clock)
    aborts = [e for e in driver.notes if e["event"] == "abort" and e["unit"] == "g2"]
    assert aborts and aborts[0]["reason"] == "timeout"
    assert aborts[0]["t"] == pytest.approx(5.0)
    # every candidate's running request (resumed after weight updates: -s1, -s2, ...) stopped
    assert {rid.rsplit("-", 1)[0] for _, rid in rollout.aborted} >= {f"g2-c{i}" for i in range(4)}
    assert all("g2" not in [g.unit_id for g in b.groups] for b in trainer.batches)


def test_reward_exception_aborts_that_group_cleanly():
    def reward(prompt, completion):
        if prompt.index == PROMPTS[0].index and len(completion) > 2:
            raise ZeroDivisionError("bad reward")
        return float(len(completion) % 2 == 0)

    driver, rollout, trainer, clock = make(script=random_script(1), reward=reward, steps=30,
                                           candidates=6)
    run(driver, clock)
    errors = [e for e in driver.notes if e["event"] == "reward_error"]
    assert errors
    units = {e["unit"] for e in errors}
    for u in units:
        assert driver.controller.unit_state(u) is UnitState.ABORTED
        assert all(u not in [g.unit_id for g in b.groups] for b in trainer.batches)
        assert not [rid for rid in rollout.active if rid.startswith(f"{u}-")]
    assert len(trainer.batches) == 30
    driver.controller.check()


def test_engine_errors_fail_candidates_and_then_the_group():
    special = {"g3-c0": Plan(0.05, [], error=RuntimeError("CUDA error")),
               "g5-c1": Plan(0.05, [], error=RuntimeError("CUDA error"))}
    driver, _, _, clock = make(script=fixed_script(0.1, special=special),
                                           group_size=4, candidates=5, steps=6,
                                           reward=lambda p, c: float(len(c) == 3))
    run(driver, clock)
    # With one spare candidate, a single failure is absorbed: both groups still complete.
    assert not [e for e in driver.notes if e["event"] == "abort" and e["unit"] in ("g3", "g5")]
    driver2, *_, clock2 = make(script=fixed_script(0.1, special=special), group_size=4,
                               steps=6, reward=lambda p, c: float(len(c) == 3))
    run(driver2, clock2)
    failed = {e["unit"] for e in driver2.notes
              if e["event"] == "abort" and e["reason"] == "candidates_failed"}
    assert failed == {"g3", "g5"}


def test_group_oversampling_commits_the_first_finishers_and_aborts_the_rest():
    def script(request, version):
        cand = int(request.request_id.split("-c")[1].split("-")[0])
        return Plan(0.1 * (cand + 1), [cand % 10, 12], "stop")  # candidate i takes 0.1*(i+1)

    driver, rollout, trainer, clock = make(script=script, group_size=3, candidates=5, steps=4,
                                           max_staleness=0, filter_zero_variance=False)
    run(driver, clock)
    for b in trainer.batches:
        for g in b.groups:
            assert [s.token_ids[0] for s in g.samples] == [0, 1, 2]  # the three fastest
    aborted = {rid for _, rid in rollout.aborted}
    first = trainer.batches[0].groups[0].unit_id
    assert {f"{first}-c3-s0", f"{first}-c4-s0"} <= aborted


def test_zero_variance_groups_are_filtered_not_trained():
    # Completions of length 3 score 1, others 0. Every third group answers with 2 tokens on
    # every candidate (all rewards 0: no gradient); the others alternate 2 and 3 tokens.
    def script(request, version):
        unit = int(request.request_id[1:].split("-")[0])
        cand = int(request.request_id.split("-c")[1].split("-")[0])
        n = 2 if unit % 3 == 0 else 2 + cand % 2
        return Plan(0.1, [1] * n + [12], "stop")

    driver, _, trainer, clock = make(script=script, reward=lambda p, c: float(len(c) == 3),
                                           steps=4)
    run(driver, clock)
    assert driver.log_counts.counts()["filtered"] > 0
    filtered = {e["unit"] for e in driver.notes if e["event"] == "filter"}
    # Rewards are known before placement, so the reservation is dropped, never occupied.
    assert all(driver.controller.unit_state(u) is UnitState.ABORTED for u in filtered)
    occupied = {e.unit_id for e in driver.controller.events if e.op == "occupy"}
    assert filtered and not filtered & occupied
    # The check can fail: with the filter off, all-equal groups do reach the trainer.
    driver2, _, trainer2, clock2 = make(script=script, steps=4, filter_zero_variance=False,
                                        reward=lambda p, c: float(len(c) == 3))
    run(driver2, clock2)
    assert any(len(set(g.rewards)) == 1 for b in trainer2.batches for g in b.groups)
    assert not any(len(set(g.rewards)) == 1 for b in trainer.batches for g in b.groups)


def test_batch_oversampling_stops_reservations_the_controller_closes():
    driver, rollout, trainer, clock = make(script=random_script(2, long_tail=0.2), max_staleness=1,
                                           capacity=6, steps=10)
    run(driver, clock)
    dropped = [e["unit"] for e in driver.notes
               if e["event"] == "abort" and e["reason"] == "dropped_by_controller"]
    assert dropped  # the closing rule fired and the driver stopped those groups
    for u in dropped:
        assert driver.controller.unit_state(u) is UnitState.ABORTED
        assert not [rid for rid in rollout.active if rid.startswith(f"{u}-")]
    assert token_lag_violations(trainer, 1) == []


def test_a_dead_engine_stops_the_run_with_its_error():
    special = {"g4-c2": Plan(0.05, [], error=RolloutDead("engine gone"))}
    driver, *_, clock = make(script=fixed_script(0.1, special=special), steps=10)
    with pytest.raises(RolloutDead, match="engine gone"):
        run(driver, clock)
    driver.controller.check()  # shutdown left the controller consistent


def test_idle_fractions_and_token_counts_are_accounted():
    driver, _, trainer, clock = make(script=fixed_script(0.1, n_tokens=3), max_staleness=0,
                                           steps=5, train_s=0.4)
    records = run(driver, clock)
    last = records[-1]
    # eta=0: generation (0.1 s) and training (0.4 s) alternate, so the engine idles ~80 %
    # of the time and the trainer ~20 %.
    assert last.rollout_idle == pytest.approx(0.8, abs=0.05)
    assert last.trainer_idle == pytest.approx(0.2, abs=0.05)
    assert last.tokens_generated == sum(len(s.token_ids) for b in trainer.batches
                                        for g in b.groups for s in g.samples)


@pytest.mark.parametrize("reward, message", [
    (lambda p, c: 1.0, "groups in a row were dropped"),  # constant: everything is filtered
    (lambda p, c: 1 / 0, "last error: reward function: ZeroDivisionError"),
])
def test_a_run_that_can_never_train_stops_with_a_clear_error(reward, message):
    driver, rollout, _, clock = make(reward=reward, steps=5, max_dropped_in_a_row=30)
    with pytest.raises(RuntimeError, match=message):
        run(driver, clock)
    driver.controller.check()
    assert rollout.active == []


def test_a_stuck_timeout_shorter_than_every_group_backs_off_and_the_run_trains():
    # Every request takes 3 s, the STUCK timeout is 1 s: each release re-admits groups that
    # cannot finish before the next. Before, release and re-admission repeated until the
    # progress detector stopped the run (500 groups dropped in a row); now a release with no
    # placement since the previous one doubles the next wait (reserve_occupy.stuck).
    driver, _, trainer, clock = make(script=fixed_script(3.0), max_staleness=0, batch_size=2,
                                     group_size=2, steps=3, stuck_s=1.0)
    run(driver, clock)
    assert len(trainer.batches) == 3
    released = [e["t"] for e in driver.notes if e["event"] == "release_stuck"]
    gaps = [b - a for a, b in zip(released, released[1:])]
    assert gaps[:2] == [pytest.approx(1.0), pytest.approx(2.0)]  # 1 s, then doubled


def test_fruitless_releases_escalate_to_units_outside_the_head():
    # eta=1, every request 20 s; g0 and g1 are reserved into the next buffer (reserve fills
    # the newest buffer first), and g0 hangs. Releases of the head at 1, 2, 4 and 8 s follow
    # no placement (each waits twice as long as the one before); from the third fruitless one
    # (8 s) a release also aborts the units in flight since before the previous release,
    # wherever their buffer: g0 and g1. A hung unit cannot hold its place for good.
    special = {"g0-": Plan(math.inf, [1, 2, 3])}
    driver, rollout, trainer, clock = make(script=fixed_script(20.0, special=special),
                                           max_staleness=1, batch_size=2, group_size=2, steps=3,
                                           stuck_s=1.0)
    run(driver, clock)
    released = [e["t"] for e in driver.notes if e["event"] == "release_stuck"]
    assert released[:4] == [pytest.approx(t) for t in (1.0, 2.0, 4.0, 8.0)]
    escalated = [(e["unit"], e["t"]) for e in driver.notes
                 if e["event"] == "abort" and e.get("reason") == "stuck_escalation"]
    assert escalated[:2] == [("g0", pytest.approx(8.0)), ("g1", pytest.approx(8.0))]
    assert len(trainer.batches) == 3 and rollout.active == []
