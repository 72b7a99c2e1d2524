"""The engine pool survives an engine crash; the driver rejects duplicate, late, unknown and
premature completion messages through the controller's typed errors, changing nothing; and a
virtual clock that does not start at 0 no longer spins the driver's watchdog."""

from __future__ import annotations

import asyncio
import math

import pytest

from reserve_occupy import UnitState
from runtime.clock import VirtualClock
from runtime.controller import make_controller
from runtime.driver import Driver
from reserve_occupy_faults.fakes import CrashableRollout, Weights
from runtime.rollout.base import GenerationRequest, RolloutDead
from runtime.rollout.fake import FakeTrainer, Plan, random_script
from runtime.rollout.pool import EngineCrashed, EnginePool
from runtime.records import DriverSettings

from ..runtime.helpers import PROMPTS, fixed_script, make, parity_reward, run


def _req(i: int, n: int = 4) -> GenerationRequest:
    return GenerationRequest(f"r{i}", [1, 2], n)


def test_a_crashed_engine_fails_its_requests_and_comes_back_with_the_current_weights():
    clock = VirtualClock()
    made: list[CrashableRollout] = []

    def engine(i: int) -> CrashableRollout:
        made.append(CrashableRollout(clock, lambda r, v: Plan(1.0, [1, 2, 3]), f"e{i}"))
        return made[-1]

    async def restart(i: int) -> CrashableRollout:
        await clock.sleep(0.5)
        return engine(i)

    async def main():
        pool = EnginePool([engine(0), engine(1)], restart)
        await pool.pause()
        await pool.load_weights(Weights(3, "w3"))
        await pool.resume()
        tasks = [asyncio.ensure_future(pool.generate(_req(i))) for i in range(4)]
        await clock.sleep(0.2)
        victim = made[0]
        victim.crash()  # engine 0 dies with its two requests (r0, r2: least loaded first)
        lost = await asyncio.gather(tasks[0], tasks[2], return_exceptions=True)
        assert all(isinstance(r, EngineCrashed) for r in lost)
        assert pool.live == [1] and pool.crashes == 1
        kept = await asyncio.gather(tasks[1], tasks[3])  # engine 1's requests are unharmed
        assert all(r.token_ids == [1, 2, 3] for r in kept)
        await clock.sleep(1.0)  # the replacement started, loaded v3, and serves
        assert pool.live == [0, 1] and made[2].weights == Weights(3, "w3") and pool.restarts == 1
        assert (await pool.generate(_req(9))).token_ids == [1, 2, 3]
        await pool.close()

    clock.run(main())


def test_settle_waits_for_a_replacement_that_is_still_starting():
    clock = VirtualClock()

    async def restart(i: int) -> CrashableRollout:
        await clock.sleep(5.0)  # a slow start: the run may well end before it
        return CrashableRollout(clock, lambda r, v: Plan(1.0, [7]), f"new{i}")

    async def main():
        victim = CrashableRollout(clock, lambda r, v: Plan(1.0, [1]), "e0")
        pool = EnginePool([victim, CrashableRollout(clock, lambda r, v: Plan(1.0, [1]), "e1")],
                          restart)
        await pool.pause()
        await pool.load_weights(Weights(2, "w2"))
        await pool.resume()
        task = asyncio.ensure_future(pool.generate(_req(0)))
        await clock.sleep(0.1)
        victim.crash()
        with pytest.raises(EngineCrashed):
            await task
        assert pool.engines[0] is None
        await pool.settle()
        assert clock.now() >= 5.0 and pool.live == [0, 1] and pool.restarts == 1
        assert pool.engines[0].weights == Weights(2, "w2")  # type: ignore[union-attr]
        await pool.settle()  # nothing under way: returns at once
        await pool.close()

    clock.run(main())


def test_a_pool_with_no_engine_left_and_no_restart_is_dead():
    clock = VirtualClock()

    async def main():
        engine = CrashableRollout(clock, lambda r, v: Plan(1.0, [1]), "only")
        pool = EnginePool([engine])
        task = asyncio.ensure_future(pool.generate(_req(0)))
        await clock.sleep(0.1)
        engine.crash()
        with pytest.raises(EngineCrashed):
            await task
        with pytest.raises(RolloutDead):
            await pool.generate(_req(1))

    clock.run(main())


