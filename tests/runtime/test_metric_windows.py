"""Tests that average a metric over metrics rows read only the rows that have it: a row's
``reward`` is None when no sample completed since the previous step (runtime/metrics.py), which
an asynchronous run does under load. ``helpers.window_reward`` is the windowed training reward
the learning tests assert on."""

from __future__ import annotations

from statistics import fmean

import pytest

from runtime.metrics import step_row
from runtime.records import StepRecord

from .helpers import window_reward


def _record(step: int, rollout_rewards: list[float]) -> StepRecord:
    return StepRecord(step=step, version=step, time_s=1.0 + step, rewards=[1.0],
                      rollout_rewards=rollout_rewards, staleness=[0], token_version_lag=[0],
                      train={}, step_s=1.0, train_s=0.5, sync_s=0.1, wait_s=0.0,
                      tokens_generated=10 * (step + 1), tokens_trained=5 * (step + 1),
                      trainer_idle=0.1, rollout_idle=0.1, counts={})


def test_a_step_with_nothing_completed_is_left_out_of_the_window_reward():
    records = [_record(0, [0.0, 1.0, 1.0, 1.0]), _record(1, []), _record(2, [0.0, 0.0])]
    rows = [step_row(r, p) for r, p in zip(records, [None, *records])]
    assert rows[1]["reward"] is None and rows[1]["samples_completed"] == 0
    # What the learning tests did: fmean over the rows' rewards (TypeError on the None row).
    with pytest.raises(TypeError):
        fmean(r["reward"] for r in rows)
    # The mean over the six samples completed in the window, each counted once.
    assert window_reward(rows) == pytest.approx(3 / 6)
    with pytest.raises(AssertionError, match=r"no sample completed in steps \[1\]"):
        window_reward(rows[1:2])
