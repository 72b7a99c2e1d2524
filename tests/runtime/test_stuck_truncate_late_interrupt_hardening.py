"""Ctrl-C (and SIGTERM) while an orderly stop waits for the reward of a truncating STUCK
release's units (``staleness.stuck_action=truncate``, docs/runtime.md "The STUCK release's
truncate"). The run stops for another reason first (here a failure: the reward returns a
value that is not a number, which stops the run), and that stop waits for the truncated units'
reward (at most ``reward.timeout_s``); the signal comes during that wait. Before, the
cancellation landed in ``Driver._shutdown``'s wait and propagated from there before any line
was written: the truncated units stayed FINISHED in the log since the release, without their
trajectory files and without a ``filter`` line, the crash's case rather than what Ctrl-C
promises. Now the interrupted wait filters them with reason ``shutdown`` as an interrupted
stop does (test_stuck_truncate_interrupt_hardening.py, where the signal comes before any
other stop), and ``--resume`` re-admits their prompts, each once.

(The end of the steps cannot be that stop: the trainer does not consume while a truncated unit
is unwritten, so the last step never trains with one pending, and no release comes after it.)

Through the real CLI with the fake engine; the reward a ``module:function`` in the test's
directory. Once the run has trained a step it takes the first prompt it is called on as the
one to fail: it waits until the log shows a STUCK release (which truncates that group, its
reward being computed, and the others of the head buffer) and returns ``"not a number"`` for
its completions, which stops the run; on any other prompt it hangs (``time.sleep(3600)``;
``late`` marks it) until the test creates ``released`` for the resumed run. Nothing is timed:
the signal goes once the log shows the stop begun (its ``abort`` lines with reason
``shutdown``) while the reward of a unit the release truncated hangs, and what is asserted is
the log, the files and the processes after."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from reserve_occupy import UnitState
from runtime.rollout.base import RolloutDead
from runtime.rollout.fake import Plan

from .helpers import fixed_script, make
from .test_reward_untrusted import PREFIX, _cmd, _module, _no_worker_left
from .test_stuck_truncate import _straggler, _strict_check
from .test_stuck_truncate_interrupt_hardening import (TRUNCATE, _records, _units_of,
                                                      check_then_resume, signal_when)

FAIL_THEN_HANG = """
    import os, time

    def reward(prompt, completion):
        metrics = os.path.join("out", "metrics.jsonl")
        if (os.path.exists("released") or not os.path.exists(metrics)
                or os.path.getsize(metrics) == 0):
            return float(len(completion) % 2)
        if os.path.exists("failing") and open("failing").read() != repr(prompt):
            open("late", "a").close()
            time.sleep(3600)
            open("returned", "a").close()  # never reached: the worker is ended first
        with open("failing", "w") as f:
            f.write(repr(prompt))
        while "release_stuck" not in open(os.path.join("out", "events.jsonl")).read():
            time.sleep(0.05)
        return "not a number"  # stops the run