def test_an_abort_reaches_a_request_still_waiting_for_an_engine():
    # The only engine is down and its replacement is starting; a request waits for it. The
    # driver aborts that request (its group was dropped). Fault schedule 11728: an abort that
    # misses a request without an engine lets it start on the replacement and hang, and the
    # run can never shut down.
    clock = VirtualClock()
    started: list[str] = []

    def script(request, version):
        started.append(request.request_id)
        return Plan(math.inf, [])

    async def restart(i: int) -> CrashableRollout:
        await clock.sleep(0.5)
        return CrashableRollout(clock, script, "replacement")

    async def main():
        engine = CrashableRollout(clock, script, "e0")
        pool = EnginePool([engine], restart)
        pool.engine_died(0, engine)
        waiting = asyncio.ensure_future(pool.generate(_req(7)))
        await clock.sleep(0.1)
        await pool.abort(["r7"])
        segment = await waiting
        assert segment.finish_reason == "abort" and segment.token_ids == []
        await clock.sleep(1.0)  # the replacement is up: nothing was started on it
        assert pool.live == [0] and started == []
        await pool.close()

    clock.run(main())


def test_the_driver_survives_an_engine_crash_in_its_pool():
    clock = VirtualClock()
    engines = [CrashableRollout(clock, random_script(2), f"e{i}") for i in range(2)]

    async def restart(i: int) -> CrashableRollout:
        await clock.sleep(0.3)
        return CrashableRollout(clock, random_script(2), f"e{i}'")

    pool = EnginePool(engines, restart, weights=Weights(0, "w0"))
    settings = DriverSettings(max_staleness=1, batch_size=3, group_size=3, steps=6, max_tokens=6,
                              check_invariants=True)

    class Trainer(FakeTrainer):
        async def export_weights(self, version):
            return Weights(version, f"w{version}")

    driver = Driver(settings, pool, Trainer(clock), parity_reward, PROMPTS, clock,
                    controller=make_controller(settings, clock.now))

    async def main():
        task = asyncio.ensure_future(driver.run())
        await clock.sleep(0.15)
        engines[0].crash()
        return await task

    records = clock.run(main())
    assert len(records) == 6 and pool.crashes == 1 and pool.restarts == 1
    failed = [e for e in driver.notes if e["event"] == "request_error"]
    assert failed and all("EngineCrashed" in e["error"] for e in failed)
    aborted = {e["unit"] for e in driver.notes if e["event"] == "abort"}
    assert aborted and all(driver.controller.unit_state(u) is UnitState.ABORTED for u in aborted)


def test_completion_messages_are_judged_by_the_controller():
    driver, _, _, clock = make(steps=4)
    seen: dict[str, bool] = {}

    async def main():
        task = asyncio.ensure_future(driver.run())
        await clock.sleep(0.3)
        ctl = driver.controller
        states = {e.unit_id: ctl.unit_state(e.unit_id) for e in ctl.events if e.op == "reserve"}
        pick = {s: next((u for u, st in states.items() if st is s), None) for s in UnitState}
        for label, unit in (("consumed", pick[UnitState.CONSUMED]),
                            ("finished", pick[UnitState.FINISHED]),
                            ("aborted", pick[UnitState.ABORTED]),
                            ("in flight", pick[UnitState.IN_FLIGHT]),
                            ("unknown", "g999999"), ("bad id", 1.5)):
            if unit is None:
                continue
            before, n = ctl.snapshot(), len(ctl.events)
            seen[label] = driver.deliver_completion(unit)
            assert ctl.snapshot() == before and len(ctl.events) == n
        return await task

    clock.run(main())
    assert seen and not any(seen.values())
    errors = {e["error"] for e in driver.notes if e["event"] == "rejected_completion"}
    assert {"UnknownUnit", "IllegalUnitState", "InvalidUnitId"} <= errors
    assert "premature" in errors or "in flight" not in seen
    assert driver.counts["rejected"] == len(seen)


@pytest.mark.timeout(20)
def test_timeouts_fire_on_a_clock_that_does_not_start_at_zero():
    # admitted at 0.32 with a 2.0 s timeout: (0.32 + 2.0) - 0.32 < 2.0 in floating point, so
    # a watchdog comparing the difference never fires and sleeps 0 s for ever.
    hang = fixed_script(0.05, 2, special={"g0-c0": Plan(math.inf, [])})
    driver, _, _, clock = make(script=hang, unit_s=2.0, steps=3)
    clock._now = 0.32
    records = run(driver, clock)
    assert len(records) == 3
    assert any(e["event"] == "abort" and e["unit"] == "g0" and e["reason"] == "timeout"
               for e in driver.notes)
