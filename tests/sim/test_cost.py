"""Cost presets and user cost files."""

from __future__ import annotations

import json

import pytest

from reserve_occupy_sim.model.cost import PRESETS, CostError, cost_from_dict, load_cost, preset


def test_preset_has_a_derivation_for_every_number():
    m = preset("qwen3-8b-h20")
    assert m.instances == 2 and m.concurrency == 40
    for key in ("floor_s", "step_s", "per_request_s", "per_ctx_token_s", "prefill_per_token_s",
                "train.per_token_s", "train.per_token_sq_s", "train.fixed_s", "train.sync_s"):
        assert key in m.derivation
    # a decode step with 40 requests of 8k context on one H20: tens of milliseconds
    assert 0.02 < m.rollout.step_time(40, 40 * 8000) < 0.04


def test_file_overrides_only_what_it_names(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train": {"sync_s": 10}, "concurrency": 64}))
    m = load_cost(path)
    base = PRESETS["qwen3-8b-h20"]
    assert m.train.sync_s == 10.0 and m.concurrency == 64
    assert m.rollout == base.rollout and m.train.per_token_s == base.train.per_token_s


@pytest.mark.parametrize("data, field", [
    ({"rollout": {"floor_s": -1}}, "rollout.floor_s"),
    ({"rollout": {"flor_s": 1}}, "rollout.flor_s"),
    ({"train": {"pipeline_stages": 0}}, "train.pipeline_stages"),
    ({"train": {"sync_s": "fast"}}, "train.sync_s"),
    ({"instances": 0}, "instances"),
    ({"preset": "h100"}, "preset"),
    ({"bogus": 1}, "bogus"),
])
def test_bad_fields_are_named(data, field):
    with pytest.raises(CostError) as err:
        cost_from_dict(data, base=PRESETS["qwen3-8b-h20"])
    assert err.value.field == field


def test_full_model_without_base_needs_required_fields():
    with pytest.raises(CostError, match="rollout.step_s"):
        cost_from_dict({"rollout": {"floor_s": 0.01}, "train": {"fixed_s": 1, "per_token_s": 0}})


def test_bad_json_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(CostError, match="not valid JSON"):
        load_cost(path)


def test_train_slowdown_is_a_cost_field():
    m = cost_from_dict({"rollout": {"train_slowdown": 1.5}}, base=PRESETS["qwen3-8b-h20"])
    assert m.rollout.train_slowdown == 1.5
    assert PRESETS["qwen3-8b-h20"].rollout.train_slowdown == 0.0
    with pytest.raises(CostError) as err:
        cost_from_dict({"rollout": {"train_slowdown": -1}}, base=PRESETS["qwen3-8b-h20"])
    assert err.value.field == "rollout.train_slowdown"
