"""``staleness.stuck_action=retry`` end to end on CPU with real vLLM (the session's engine,
``conftest.engine``): a hung request holds the head buffer STUCK; the STUCK timeout releases its
group, the real engine is told to stop it, the same prompt is generated again as a new group and
trains, and the run's ``events.jsonl`` (its header naming the option) replays on the core."""

from __future__ import annotations

import asyncio

import pytest

from reserve_occupy import UnitState
from runtime.recovery.journal import read_log

from . import test_vllm_train as base

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]


class Recording(base.HangingRollout):
    """The hanging real engine, noting each request it completed (not aborted)."""

    def __init__(self, inner, hang: str) -> None:
        super().__init__(inner, hang)
        self.completed: list[str] = []

    async def generate(self, request):
        segment = await super().generate(request)
        if segment.finish_reason != "abort":
            self.completed.append(request.request_id)
        return segment


async def test_retry_releases_the_hung_group_and_its_prompt_trains_again(engine, tiny_model,
                                                                         tmp_path):
    cfg = base._cfg(tmp_path, **{"staleness.max_staleness": 0, "staleness.batch_size": 2,
                                 "staleness.group_size": 2, "run.steps": 3,
                                 "timeouts.stuck_s": 1.5, "staleness.stuck_action": "retry",
                                 "staleness.filter_zero_variance": False,
                                 "recovery.enabled": False})
    hanging = Recording(engine, "g1-c0-s0")
    result = await asyncio.wait_for(base._train(cfg, hanging, tiny_model, tmp_path,
                                                reward=lambda p, c: float(len(c) % 2)), 120)
    driver = result.driver
    assert hanging.hung and hanging._released.is_set()  # the engine was told to stop it
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert released and released[0]["units"] == ["g1"] and released[0].get("retry")
    assert driver.controller.unit_state("g1") is UnitState.ABORTED
    metas = driver.controller.metas
    meta = {e.unit_id: metas.get(e.seq, {}) for e in driver.controller.events
            if e.op == "reserve"}
    again = [u for u, m in meta.items() if m.get("readmit_of") == "g1"]
    assert len(again) == 1 and meta[again[0]]["prompt"] == meta["g1"]["prompt"]
    # the real engine generated the retried prompt to the end, and the controller placed it
    # (no zero-variance filter here; the run's 3 steps may end before its buffer trains)
    assert any(rid.startswith(f"{again[0]}-c") for rid in hanging.completed)
    assert any(e.op == "occupy" and e.unit_id == again[0] for e in driver.controller.events)
    assert len(result.rows) == 3
    contents = read_log(tmp_path / "events.jsonl")
    assert contents.config.stuck_action == "retry"
    base._log_replays(tmp_path, driver.controller, durable=False)  # recovery off: kept whole
    assert engine.engine.get_num_unfinished_requests() == 0
