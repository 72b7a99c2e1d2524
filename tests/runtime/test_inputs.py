"""Bad input is refused before anything starts, with one message naming the file and field:
the YAML config, the prompt files (JSONL/Parquet), the reward name; and the shipped defaults
agree with each other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from runtime.config import ConfigFileError, TrainConfig, load_config
from runtime.data import DataError, load_prompts
from runtime.tasks.arithmetic import DATA_FILE, ExactAnswerReward, all_problems
from runtime.tasks.base import Prompt, RewardError, load_reward

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_config_file_is_the_embedded_default():
    assert load_config(ROOT / "configs" / "demo.yaml") == TrainConfig()
    load_config(ROOT / "configs" / "example.yaml")  # the annotated example is valid


def _write(tmp_path, data) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("data, expected", [
    ({"rollout": {"temperature": -1}},
     "rollout.temperature: Input should be greater than 0 (got -1)"),
    ({"staleness": {"eta": "two"}}, "staleness.eta: Input should be a valid integer"),
    ({"staleness": {"group_size": 8, "candidates": 4}}, "candidates (4) must be >= group_size"),
    ({"staleness": {"batch_size": 8, "capacity": 4}}, "capacity (4) must be >= batch_size"),
    ({"trainer": {"lrate": 0.1}}, "trainer.lrate: unknown key"),
    ({"model": {"tiny": {"hidden_size": 64, "heads": 4}}}, "hidden_size / heads"),
    ({"runn": {}}, "runn: unknown key"),
    ("[1, 2]", "the top level must be a mapping"),
    ("a: [", "not valid YAML"),
])
def test_invalid_configs_name_the_file_and_the_field(tmp_path, data, expected):
    path = _write(tmp_path, data)
    with pytest.raises(ConfigFileError) as exc:
        load_config(path)
    assert str(exc.value).startswith(str(path))
    assert expected in str(exc.value)


def test_all_errors_are_reported_at_once_and_overrides_apply(tmp_path):
    path = _write(tmp_path, {"rollout": {"temperature": 0}, "staleness": {"eta": -1}})
    with pytest.raises(ConfigFileError) as exc:
        load_config(path)
    assert "rollout.temperature" in str(exc.value) and "staleness.eta" in str(exc.value)
    cfg = load_config(None, {"run.steps": 3, "staleness.eta": 0})
    assert cfg.run.steps == 3 and cfg.driver_settings().eta == 0
    with pytest.raises(ConfigFileError, match="the embedded default"):
        load_config(None, {"run.steps": 0})
    with pytest.raises(ConfigFileError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_shipped_task_file_is_every_single_digit_problem_once():
    prompts = load_prompts()
    assert len(prompts) == 100 == len({p.text for p in prompts})
    assert {(p.text, p.answer) for p in prompts} == {
        (r["prompt"], r["answer"]) for r in all_problems(0)}
    assert DATA_FILE.exists()


def test_jsonl_errors_name_the_line(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "1+1=", "answer": 2}\n\n{"prompt": "2+2="\n')
    with pytest.raises(DataError, match=r"d.jsonl:3: not valid JSON"):
        load_prompts(f)
    f.write_text('{"prompt": "1+1=", "answer": 2}\n{"question": "x", "answer": "1"}\n')
    with pytest.raises(DataError, match=r"d.jsonl:2: field 'prompt' must be a non-empty"):
        load_prompts(f)
    f.write_text('{"prompt": "1+1="}\n')
    with pytest.raises(DataError, match=r"d.jsonl:1: missing field 'answer'"):
        load_prompts(f)
    assert load_prompts(f, answer_field=None)[0].answer is None
    with pytest.raises(DataError, match="no such file"):
        load_prompts(tmp_path / "none.jsonl")


def test_parquet_prompts_load_with_extra_fields(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    f = tmp_path / "d.parquet"
    pq.write_table(pa.table({"q": ["3+4=", "5+5="], "a": [7, 10], "level": [1, 2]}), f)
    prompts = load_prompts(f, prompt_field="q", answer_field="a")
    assert [(p.text, p.answer, p.meta) for p in prompts] == [
        ("3+4=", "7", {"level": 1}), ("5+5=", "10", {"level": 2})]
    pq.write_table(pa.table({"q": ["3+4=", None]}), f)
    with pytest.raises(DataError, match=r"d.parquet row 1: field 'q'"):
        load_prompts(f, prompt_field="q", answer_field=None)


def test_exact_answer_reward():
    r = ExactAnswerReward()
    p = Prompt("7+8=", "15")
    assert r(p, "15") == 1.0 and r(p, " 15 ") == 1.0
    assert r(p, "16") == 0.0 and r(p, "151") == 0.0 and r(p, "15+") == 0.0 and r(p, "") == 0.0
    with pytest.raises(ValueError, match="no reference answer"):
        r(Prompt("7+8="), "15")


def test_rewards_load_by_name_or_import_path():
    assert isinstance(load_reward("exact_answer"), ExactAnswerReward)
    assert load_reward("exact_answer", correct=2.0)(Prompt("1+1=", "2"), "2") == 2.0
    fn = load_reward("json:dumps")  # any importable callable
    assert fn is json.dumps
    with pytest.raises(RewardError, match="cannot import"):
        load_reward("nope.module:f")
    with pytest.raises(RewardError, match="expected a built-in name"):
        load_reward("unknown")
    with pytest.raises(RewardError, match="takes no options"):
        load_reward("json:dumps", x=1)
