"""One name per setting from the YAML to its use, and one typed settings shape per consumer
(issue 35, item 4).

The path: YAML / ``--set`` -> ``TrainConfig`` (``runtime/config/schema.py``) -> the driver's
``DriverSettings`` (``runtime/records.py``, built by ``TrainConfig.driver_settings``) -> the
core's ``reserve_occupy.Config`` (``DriverSettings.controller_config``); the trainers take the
``trainer`` section itself. Before, the driver's settings renamed three of them on the way
(``max_staleness`` -> ``eta``, ``unit_s`` -> ``unit_timeout_s``, ``stuck_s`` ->
``stuck_timeout_s``) and the trainers took ``settings: Any`` and probed it with ``getattr``."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import typing
import warnings
from pathlib import Path

import pytest

from reserve_occupy import Config
from runtime.config import TrainConfig, load_config
from runtime.records import DriverSettings

ROOT = Path(__file__).resolve().parents[2]

# Settings of the driver that no config key sets (the runtime's own).
RUNTIME_ONLY = {"max_dropped_in_a_row"}

# Non-default values, so that a setting copied from the wrong key cannot pass by chance.
OVERRIDES = {"staleness.max_staleness": 3, "timeouts.unit_s": 7.5, "timeouts.stuck_s": 11.0,
             "staleness.batch_size": 5, "staleness.group_size": 3, "staleness.candidates": 4,
             "staleness.capacity": 6, "staleness.max_concurrency": 9, "run.steps": 17,
             "rollout.max_tokens": 13, "rollout.temperature": 0.7, "run.seed": 23,
             "rollout.refit": "keep", "staleness.filter_zero_variance": False}


def _sections(cfg: TrainConfig) -> dict[str, object]:
    return {name: getattr(cfg, name) for name in type(cfg).model_fields}


def test_the_driver_settings_keep_the_config_names():
    cfg = load_config(None, OVERRIDES)
    s = cfg.driver_settings()
    assert s.max_staleness == cfg.staleness.max_staleness == 3
    assert s.unit_s == cfg.timeouts.unit_s == 7.5
    assert s.stuck_s == cfg.timeouts.stuck_s == 11.0
    # and down to the controller, under the same name
    assert s.controller_config().max_staleness == 3


def test_every_driver_setting_is_a_config_key_of_the_same_name_and_value():
    cfg = load_config(None, OVERRIDES)
    s = cfg.driver_settings()
    for field in dataclasses.fields(DriverSettings):
        if field.name in RUNTIME_ONLY:
            continue
        holders = [(name, section) for name, section in _sections(cfg).items()
                   if field.name in type(section).model_fields]
        assert holders, f"DriverSettings.{field.name}: no config section has a key of that name"
        for name, section in holders:
            value = getattr(section, field.name)
            if name == "timeouts" and value is None:  # off: null in the config, inf here
                value = math.inf
            assert getattr(s, field.name) == value, (name, field.name)


def test_the_controller_takes_the_driver_settings_under_their_names():
    s = load_config(None, OVERRIDES).driver_settings()
    c = s.controller_config()
    shared = [f.name for f in dataclasses.fields(Config)
              if f.name in {g.name for g in dataclasses.fields(DriverSettings)}]
    assert "max_staleness" in shared
    for name in shared:
        assert getattr(c, name) == getattr(s, name), name


def test_a_timeout_that_is_off_is_infinite_for_the_driver():
    s = load_config(None, {"timeouts.stuck_s": None}).driver_settings()
    assert s.stuck_s == math.inf and s.unit_s == math.inf  # unit_s is off by default


@pytest.mark.parametrize("old, new", [("eta", "max_staleness"), ("unit_timeout_s", "unit_s"),
                                      ("stuck_timeout_s", "stuck_s")])
def test_the_old_names_still_read_with_a_deprecation_warning(old, new):
    s = DriverSettings(max_staleness=2, unit_s=3.0, stuck_s=4.0)
    with pytest.warns(DeprecationWarning, match=f"DriverSettings.{old} is now "
                                                f"DriverSettings.{new}"):
        assert getattr(s, old) == getattr(s, new)
    assert old not in {f.name for f in dataclasses.fields(DriverSettings)}


def test_the_new_names_read_without_a_warning():
    s = DriverSettings()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (s.max_staleness, s.unit_s, s.stuck_s) == (1, math.inf, math.inf)


# ------------------------------------------------------------ the trainers' typed section ---

def _trainers() -> list[type]:
    from runtime.trainer.grpo import GRPOTrainer
    from runtime.trainer.sharded import ShardedTrainer

    return [GRPOTrainer, ShardedTrainer]


def test_the_trainers_take_the_trainer_section_typed():
    from runtime.config import TrainerConfig

    for cls in _trainers():
        hints = typing.get_type_hints(cls.__init__, localns={"TrainerConfig": TrainerConfig})
        assert hints["settings"] is TrainerConfig, (cls.__name__, hints["settings"])
        assert list(inspect.signature(cls.__init__).parameters)[1:3] == ["model_path",
                                                                         "settings"]


@pytest.mark.parametrize("path", ["runtime/trainer/grpo.py", "runtime/trainer/sharded.py"])
def test_the_trainers_read_their_section_without_probing(path):
    """No ``getattr(settings, "key", default)``: a key the section lacks is an error, not a
    default that silently differs from the config's."""
    tree = ast.parse((ROOT / path).read_text())
    probes = [ast.unparse(node) for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and node.args
              and ast.unparse(node.args[0]) in ("settings", "s", "self.s")]
    assert probes == []