"""


def _stop_waits(tmp_path: Path) -> set[str]:
    """The units of a truncating release while the run's stop waits for their reward: the
    stop has begun (a line with reason ``shutdown`` after the release), no line after the
    release names them, no trajectory file of theirs, and a reward hangs. Empty if not
    (yet)."""
    if not (tmp_path / "late").exists():
        return set()
    out = tmp_path / "out"
    records = _records(out)
    for k, r in enumerate(records):
        if r["op"] != "release_stuck":
            continue
        cut = {m["unit"] for m in r["moves"] if m["reason"] == "truncate"}
        after = records[k + 1:]
        later = set().union(*(_units_of(x) for x in after))
        if (cut and not cut & later
                and any(x.get("meta", {}).get("reason") == "shutdown" for x in after)
                and not any((out / "trajectories" / f"s-{u}.json").exists() for u in cut)):
            return cut
    return set()


@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated")])
def test_an_interrupt_while_the_stop_waits_for_truncated_units_filters_them(
        tmp_path, sig, status, word):
    mod = _module(tmp_path, FAIL_THEN_HANG)
    cmd = _cmd(tmp_path, f"{mod}:reward", *TRUNCATE)
    steps = cmd.index("--steps")
    cmd[steps + 1] = "4"  # 3 steps after the first: the reward fails before the run can end
    cut, returncode, err = signal_when(tmp_path, cmd, _stop_waits, sig)
    assert returncode == status, err
    assert f"{PREFIX} {word}; continue the run with --resume" in err and "Traceback" not in err
    assert not (tmp_path / "returned").exists()
    _no_worker_left(tmp_path)
    out = tmp_path / "out"
    records = _records(out)
    # the orderly stop had begun (its aborts come first), then the signal filtered the units
    first_stop = next(k for k, r in enumerate(records)
                      if r.get("meta", {}).get("reason") == "shutdown")
    assert records[first_stop]["op"] == "abort" and records[first_stop]["unit"] not in cut
    for unit in cut:  # filtered with reason shutdown, the last word on it; no file
        named = [k for k, r in enumerate(records) if unit in _units_of(r)]
        last = records[named[-1]]
        assert (last["op"], last.get("unit"), last.get("meta")) \
            == ("filter", unit, {"reason": "shutdown"}), last
        assert named[-1] > first_stop
        assert not (out / "trajectories" / f"s-{unit}.json").exists()
    check_then_resume(tmp_path, cmd, records, cut, resume=sig == signal.SIGINT)


# ---------------------------------------------------------------- the driver, twice cancelled --


class _HangingScore:
    """An in-process reward with an async ``score`` (``tasks.base.score_group`` awaits it):
    the straggler's truncated group (its answer starts "98") hangs once the run's stop has
    begun, and then cancels the run itself, as a Ctrl-C during that wait does; its scoring's
    cancellation cancels the run again (a second Ctrl-C, which the CLI itself would ignore:
    another caller of the driver may not) and takes a few turns of the loop to end, cancelled
    again meanwhile (as a worker being ended). Every other group is scored by parity."""

    def __init__(self, driver_of):
        self.driver_of, self.run_task, self.scoring = driver_of, None, None
        self.ended = False

    async def score(self, prompt, completions):
        if not completions[0].startswith("98") and not completions[1].startswith("98"):
            return [float(len(c) % 2) for c in completions]
        driver = self.driver_of()
        self.scoring = asyncio.current_task()
        try:
            while not driver._stopping:  # the run has not stopped (yet): its reward is slow
                await driver.clock.sleep(1.0)
            self.run_task.cancel()  # the first Ctrl-C, while the stop waits for this reward
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            self.run_task.cancel()  # the second, while the scoring ends
            for _ in range(5):
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    pass
            self.ended = True
            raise


def test_a_second_cancellation_while_the_stop_settles_leaves_the_log_whole():
    """The scripted engine and the virtual clock: g1 straggles and is truncated by the STUCK
    release at 35 s; at 60 s the engine dies (``RolloutDead`` from the request of g5, in the
    next buffer), which stops the run, and the stop waits for g1's reward; the reward cancels
    the run (then again while its scoring ends). The run ends cancelled, g1 filtered with
    reason ``shutdown`` after the stop's aborts, its scoring ended before ``run()`` returned,
    nothing left running, and the log strict-checks. On the old code the cancellation
    propagated from the stop's wait: g1 stayed in ``_truncating``, its last event the
    release."""
    driver = None
    reward = _HangingScore(lambda: driver)
    dead = Plan(60.0, [1], error=RolloutDead("the engine is gone"))
    slow = _straggler("g1")["g1-c0-s0"]  # every segment of it: a weight sync resumes it
    driver, _, trainer, clock = make(
        script=fixed_script(0.1, special={"g1-c0": slow, "g5-c0": dead}),
        reward=reward, max_staleness=1, batch_size=2, group_size=2, steps=3, max_tokens=64,
        stuck_s=35.0, stuck_action="truncate")

    async def main():
        reward.run_task = asyncio.ensure_future(driver.run())
        return await reward.run_task

    with pytest.raises(asyncio.CancelledError):
        clock.run(main())
    assert reward.scoring is not None and reward.scoring.done() and reward.ended
    assert not driver._background and not driver._truncating
    events = driver.controller.events
    ops = [(e.op, e.unit_id, driver.controller.metas.get(e.seq)) for e in events]
    release = next(k for k, (op, *_) in enumerate(ops) if op == "release_stuck")
    assert "g1" in {m.unit_id for m in events[release].moves if m.reason == "truncate"}
    stop = [k for k, (_, _, meta) in enumerate(ops) if meta == {"reason": "shutdown"}]
    assert ops[stop[0]][:2] == ("abort", "g5")  # the stop began before the cancellation
    last_g1 = max(k for k, e in enumerate(events)
                  if e.unit_id == "g1" or "g1" in {m.unit_id for m in e.moves})
    assert ops[last_g1] == ("filter", "g1", {"reason": "shutdown"}) and last_g1 > stop[0]
    assert "g1" not in {g.unit_id for b in trainer.batches for g in b.groups}
    _strict_check(driver)


def test_a_cancellation_while_the_runs_loops_end_still_aborts_the_groups_in_flight():
    """The engine dies (``RolloutDead`` from g3's request at 5 s) while the trainer trains
    the first step (10 s); the stop cancels the trainer's loop, and the step's cancellation
    cancels the run (as a Ctrl-C that comes while the driver's loops end). Before, that
    cancellation propagated from ``run()``'s wait for its loops and skipped the stop: g3 was
    left in flight in the log, without its ``abort`` line. Now the stop runs as an interrupted
    one: g3 is aborted with reason ``shutdown``, then the cancellation propagates."""
    dead = Plan(5.0, [1], error=RolloutDead("the engine is gone"))
    driver, _, trainer, clock = make(
        script=fixed_script(0.1, special={"g3-c0": dead}), train_s=10.0, max_staleness=1,
        batch_size=2, group_size=2, steps=3, max_tokens=64)
    box: dict = {}
    train_step = trainer.train_step

    async def cancelled_as_it_ends(batch):
        try:
            return await train_step(batch)
        except asyncio.CancelledError:
            box["cancelled"] = True
            box["run"].cancel()  # a Ctrl-C while the run's loops end
            raise

    trainer.train_step = cancelled_as_it_ends

    async def main():
        box["run"] = asyncio.ensure_future(driver.run())
        return await box["run"]

    with pytest.raises(asyncio.CancelledError):
        clock.run(main())
    assert box.get("cancelled") and not driver._background
    events = driver.controller.events
    reserved = [e.unit_id for e in events if e.op == "reserve"]
    in_flight = [u for u in reserved if driver.controller.unit_state(u) is UnitState.IN_FLIGHT]
    assert not in_flight, in_flight
    last = events[-1]
    assert (last.op, last.unit_id, driver.controller.metas.get(last.seq)) \
        == ("abort", "g3", {"reason": "shutdown"})
    _strict_check(driver)
