"""Issue 36, classes 4 and 5: ``--resume`` refuses a setting that would change what the run is
(one line naming it, exit 2, the run directory unchanged), a run that kept no recovery state
(every peer's rule) is refused as unresumable, the metrics row recovery writes for a step a
crash cut short counts that step, and ``train --check`` refuses what the run itself would
fail on later (with a traceback or exit 70 before). Every setting acts or is refused: a peer's
rule refuses ``staleness.max_concurrency`` unless it honours it, and ``simulate``,
``conformance`` and ``faults`` refuse an option their mode does not use.

The runs use the fake engine with the real GRPO trainer on the tiny model, in-process
(``runtime.cli.main``), a few seconds each."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from runtime.cli import main

FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]
PEER = ["--set", "staleness.policy=verl_drop", "--set", "recovery.enabled=false"]


def _train(out: Path, *extra: str, steps: int = 3) -> int:
    return main(["train", *FAKE, "--steps", str(steps), "--output-dir", str(out), *extra])


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def _one_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("reserve-occupy train:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _digest(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory, tiny_model):
    """A finished 2-step run that began with an evaluation of 4 prompts."""
    out = tmp_path_factory.mktemp("runs") / "run"
    assert _train(out, "--set", "run.eval_prompts=4", steps=2) == 0
    return out


# ------------------------------------------- --resume: what may and may not change ------------

@pytest.mark.parametrize("settings, named", [
    # before: accepted; trained Reserve-Occupy and config.json recorded verl_drop
    (PEER, "staleness.policy"),
    # before: trained every step, then exit 70 (KeyError: 'reward' in runtime/train.py)
    (["--set", "run.eval_prompts=0"], "run.eval_prompts"),
    (["--set", "staleness.batch_size=2"], "staleness.batch_size"),
    (["--set", "staleness.group_size=2"], "staleness.group_size"),
    (["--eta", "2"], "staleness.max_staleness"),
    (["--set", "trainer.lr=0.1"], "trainer.lr"),
    (["--set", "reward.name=arithmetic"], "reward.name"),
    (["--set", "data.limit=50"], "data.limit"),
    (["--set", "model.tiny.hidden_size=64"], "model.tiny"),
])
def test_resume_refuses_a_setting_that_changes_the_run(evaluated_run, tmp_path, capsys,
                                                        settings, named):
    out = tmp_path / "run"
    shutil.copytree(evaluated_run, out)
    before = _digest(out)
    for check in ([], ["--check"]):
        capsys.readouterr()
        assert main(["train", "--no-progress", *settings, "--steps", "4", *check,
                     "--resume", str(out)]) == 2
        _one_line(capsys, f"--resume {out}", named, "a resume cannot change")
    assert _digest(out) == before


def test_resume_may_change_the_steps_timeouts_and_memory_settings(evaluated_run, tmp_path,
                                                                  capsys):
    out = tmp_path / "run"
    shutil.copytree(evaluated_run, out)
    assert main(["train", "--no-progress", "--resume", str(out), "--steps", "3",
                 "--set", "timeouts.unit_s=30", "--set", "trainer.micro_batch=2",
                 "--set", "recovery.commit_every=1", "--set", "rollout.fake_token_s=0.001"]) == 0
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["run"]["steps"] == 3 and recorded["timeouts"]["unit_s"] == 30
    assert [r["step"] for r in _rows(out)] == [0, 1, 2]


def test_a_peer_rule_run_cannot_be_resumed_and_says_so(tmp_path, tiny_model, capsys):
    """Before: the resume replayed the peer's trace through Reserve-Occupy and printed an
    internal event diff ("recorded Event(...), replay gave Event(...)")."""
    out = tmp_path / "run"
    assert _train(out, *PEER, steps=2) == 0
    before = _digest(out)
    for check in ([], ["--check"]):
        capsys.readouterr()
        assert main(["train", "--no-progress", "--resume", str(out), "--steps", "3",
                     *check]) == 2
        line = _one_line(capsys, "recovery.enabled=false", "staleness.policy=verl_drop",
                         "cannot be resumed")
        assert "Event(" not in line
    assert _digest(out) == before


# ----------------------------------------- the metrics row of a step recovery retrained ------

def test_the_row_of_a_step_a_crash_cut_short_counts_that_step(tmp_path, tiny_model,
                                                              monkeypatch):
    """The process dies after step 2's consume and before its row; the resume writes step 2's
    row (``recovered``). Before: it copied step 1's counts (steps 2, trained 8; the log had
    3 and 12)."""
    from runtime import metrics

    out = tmp_path / "run"
    write = metrics.MetricsSink.__call__

    def dies_at_step_2(self, record):
        if record.step == 2:
            raise RuntimeError("the process died here")
        write(self, record)

    monkeypatch.setattr(metrics.MetricsSink, "__call__", dies_at_step_2)
    assert _train(out, steps=4) != 0
    monkeypatch.setattr(metrics.MetricsSink, "__call__", write)
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0
    rows = _rows(out)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["recovered"] is True
    assert [r["steps"] for r in rows] == [1, 2, 3, 4]
    assert [r["trained"] for r in rows] == [4, 8, 12, 16]  # batch_size 4, nothing missing
    admitted = [r["admitted"] for r in rows]
    assert admitted == sorted(admitted) and admitted[2] >= rows[2]["trained"]


# ------------------------------------------- every setting acts or is refused ---------------

def _honours_concurrency(name: str) -> bool:
    """Whether the simulator's policy ``name`` asks the engine's room (``rollout_has_room``),
    the one call through which ``staleness.max_concurrency`` reaches a peer's rule."""
    import inspect

    from reserve_occupy_peers import POLICIES

    return any("rollout_has_room" in inspect.getsource(cls) for cls in POLICIES[name].__mro__
               if cls.__module__.startswith("reserve_occupy_peers"))


