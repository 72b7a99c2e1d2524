"""``train --check`` validates everything that can be validated before a run (issue 25,
classes 5 and 7), and ``train`` refuses the same things before it writes anything: invalid
AdamW betas, seeds numpy cannot take, vLLM engine arguments that do not exist, a local Ray
cluster too small for the engines and the trainer, a checkpoint whose state, weights or
optimizer archive is damaged, a model directory without weights, non-finite numbers anywhere
in the config, a reward that needs answers without an answer field, and records a reward
cannot score. Each is one line naming the setting or the file (and line), exit status 2.

The runs use the fake engine on the tiny model, in-process (``runtime.cli.main``)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import get_args

import pytest

from runtime.cli import main
from runtime.config import ConfigFileError, TrainConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]


def _refused(capsys, tmp_path: Path, argv: list[str], *needles: str) -> str:
    """``argv`` is refused by --check and by a real start alike, in one message naming
    ``needles`` (one line, or a config file's header line and one line per bad field); the
    real start writes nothing."""
    out = tmp_path / "out"
    for extra in (["--check"], []):
        rc = main(["train", *FAKE, "--output-dir", str(out), *argv, *extra])
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if x.startswith("reserve-occupy train:")]
        assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (extra, err)
        assert all(x.startswith("  ") for x in err.strip().splitlines()[1:]), err
        for needle in needles:
            assert needle in err, (needle, err)
        assert not out.exists(), f"{extra or 'a start'} wrote {sorted(out.rglob('*'))}"
    return err


# ------------------------------------------------------------------- class 5: --check -----

@pytest.mark.parametrize("setting, needle", [
    ("trainer.betas=[0.9, 1.0]", "trainer.betas: AdamW's betas must each be in [0, 1)"),
    ("trainer.betas=[-0.5, 0.9]", "trainer.betas"),
    ("run.seed=4294967296", "run.seed"),
    ("run.seed=-1", "run.seed"),
    ("model.tiny.seed=99999999999999999999", "model.tiny.seed"),
])
def test_settings_the_libraries_refuse_are_refused_first(tmp_path, capsys, setting, needle):
    _refused(capsys, tmp_path, ["--set", setting], needle)


def test_unknown_engine_args_are_one_line_naming_the_key(tmp_path, capsys):
    line = _refused(capsys, tmp_path, ["--set", "rollout.backend=vllm", "--set",
                                       "rollout.engine_args={enable_chunked_prefil: false}"],
                    "rollout.engine_args.enable_chunked_prefil: not an argument of vLLM's "
                    "AsyncEngineArgs")
    assert "did you mean enable_chunked_prefill?" in line
    assert main(["train", "--set", "rollout.engine_args={enable_chunked_prefill: false}",
                 "--output-dir", str(tmp_path / "ok"), "--check"]) == 0
    capsys.readouterr()


def test_the_engine_argument_names_are_vllms_own():
    import dataclasses

    from vllm.engine.arg_utils import AsyncEngineArgs

    from runtime.machine_checks import engine_arg_names

    assert engine_arg_names() == {f.name for f in dataclasses.fields(AsyncEngineArgs)}


def test_a_local_ray_cluster_too_small_is_refused_before_it_starts(tmp_path, capsys):
    _refused(capsys, tmp_path, ["--backend", "ray", "--set", "ray.num_cpus=2",
                                "--set", "rollout.engines=4"],
             "the Ray cluster is too small", "4 engine actor(s)")
    _refused(capsys, tmp_path, ["--backend", "ray", "--set", "ray.num_cpus=4",
                                "--set", "ray.trainer_resources={num_gpus: 1}"],
             "the Ray cluster is too small", "GPU")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The final checkpoint of a 2-step fake-engine run."""
    out = tmp_path_factory.mktemp("ckpt") / "run"
    assert main(["train", *FAKE, "--steps", "2", "--output-dir", str(out)]) == 0
    return out / "checkpoint"


def _damaged(checkpoint: Path, tmp_path: Path, name: str, damage) -> Path:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    damage(ckpt / name)
    return ckpt


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _edit_header(edit):
    """A damage that rewrites the first tensor's entry of a safetensors header (the data kept)."""
    def damage(path: Path) -> None:
        data = path.read_bytes()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        edit(header[next(k for k in header if k != "__metadata__")])
        raw = json.dumps(header).encode()
        path.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n:])
    return damage


