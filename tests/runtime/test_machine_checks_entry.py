"""``train`` and ``train --check`` run the machine checks (device, precision, world size,
engine arguments, the model and its tokenizer, prompt lengths) through one entry,
``runtime.machine_checks.check_all``, once (issue 35, item 4); before, ``runtime.train`` called
the checks one by one from its own ``_preflight``. What they refuse and how (one line, exit 2)
is unchanged: ``test_check_validates.py`` and ``test_cli_and_metrics.py`` hold those cases.
With it, every function of ``runtime/train.py`` is typed (``_preflight`` and its helpers were
not).

The runs use the fake engine on the tiny model, in-process (``runtime.cli.main``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runtime import machine_checks, train
from runtime.cli import main
from runtime.inputs import InputError

ROOT = Path(__file__).resolve().parents[2]
FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false", "--steps", "2"]


@pytest.fixture
def calls(monkeypatch):
    """Every call of ``check_all``, each run by the real one."""
    seen: list[tuple] = []
    real = machine_checks.check_all

    def counted(*args, **kwargs):
        seen.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(machine_checks, "check_all", counted)
    return seen


def test_train_check_runs_the_machine_checks_once_through_check_all(tmp_path, calls, capsys):
    assert main(["train", *FAKE, "--output-dir", str(tmp_path / "run"), "--check"]) == 0
    assert len(calls) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith(": OK") and "tiny (built on first use)" in out


def test_train_runs_them_once_too_before_it_trains(tmp_path, calls, monkeypatch):
    trained: list[object] = []
    monkeypatch.setattr(train, "_train", lambda cfg, model_path, *rest: trained.append(
        model_path) or 0)
    assert main(["train", *FAKE, "--output-dir", str(tmp_path / "run")]) == 0
    assert len(calls) == 1 and trained == [None]  # None: the embedded tiny model


def test_what_check_all_refuses_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """Its ``InputError`` is the command's one line; nothing after it runs."""
    def refuse(*args, **kwargs):
        raise InputError("trainer.device 'cuda': CUDA is not available on this machine")

    monkeypatch.setattr(machine_checks, "check_all", refuse)
    out = tmp_path / "run"
    assert main(["train", *FAKE, "--output-dir", str(out), "--check"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "reserve-occupy train: trainer.device 'cuda': CUDA is not available on this machine"]
    assert not out.exists()


def test_check_all_refuses_a_device_this_machine_lacks(tmp_path):
    """The settings come first, as before: a bad device is named before the model loads."""
    from runtime.config import load_config
    from runtime.data import load_prompts

    cfg = load_config(None, {"trainer.device": "nonsense", "model.path": str(tmp_path)})
    with pytest.raises(InputError, match="trainer.device 'nonsense': not a torch device"):
        machine_checks.check_all(cfg, load_prompts(None)[:4])


def test_a_damaged_tiny_model_cache_is_said_through_warn(tmp_path, monkeypatch):
    """``check_all`` prints nothing itself: ``train`` passes ``warn`` and prefixes its name
    (the line is the same as before)."""
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.models import tiny

    monkeypatch.setenv("RESERVE_OCCUPY_CACHE", str(tmp_path / "cache"))
    cfg = load_config(None, {"rollout.backend": "fake"})
    target = tiny.tiny_model_dir(cfg.tiny_spec())
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"not weights")
    said: list[str] = []
    assert machine_checks.check_all(cfg, load_prompts(None)[:4], warn=said.append) is None
    assert len(said) == 1 and said[0].startswith(f"the cached tiny model in {target} is "
                                                 f"damaged (")
    assert said[0].endswith("; the run rebuilds it")


def test_every_function_of_train_py_is_typed():
    tree = ast.parse((ROOT / "runtime/train.py").read_text())
    untyped = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
        untyped += [f"{node.name}({p.arg})" for p in params if p.annotation is None]
        if node.returns is None:
            untyped.append(f"{node.name} -> ?")
    assert untyped == []
    source = (ROOT / "runtime/train.py").read_text()
    assert "no-untyped-def" not in source and "type: ignore" not in source
