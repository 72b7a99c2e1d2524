"""NeMo-RL as shipped on the real vLLM CPU engine: ``staleness.policy=nemo_in_order`` with a
streaming trainer (``trainer.streaming``) and in-flight refit (``rollout.refit=keep``), the
reference row of docs/peers.md, in one short run of the session's engine (tens of seconds)."""

from __future__ import annotations

import pytest

from runtime.cli import main

from .test_vllm_train import _cfg, _train

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]


async def test_nemo_in_order_streams_with_keep_refit_on_vllm(engine, tiny_model, tmp_path):
    cfg = _cfg(tmp_path, **{"staleness.policy": "nemo_in_order", "recovery.enabled": False,
                            "staleness.max_staleness": 1, "trainer.streaming": True,
                            "trainer.chunk_groups": 1, "rollout.refit": "keep",
                            "staleness.filter_zero_variance": False, "run.steps": 4})
    finished = []

    def spy(driver):
        finish = driver.trainer.finish_step

        async def wrapped(batch):
            finished.append(batch)
            return await finish(batch)

        driver.trainer.finish_step = wrapped

    result = await _train(cfg, engine, tiny_model, tmp_path, hook=spy)
    driver = result.driver
    assert type(driver.controller).__name__ == "PeerController"
    assert driver.controller.rule.name == "nemo_in_order" and driver.controller.rule.streams
    assert len(finished) == 4 and driver.trainer.steps == 4  # one optimiser step per step
    for batch in finished:  # within eta by the versions that generated each token
        for g in batch.groups:
            assert batch.version - g.v_traj == g.staleness <= 1
            assert all(min(s.versions) >= g.v_traj for s in g.samples)
    # every unit came by stream and, chunk_groups being 1, trained in a chunk before consume
    events = driver.controller.events
    streamed = [u for e in events if e.op == "stream" for u in e.batch.unit_ids]
    consumed = [u for e in events if e.op == "consume" for u in e.batch.unit_ids]
    assert len(consumed) == len(set(consumed)) == 16 and set(consumed) <= set(streamed)
    assert [r["streamed_units"] for r in result.rows] == [4] * 4
    # the run's event log holds under the rule's own terms
    assert main(["check-trace", str(tmp_path / "events.jsonl"), "--peer", "nemo_in_order"]) == 0