@pytest.mark.parametrize("name, damage, needle", [
    ("trainer_state.json", lambda p: p.write_text('{"steps": '), "not valid JSON"),
    # Before: both passed --check (only the file's length was checked) and failed in the engine
    ("model.safetensors", _edit_header(lambda t: t.update(dtype="F42")), "unknown dtype 'F42'"),
    ("model.safetensors", _edit_header(lambda t: t.update(shape=t["shape"] + [2])),
     "its data_offsets span"),
    ("trainer_state.json", lambda p: p.write_text('{"steps": -3}'), "whole number of steps"),
    ("model.safetensors", _truncate, "truncated"),
    ("model.safetensors", Path.unlink, "has no model.safetensors"),
    ("optimizer.pt", _truncate, "not a whole torch archive"),
])
def test_a_damaged_checkpoint_is_refused_at_check(checkpoint, tmp_path, capsys, name, damage,
                                                  needle):
    assert main(["train", *FAKE, "--resume", str(checkpoint), "--output-dir",
                 str(tmp_path / "good"), "--check"]) == 0
    capsys.readouterr()
    ckpt = _damaged(checkpoint, tmp_path, name, damage)
    _refused(capsys, tmp_path, ["--resume", str(ckpt)], "--resume", needle)


def _model(tiny_model, tmp_path: Path) -> Path:
    d = tmp_path / "model"
    shutil.copytree(tiny_model, d)
    return d


def test_a_model_directory_without_whole_weights_is_refused(tiny_model, tmp_path, capsys):
    d = _model(tiny_model, tmp_path)
    assert main(["train", *FAKE, "--set", f"model.path={d}", "--output-dir",
                 str(tmp_path / "good"), "--check"]) == 0
    capsys.readouterr()
    _truncate(d / "model.safetensors")
    _refused(capsys, tmp_path, ["--set", f"model.path={d}"], f"model.path {d}", "truncated")
    (d / "model.safetensors").unlink()
    _refused(capsys, tmp_path, ["--set", f"model.path={d}"], f"model.path {d}",
             "holds no weights")


# ------------------------------------------------------------------- class 7: numbers -----

def _float_fields(model: type, prefix: str = "") -> list[str]:
    """Every float field of the config (``section.key``), found from the models themselves so
    that a field added later is covered too."""
    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        kinds = set(get_args(ann)) | {ann}
        if isinstance(ann, type) and issubclass(ann, TrainConfig.__mro__[1]):  # a section
            out += _float_fields(ann, f"{prefix}{name}.")
        elif float in kinds or any(float in get_args(k) for k in kinds):
            out.append(prefix + name)
    return out


FLOAT_FIELDS = _float_fields(TrainConfig)


def test_every_float_field_is_found():
    for key in ("trainer.lr", "rollout.temperature", "trainer.clip_high", "trainer.kl_coef",
                "trainer.weight_decay", "trainer.max_grad_norm", "timeouts.stuck_s",
                "model.tiny.warmup_lr", "trainer.betas", "rollout.kv_cache_gib",
                "ray.engine_resources"):
        assert key in FLOAT_FIELDS


@pytest.mark.parametrize("key", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_are_refused_for_every_float_field(key, value):
    default = TrainConfig()
    for part in key.split("."):
        default = getattr(default, part)
    bad = ([value, value] if isinstance(default, tuple)
           else {"num_cpus": value} if isinstance(default, dict) else value)
    with pytest.raises(ConfigFileError, match=rf"{key}(\.\w+)?: .*finite"):
        load_config(None, {key: bad})


@pytest.mark.parametrize("key, value", [
    ("reward.options", {"correct": math.inf}),
    ("rollout.engine_args", {"x": {"y": [1, math.nan]}}),
])
def test_non_finite_numbers_are_refused_in_free_form_sections(key, value):
    with pytest.raises(ConfigFileError, match=rf"{key}: .*must be a finite number"):
        load_config(None, {key: value})


def test_yaml_inf_is_refused_at_check_and_config_json_never_holds_null(tmp_path, capsys):
    _refused(capsys, tmp_path, ["--set", "trainer.lr=.inf"], "trainer.lr",
             "finite number")
    _refused(capsys, tmp_path, ["--set", "reward.options={correct: .nan}"], "reward.options")
    _refused(capsys, tmp_path, ["--set", "reward.options={correct: 'inf'}"],
             "reward option correct must be a finite number")
    # what config.json holds reads back as the same config (no inf written as null)
    cfg = load_config(None, {"trainer.lr": 1e-3, "timeouts.unit_s": 30.5})
    assert TrainConfig.model_validate_json(cfg.model_dump_json()) == cfg


def _bool_fields(model: type, prefix: str = "") -> list[str]:
    """Every yes/no field of the config, found from the models (a later one is covered too)."""
    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, TrainConfig.__mro__[1]):  # a section
            out += _bool_fields(ann, f"{prefix}{name}.")
        elif ann is bool or set(get_args(ann)) == {bool, type(None)}:
            out.append(prefix + name)
    return out