def test_the_table_of_what_each_rule_honours_matches_the_rules():
    from runtime.peers import PEER_POLICIES, RULE_SETTINGS

    assert set(RULE_SETTINGS) == set(PEER_POLICIES)
    for name in PEER_POLICIES:
        assert ("max_concurrency" in RULE_SETTINGS[name]) == _honours_concurrency(name), name
        assert "capacity" not in RULE_SETTINGS[name]


@pytest.mark.parametrize("policy", ["nemo_in_order", "nemo_weight_fifo", "verl_drop", "roll",
                                    "areal", "synchronous", "unbounded"])
def test_max_concurrency_acts_or_is_refused_with_each_peer(tmp_path, capsys, policy):
    """Before: accepted by all seven; five ran 16 or 32 groups at once while the log header
    said 2 and ``check-trace --peer`` said PEER RULE HELD. (The rules that honour it are the
    two that ask the engine's room: the table test above ties that to the sources.)"""
    rc = main(["train", *FAKE, *["--set", f"staleness.policy={policy}", "--set",
                                 "recovery.enabled=false"],
               "--set", "staleness.max_concurrency=2", "--check",
               "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    if policy in ("synchronous", "unbounded"):
        assert rc == 0, err
    else:
        assert rc == 2 and "Traceback" not in err
        assert (f"staleness.max_concurrency=2 is not honoured by staleness.policy={policy}"
                in err), err
        assert not (tmp_path / "run").exists()


def test_the_peer_controller_itself_refuses_a_setting_its_rule_ignores():
    from reserve_occupy import Config

    from runtime.peers import PeerController, UnsupportedByRuntime

    with pytest.raises(UnsupportedByRuntime, match="max_concurrency=2 is not honoured"):
        PeerController("verl_drop", Config(max_staleness=1, batch_size=2, max_concurrency=2), 4)
    ctl = PeerController("unbounded", Config(max_staleness=1, batch_size=2, max_concurrency=2),
                         4)
    assert ctl.max_in_flight == 2


@pytest.mark.parametrize("argv, option", [
    # before: accepted, the run went on and wrote nothing there (exit 0)
    (["run", "--results-dir", "RES", "--policy", "reserve_occupy", "--eta", "1",
      "--batches", "1"], "--results-dir"),
    (["run", "--img-dir", "RES", "--policy", "reserve_occupy", "--eta", "1", "--batches", "1"],
     "--img-dir"),
    (["experiments", "--only", "3", "--out", "RES"], "--out"),
    (["experiments", "--only", "3", "--policy", "verl_drop"], "--policy"),
    (["regimes", "--tiny", "--only", "2"], "--only"),
    (["list", "--eta", "2"], "--eta"),
])
def test_simulate_refuses_an_option_its_mode_does_not_use(tmp_path, capsys, monkeypatch,
                                                          argv, option):
    import reserve_occupy_sim.model.runner as runner
    import reserve_occupy_sim.studies.experiments as ex

    monkeypatch.setattr(runner, "run_grid", lambda *a, **k: pytest.fail("ran before the check"))
    monkeypatch.setattr(ex, "run_all", lambda *a, **k: pytest.fail("ran before the check"))
    argv = [str(tmp_path / "res") if a == "RES" else a for a in argv]
    assert main(["simulate", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{option} is not used by `simulate {argv[0]}`" in err, err
    assert not (tmp_path / "res").exists()


# ------------------------------------ --check refuses what the run would fail on later -------

def _refused_at_check(capsys, argv: list[str], *needles: str) -> str:
    """``train --check`` exits 2 with the needles on stderr, no traceback (the old code: 0)."""
    assert main(["train", *argv, "--check"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model):
    """A finished 2-step run with a committed checkpoint per step."""
    out = tmp_path_factory.mktemp("runs") / "run"
    assert _train(out, "--set", "recovery.commit_every=1", steps=2) == 0
    return out


@pytest.mark.parametrize("name", ["metrics.jsonl", "lengths.jsonl"])
def test_check_reads_the_reports_a_resume_continues(finished_run, tmp_path, capsys, name):
    """Before: ``--check --resume`` said OK; the run then refused the file."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    (out / name).write_text("garbage\n" + (out / name).read_text())
    _refused_at_check(capsys, ["--no-progress", "--resume", str(out), "--steps", "3"],
                      f"{out / name}:1")


@pytest.mark.parametrize("resume", [False, True])
def test_check_refuses_a_lock_that_is_not_a_file(finished_run, tmp_path, capsys, resume):
    """Before: ``--check`` said OK, the run then failed to take its lock (exit 2, later)."""
    out = tmp_path / "run"
    if resume:
        shutil.copytree(finished_run, out)
        (out / ".lock").unlink(missing_ok=True)
    (out / ".lock").mkdir(parents=True)
    argv = (["--no-progress", "--resume", str(out), "--steps", "3"] if resume else
            [*FAKE, "--output-dir", str(out)])
    _refused_at_check(capsys, argv, ".lock is not a regular file")


@pytest.mark.parametrize("setting, needle", [
    ("ray.engine_resources.num_cpus=-1", "ray.engine_resources"),
    ("ray.trainer_resources.num_cpus=-0.5", "ray.trainer_resources"),
    ("model.tiny.hidden_size=100000000", "model.tiny.hidden_size"),
    # within each bound, too many parameters together (12 h^2 layers > 200M)
    ("model.tiny.hidden_size=1024 --set model.tiny.layers=32", "parameters"),
    # before: passed --check; the rank's timeout overflowed and the run blamed a lost rank
    ("trainer.collective_timeout_s=1e308", "trainer.collective_timeout_s"),
])
def test_check_bounds_what_the_run_builds(tmp_path, capsys, setting, needle):
    _refused_at_check(capsys, [*FAKE, "--set", *setting.split(" "), "--output-dir",
                               str(tmp_path / "r")], needle)


def test_check_refuses_prompts_the_fake_engine_cannot_read(tmp_path, capsys):
    """Before: ``--check`` said OK and the run exited 70 (``ValueError: substring not found``
    in the fake engine's tokenizer)."""
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "\\u20ac+1=", "answer": "2"}\n')
    _refused_at_check(capsys, [*FAKE, "--set", f"data.path={data}",
                               "--output-dir", str(tmp_path / "r")],
                      "rollout.backend=fake", "prompt(s) 1 ('€')")


def test_check_refuses_a_checkpoint_of_another_model(finished_run, tmp_path, capsys):
    """Before: ``--check`` said OK; the run failed loading it (``size mismatch``)."""
    _refused_at_check(capsys, [*FAKE, "--resume", str(finished_run / "checkpoint"),
                               "--set", "model.tiny.hidden_size=64",
                               "--set", "model.tiny.heads=2", "--output-dir",
                               str(tmp_path / "r")],
                      "a checkpoint of another model", "hidden_size 128 (the run's model: 64)")


def test_check_refuses_a_checkpoint_with_a_truncated_shard(finished_run, tmp_path, capsys):
    """The sharded trainer's layout (``sharded/``: a torch.distributed checkpoint): a shard
    file shorter than its index says. Before: ``--check`` said OK and the run failed with
    "trainer rank 0 exited with status 1 while in 'load'"."""
    import torch
    import torch.distributed.checkpoint as dcp

    ckpt = tmp_path / "ckpt"
    shutil.copytree(finished_run / "checkpoint", ckpt)
    (ckpt / "optimizer.pt").unlink()
    dcp.save({"w": torch.zeros(4096)}, checkpoint_id=str(ckpt / "sharded"), no_dist=True)
    argv = [*FAKE, "--resume", str(ckpt), "--output-dir", str(tmp_path / "r")]
    assert main(["train", *argv, "--check"]) == 0  # whole: accepted
    capsys.readouterr()
    shard = next((ckpt / "sharded").glob("*.distcp"))
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    _refused_at_check(capsys, argv, str(shard), "truncated")


def test_a_run_in_a_damaged_run_dir_checkpoint_is_refused_at_check(finished_run, tmp_path,
                                                                   capsys):
    """The newest committed checkpoint of the run directory, which recovery loads first."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    newest = sorted((out / "checkpoints").glob("step-*"))[-1]
    weights = newest / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size - 100)
    _refused_at_check(capsys, ["--no-progress", "--resume", str(out), "--steps", "3"],
                      str(weights), "truncated")


def test_a_damaged_tiny_model_cache_is_rebuilt(tmp_path, capsys, monkeypatch):
    """Before: a cached model with truncated weights was returned as it was, and every run
    failed loading it."""
    from runtime.inputs import safetensors_file
    from runtime.models.tiny import TinySpec, ensure_tiny_model

    spec = TinySpec(warmup_steps=1)
    target = ensure_tiny_model(spec, root=tmp_path, log=None)
    weights = target / "model.safetensors"
    whole = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(whole // 2)
    said: list[str] = []
    assert ensure_tiny_model(spec, root=tmp_path, log=said.append) == target
    assert weights.stat().st_size == whole
    safetensors_file(weights, "the rebuilt model")  # complete again
    assert any("damaged" in line and "rebuilding" in line for line in said), said


def test_check_refuses_a_tiny_model_cache_it_cannot_write(tmp_path, capsys, monkeypatch):
    """Before: ``--check`` said OK; the run failed building the model there (a traceback)."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("RESERVE_OCCUPY_CACHE", str(blocker))
    _refused_at_check(capsys, [*FAKE, "--output-dir", str(tmp_path / "r")],
                      "the tiny model's cache", "RESERVE_OCCUPY_CACHE")


@pytest.mark.parametrize("argv, option", [
    # before: each accepted and ignored (exit 0)
    (["--list", "--adapter", "reserve_occupy_porting.vector_runner:ReferenceAdapter"], "--adapter"),
    (["--check", "--stride", "5"], "--stride"),
    (["--check", "--lenient"], "--lenient"),
    (["--export", "basic/00000", "--family", "spec"], "--family"),
    (["--list", "--adapter-timeout", "5"], "--adapter-timeout"),
])
def test_conformance_refuses_an_option_its_mode_does_not_use(capsys, argv, option):
    assert main(["conformance", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and option in err and "leave it out" in err, err


def test_faults_refuses_a_sim_share_a_variant_does_not_use(capsys, monkeypatch):
    """A ``--variant`` runs on the driver or in the simulator only: ``--sim-share`` (the
    split between them) was accepted and ignored."""
    from reserve_occupy_faults import cli
    from reserve_occupy_faults.variants import VARIANTS

    monkeypatch.setattr(cli, "run_schedule", lambda *a, **k: pytest.fail("ran before the check"))
    assert main(["faults", "--variant", next(iter(VARIANTS)), "--sim-share", "0.5",
                 "--schedules", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--sim-share" in err, err


def test_chunk_groups_without_streaming_is_refused(tmp_path, capsys):
    """``trainer.chunk_groups`` acts only with ``trainer.streaming`` (before: accepted and
    ignored, --check exit 0)."""
    _refused_at_check(capsys, [*FAKE, "--set", "trainer.chunk_groups=3", "--output-dir",
                               str(tmp_path / "r")], "chunk_groups (3)", "trainer.streaming")
    assert main(["train", *FAKE, "--set", "trainer.chunk_groups=3", "--set",
                 "trainer.streaming=true", "--check", "--output-dir", str(tmp_path / "r")]) == 0


def test_run_training_as_a_library_keeps_the_resume_rule(evaluated_run, tmp_path):
    """``session.run_training(resume=run_dir)`` refuses a config that changes what the run is,
    as ``train --resume`` does, before anything is written (before: it went on, past the
    check, and failed later on the missing model)."""
    import asyncio

    from runtime.config import load_config
    from runtime.recovery.rundir import RunDirError
    from runtime.session import run_training
    from runtime.tasks.base import load_reward

    out = tmp_path / "run"
    shutil.copytree(evaluated_run, out)
    before = _digest(out)
    cfg = load_config(out / "config.json", {"run.eval_prompts": 0})
    with pytest.raises(RunDirError, match="a resume cannot change run.eval_prompts"):
        asyncio.run(run_training(cfg, tmp_path / "no-model", [], load_reward(cfg.reward.name),
                                 out, resume=out, log=lambda _: None))
    assert _digest(out) == before


def test_a_lock_that_is_a_symbolic_link_is_refused_and_never_followed(tmp_path, capsys):
    """``--check`` refuses it; the run never takes its lock through it (``O_NOFOLLOW``), so
    the file the link names is left as it was (before: --check said OK and the run wrote its
    pid into the file the link named)."""
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not yours\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").symlink_to(elsewhere)
    _refused_at_check(capsys, [*FAKE, "--output-dir", str(out)], ".lock is not a regular file",
                      "a symbolic link")
    assert _train(out, steps=1) == 2
    assert elsewhere.read_text() == "not yours\n"
