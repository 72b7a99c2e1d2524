"""A simulation of a real-engine run simulates each peer's rule with the options the runtime runs
it with (``runtime.peers.rule_options``): verl at ``parameter_sync_step`` 1 (colocate_async, the
runtime's), not the simulator's default 4 (separate_async). bench/calibrate.py's
``simulate_row`` and bench/workload_predict.py's ``predict`` both build their RunSpec with it;
the spec each passes to the simulator is captured here, nothing is simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.peers import make_rule, rule_options

from .helpers import load_bench


def _fit() -> dict:
    """The committed calibration's fitted terms (any complete fit does: nothing is run)."""
    path = Path(__file__).resolve().parents[2] / "docs/results/calibration.json"
    return json.loads(path.read_text())["fit"]


class _Stop(Exception):
    pass


def _captured(monkeypatch) -> list:
    import reserve_occupy_sim.model.runner as runner

    specs: list = []

    def fake(spec, wl, cost):
        specs.append(spec)
        raise _Stop

    monkeypatch.setattr(runner, "simulate", fake)
    return specs


def test_the_runtime_s_rule_is_built_from_rule_options():
    assert rule_options("verl_drop") == {"parameter_sync_step": 1}
    assert make_rule("verl_drop", 1).sync_step == 1 and make_rule("verl_wait", 1).sync_step == 1
    assert rule_options("nemo_in_order") == {}


@pytest.mark.parametrize("policy", ["verl_drop", "verl_wait", "nemo_in_order"])
def test_calibrate_simulates_a_peer_with_the_runtime_s_options(monkeypatch, policy):
    calibrate = load_bench("calibrate")
    specs = _captured(monkeypatch)
    fit = _fit()
    run = {"policy": policy, "eta": 1, "streaming": False, "refit": "keep", "steps": 4}
    with pytest.raises(_Stop):
        calibrate.simulate_row(run, fit, wl=None)
    assert dict(specs[0].options) == rule_options(policy)


@pytest.mark.parametrize("filter_at", ["sample", "finish"])
def test_workload_predict_simulates_verl_with_the_runtime_s_options(monkeypatch, filter_at):
    predict = load_bench("workload_predict")
    specs = _captured(monkeypatch)
    fit = _fit()
    w = {"batch_size": 4, "group_size": 4, "steps": 4}
    with pytest.raises(_Stop):
        predict.simulate(fit, None, w, "verl_drop", False, "keep", 1, verl_filter_at=filter_at)
    want = {**rule_options("verl_drop"), **({"filter_at": "finish"} if filter_at == "finish"
                                             else {})}
    assert dict(specs[0].options) == want
