"""A durable run's controller forgets the events its counts have read, once a step: its log
lives in ``events.jsonl`` (written line by line before the operation is acknowledged), so memory
holds only what came after the last step instead of about a kilobyte per unit for the run's life.
Nothing is lost: the file replays to the controller's state, the summary's counts (from the file)
equal the last step's (from memory), and a run that writes its log at the end (recovery off)
keeps it all.

The runs: the session's own path (``runtime.session.run_training``) with the fake engine and the
real GRPO trainer on the tiny model, in-process, a few seconds each."""

from __future__ import annotations

import json

import pytest

from reserve_occupy import EventsForgotten, replay
from reserve_occupy.trace import parse_header, parse_record
from runtime.config import load_config
from runtime.data import load_prompts
from runtime.session import run_training
from runtime.tasks.base import load_reward

STEPS = 5


async def _run(tmp_path, tiny_model, **over):
    cfg = load_config(None, {
        "rollout.backend": "fake", "run.progress": False, "run.plot": False,
        "run.eval_prompts": 0, "run.output_dir": str(tmp_path), "run.steps": STEPS,
        "staleness.batch_size": 4, "staleness.group_size": 2, "staleness.max_staleness": 1,
        **over})
    forgot: list[int] = []

    def spy(driver):
        forget = driver.controller.forget_events

        def record(before):
            forgot.append(before)
            return forget(before)

        driver.controller.forget_events = record

    reward = load_reward(cfg.reward.name, **cfg.reward.options)
    result = await run_training(cfg, tiny_model, load_prompts(cfg.data.path), reward, tmp_path,
                                log=lambda _: None, driver_hook=spy)
    return cfg, result, forgot


def _file_events(path):
    lines = path.read_text().splitlines()
    header = parse_header(json.loads(lines[0]))
    return header, [parse_record(json.loads(x), i + 2).event for i, x in enumerate(lines[1:])]


@pytest.mark.slow
async def test_a_durable_run_forgets_what_it_counted_and_loses_nothing(tmp_path, tiny_model):
    cfg, result, forgot = await _run(tmp_path, tiny_model)
    c = result.driver.controller
    # once a step, each time everything counted so far
    assert len(forgot) == STEPS and forgot == sorted(forgot) and forgot[0] > 0
    assert c.first_event == forgot[-1] > 0
    with pytest.raises(EventsForgotten):
        c.events  # noqa: B018
    assert all(seq >= forgot[-1] for seq in c.metas)  # the metas went with their events
    # the file is the whole log: it replays to the controller's state, event for event
    header, events = _file_events(tmp_path / "events.jsonl")
    assert [e.seq for e in events] == list(range(c.event_count))
    assert events[c.first_event:] == list(c.events_since(c.first_event))
    assert replay(header.config, events).snapshot() == c.snapshot()
    # the summary's counts (read from the file) are the last step's (counted from memory)
    summary = json.loads((tmp_path / "summary.json").read_text())
    last = result.rows[-1]
    for key in ("steps", "trained", "samples_trained", "tokens_trained"):
        assert summary[key] == last[key], key
    assert summary["steps"] == STEPS


@pytest.mark.slow
async def test_a_run_that_writes_its_log_at_the_end_keeps_it(tmp_path, tiny_model):
    cfg, result, forgot = await _run(tmp_path, tiny_model, **{"recovery.enabled": False})
    c = result.driver.controller
    assert forgot == [] and c.first_event == 0
    _, events = _file_events(tmp_path / "events.jsonl")
    assert events == list(c.events)


@pytest.mark.slow
async def test_a_peers_controller_forgets_as_the_core_does(tmp_path, tiny_model):
    cfg, result, forgot = await _run(tmp_path, tiny_model, **{
        "recovery.enabled": False, "staleness.policy": "nemo_in_order"})
    c = result.driver.controller
    assert forgot == []
    whole, metas = list(c.events), dict(c.metas)
    count = c.event_count
    assert count == len(whole) > 10 and metas
    before = count // 2
    with pytest.raises(ValueError, match="forget_events takes an event number from 0"):
        c.forget_events(count + 1)
    assert c.events == whole and c.metas == metas  # nothing dropped
    c.forget_events(before)
    with pytest.raises(EventsForgotten):
        c.events  # noqa: B018
    with pytest.raises(EventsForgotten):
        c.events_since(before - 1)
    assert list(c.events_since(before)) == whole[before:] and c.event_count == count
    assert c.metas == {k: v for k, v in metas.items() if k >= before}
    assert c.last_event == whole[-1]