BOOL_FIELDS = _bool_fields(TrainConfig)


def test_every_bool_field_is_found():
    assert {"trainer.streaming", "run.plot", "trainer.gradient_checkpointing"} <= set(
        BOOL_FIELDS), BOOL_FIELDS


@pytest.mark.parametrize("key", BOOL_FIELDS)
@pytest.mark.parametrize("value", [0, 1, 2, "yes", "off", 0.0])
def test_a_yes_no_field_takes_only_true_or_false(key, value):
    # Before: pydantic read 0, 1, "yes", "off" as booleans (2 and 0.0 it refused in its words)
    with pytest.raises(ConfigFileError, match=rf"{key}: .*must be true or false"):
        load_config(None, {key: value})
    assert getattr(load_config(None, {key: True}), key.split(".")[0]) is not None


# ------------------------------------------------------------------- class 7: data --------

def test_a_reward_that_needs_answers_without_an_answer_field(tmp_path, capsys):
    _refused(capsys, tmp_path, ["--set", "data.answer_field=null"],
             "data.answer_field is null, but reward 'exact_answer'")


@pytest.mark.parametrize("record, needle", [
    ({"prompt": "   \n\t", "answer": "2"}, "field 'prompt' is only whitespace"),
    ({"prompt": [{"role": "user", "content": "  "}], "answer": "2"}, "a conversation with no"),
    ({"prompt": "1+1=", "answer": float("nan")}, "field 'answer' is nan"),
    ({"prompt": "1+1=", "answer": "   "}, "field 'answer' must be a non-empty string"),
    ({"prompt": "1+1=", "answer": "two"}, "exact_answer compares integers"),
])
def test_records_that_cannot_train_name_file_and_line(tmp_path, capsys, record, needle):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "answer": 2}) + "\n"
                    + json.dumps(record) + "\n")  # json.dumps writes NaN for nan
    _refused(capsys, tmp_path, ["--set", f"data.path={data}"], f"{data}:2", needle)


def test_a_directory_as_data_path_says_so(tmp_path, capsys):
    _refused(capsys, tmp_path, ["--set", f"data.path={tmp_path}"], str(tmp_path),
             "is a directory")


def test_replay_of_things_that_are_not_events_is_a_typed_error():
    from reserve_occupy import Config, NotAnEvent, ProtocolError, StalenessController, replay

    c = StalenessController(Config(1, 2))
    c.reserve("a")
    record = {"op": "reserve", "unit": "a"}
    for events, needle in (([record], "event 0 is not a reserve_occupy.Event: dict"),
                           ([c.events[0], None], "event 1 is not"),
                           (7, "must be an iterable"), ("reserve a", "must be an iterable")):
        with pytest.raises(NotAnEvent, match=needle) as exc:
            replay(Config(1, 2), events)
        assert isinstance(exc.value, ProtocolError) and isinstance(exc.value, TypeError)
    assert replay(Config(1, 2), c.events).events == c.events


def test_an_unknown_refit_mode_is_refused_naming_the_key(tmp_path, capsys):
    _refused(capsys, tmp_path, ["--set", "rollout.refit=bogus"],
             "rollout.refit: Input should be 'abort' or 'keep' (got 'bogus')")
    for mode in ("abort", "keep"):
        assert main(["train", *FAKE, "--set", f"rollout.refit={mode}", "--output-dir",
                     str(tmp_path / mode), "--check"]) == 0
    capsys.readouterr()
