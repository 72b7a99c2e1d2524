"""A peer's rule that admits groups or sets its timer inside ``consume`` and returns no batch
(AReaL's ``prepare_batch`` round) must wake the driver's admission and watchdog: otherwise a run
whose admission loop was already waiting when the trainer consumed never moves again."""

from __future__ import annotations

import asyncio

from runtime.driver import Driver
from runtime.rollout.fake import random_script

from .helpers import make


class _TrainerLast(Driver):
    """The driver with its trainer loop starting after admission is already waiting: the task
    order the run must not depend on (normally the trainer task happens to run first)."""

    async def _trainer_loop(self) -> None:
        for _ in range(5):  # admission reserves (nothing: AReaL has no input yet) and waits
            await asyncio.sleep(0)
        await super()._trainer_loop()


def test_areal_runs_when_admission_waits_before_the_first_consume():
    # Before the fix this deadlocked (VirtualClock: every task blocked): the first consume
    # admitted a round of groups and set the wait timer, and nothing woke admission.
    driver, _, trainer, clock = make(script=random_script(3, per_token_s=0.1), max_staleness=1,
                                     steps=3, policy="areal", train_s=0.2)
    driver.__class__ = _TrainerLast
    clock.run(driver.run())
    assert len(trainer.batches) == 3


def test_an_empty_consume_wakes_admission_only_when_the_rule_moved():
    driver, _, _, clock = make(script=random_script(3), max_staleness=1, steps=3, policy="areal")
    ctl = driver.controller

    async def scenario():
        change = driver._change
        assert ctl.consume() is None  # the first prepare_batch round: admits, sets the timer
        assert len(ctl._waiting) > 0 and ctl.timer < float("inf")
        driver._after_peer_consume()
        assert change.is_set()  # admission and the watchdog are woken
        change = driver._change
        assert ctl.consume() is None  # still waiting, nothing admitted, the same timer
        driver._after_peer_consume()
        assert not change.is_set()  # no wake-up: the trainer's loop would spin on it

    clock.run(scenario())
