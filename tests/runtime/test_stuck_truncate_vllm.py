"""``staleness.stuck_action=truncate`` end to end on CPU with real vLLM (the session's engine,
``conftest.engine``) and the torch GRPO trainer: one candidate is a straggler that the real
engine decodes one token at a time (a 1-token request per token, every 0.3 s: a generation
slow enough to be STUCK, whatever this CPU's speed); the STUCK timeout truncates its group, the
straggler returns the tokens the engine decoded up to then, the group trains with them as its
sample (rewarded on that text), and the run finishes with the truncation recorded
(``metrics.jsonl``, ``driver_notes.jsonl``) and an ``events.jsonl`` that strict-checks."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from reserve_occupy import UnitState
from runtime.cli import main
from runtime.recovery.journal import read_log
from runtime.rollout.base import Segment

from . import test_vllm_train as base

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]

TOKEN_S = 0.3  # the straggler's pace: one real token per this many seconds


class Straggler(base.HangingRollout):
    """The real engine, except that request ``hang`` is decoded one token per request, every
    ``TOKEN_S``, until the driver aborts it (it then returns what it decoded, as an engine's
    abort does) or it reaches its ``max_tokens``."""

    def __init__(self, inner, hang: str) -> None:
        super().__init__(inner, hang)
        self.decoded: list[int] = []

    async def generate(self, request):
        if request.request_id != self.hang:
            return await self.inner.generate(request)
        self.hung = True
        seg = Segment(finish_reason="length")
        for k in range(request.max_tokens):
            step = await self.inner.generate(dataclasses.replace(
                request, request_id=f"{request.request_id}-t{k}",
                prompt_ids=list(request.prompt_ids) + seg.token_ids, max_tokens=1,
                seed=None if request.seed is None else request.seed + k, ignore_eos=True))
            seg.token_ids += step.token_ids
            seg.logprobs += step.logprobs
            self.decoded = list(seg.token_ids)
            try:
                await asyncio.wait_for(self._released.wait(), TOKEN_S)
            except TimeoutError:
                continue
            seg.finish_reason = "abort"
            break
        return seg


async def test_truncate_trains_the_stragglers_partial_output(engine, tiny_model, tmp_path):
    cfg = base._cfg(tmp_path, **{"staleness.max_staleness": 0, "staleness.batch_size": 2,
                                 "staleness.group_size": 2, "run.steps": 3,
                                 "rollout.max_tokens": 48, "timeouts.stuck_s": 1.5,
                                 "staleness.stuck_action": "truncate",
                                 "staleness.filter_zero_variance": False})
    straggler = Straggler(engine, "g1-c0-s0")
    result = await asyncio.wait_for(base._train(cfg, straggler, tiny_model, tmp_path,
                                                reward=lambda p, c: float(len(c) % 2),
                                                hook=base._record_batches), 120)
    driver = result.driver
    assert straggler.hung and straggler._released.is_set()  # the driver told it to stop
    released = [e for e in driver.notes if e["event"] == "release_stuck"]
    assert released and released[0]["truncated"] == ["g1"]
    assert driver.controller.unit_state("g1") is UnitState.CONSUMED
    # the group trained, its first candidate with exactly the tokens the engine decoded
    g1 = next(g for b in driver.seen_batches for g in b.groups if g.unit_id == "g1")
    cut = next(s for s in g1.samples if s.candidate == 0)
    assert cut.finish_reason == "truncated"
    assert 0 < len(cut.token_ids) < 48 and list(cut.token_ids) == straggler.decoded
    assert len(cut.logprobs) == len(cut.token_ids) and set(cut.versions) == {0}
    tok = driver.rollout.tokenizer
    ids = list(cut.token_ids)
    text = tok.decode(ids[:-1] if ids[-1] == tok.eos_token_id else ids)  # as the driver does
    assert cut.reward == float(len(text) % 2)  # rewarded on the truncated text
    # recorded: the metrics' count, the note with what it kept
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[-1]["truncated"] == 1
    notes = [json.loads(line) for line in
             (tmp_path / "driver_notes.jsonl").read_text().splitlines()]
    note = next(n for n in notes if n["event"] == "truncate")
    assert note["unit"] == "g1" and note["samples"] == [
        {"candidate": 0, "tokens_kept": len(cut.token_ids),
         "at_most_cut": 48 - len(cut.token_ids)}]
    assert read_log(tmp_path / "events.jsonl").config.stuck_action == "truncate"
    assert main(["check-trace", str(tmp_path / "events.jsonl")]) == 0
    base._log_replays(tmp_path, driver.controller)
    assert engine.engine.get_num_unfinished_requests() == 0
