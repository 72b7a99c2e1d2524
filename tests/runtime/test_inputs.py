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


# Every renamed key with its old name, and the same settings under the names now.
OLD_KEYS = {"staleness": {"eta": 2, "batch_size": 4},
            "trainer": {"streaming": True, "min_chunk_units": 3},
            "run": {"checkpoint_every": 5}, "recovery": {"checkpoint_every": 7}}
NEW_KEYS = {"staleness": {"max_staleness": 2, "batch_size": 4},
            "trainer": {"streaming": True, "chunk_groups": 3},
            "run": {"save_model_every": 5}, "recovery": {"commit_every": 7}}


def test_old_key_names_load_to_the_same_config_with_one_line_each(tmp_path):
    from runtime.config import RENAMED_KEYS

    old_file, new_file = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old_file.write_text(yaml.safe_dump(OLD_KEYS))
    new_file.write_text(yaml.safe_dump(NEW_KEYS))
    lines: list[str] = []
    now = load_config(new_file, warn=lines.append)
    assert lines == [] and now.staleness.max_staleness == 2 and now.recovery.commit_every == 7
    assert load_config(old_file, warn=lines.append) == now
    assert len(lines) == len(RENAMED_KEYS) == 4
    for line, (old, new) in zip(lines, RENAMED_KEYS.items(), strict=True):
        assert line == f"{old_file}: {old} is deprecated, use {new} (the same setting)"
    # as overrides (--set), one line each too; an old name overrides the file's new one
    lines.clear()
    dotted = {f"{section}.{key}": value for section, keys in OLD_KEYS.items()
              for key, value in keys.items()}
    assert load_config(None, dotted, warn=lines.append) == now
    assert len(lines) == 4 and all(x.startswith("override: ") for x in lines)
    assert load_config(new_file, {"staleness.eta": 0},
                       warn=lambda _: None).staleness.max_staleness == 0
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump({"staleness": {"eta": 1, "max_staleness": 2}}))
    with pytest.raises(ConfigFileError, match=r"staleness.eta and staleness.max_staleness are "
                                              r"one setting"):
        load_config(both, warn=lines.append)


def test_train_prints_one_line_per_old_key_and_takes_eta_for_max_staleness(tmp_path, capsys):
    from runtime.cli import main

    old_file = tmp_path / "old.yaml"
    old_file.write_text(yaml.safe_dump(OLD_KEYS))
    out = str(tmp_path / "run")
    assert main(["train", "--config", str(old_file), "--check", "--output-dir", out]) == 0
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 4 and "deprecated" in captured.err
    assert '"max_staleness": 2' in captured.out and '"commit_every": 7' in captured.out
    for flag in ("--eta", "--max-staleness"):
        assert main(["train", flag, "3", "--check", "--output-dir", out]) == 0
        captured = capsys.readouterr()
        assert '"max_staleness": 3' in captured.out and captured.err == ""


def _write(tmp_path, data) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("data, expected", [
    ({"rollout": {"temperature": -1}},
     "rollout.temperature: Input should be greater than 0 (got -1)"),
    ({"staleness": {"max_staleness": "two"}},
     "staleness.max_staleness: Input should be a valid integer"),
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
    path = _write(tmp_path, {"rollout": {"temperature": 0}, "staleness": {"max_staleness": -1}})
    with pytest.raises(ConfigFileError) as exc:
        load_config(path)
    assert "rollout.temperature" in str(exc.value) and "staleness.max_staleness" in str(exc.value)
    cfg = load_config(None, {"run.steps": 3, "staleness.max_staleness": 0})
    assert cfg.run.steps == 3 and cfg.driver_settings().max_staleness == 0
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
