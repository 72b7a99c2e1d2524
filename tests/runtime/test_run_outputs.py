"""What a run leaves on disk (issue 25, classes 5, 8 and 10): a resumed run reports its time and
tokens over the whole run and adds to the driver's notes; every file and directory of a run,
weights and checkpoints included, has the mode ``0666 & ~umask`` (``0777`` for directories);
a new run that never trained a step leaves nothing that blocks the same command; a full disk
is exit 74 with one line and never leaves a weights or checkpoint directory half-written.

The runs use the fake engine with the real GRPO trainer on the tiny model, in-process
(``runtime.cli.main``), a few seconds each; the full-disk run is a subprocess with a file-size
limit (``RLIMIT_FSIZE``: writes past it fail with EFBIG, in Python, safetensors and torch
alike), which needs no privileges and never touches a device."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli import main

ROOT = Path(__file__).resolve().parents[2]
FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]


def _train(out: Path, *extra: str, steps: int = 3) -> int:
    return main(["train", *FAKE, "--steps", str(steps), "--output-dir", str(out), *extra])


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------- class 10: resume --------

def test_a_resumed_run_reports_time_and_tokens_over_the_whole_run(tmp_path, tiny_model):
    out = tmp_path / "run"
    assert _train(out) == 0
    first = _rows(out)
    notes_before = (out / "driver_notes.jsonl").read_text().splitlines()
    assert notes_before
    assert main(["train", "--resume", str(out), "--no-progress", "--steps", "5"]) == 0
    rows = _rows(out)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4] and rows[:3] == first
    for key in ("time_s", "tokens_generated", "tokens_trained"):
        values = [r[key] for r in rows]
        assert values == sorted(values) and values[3] > values[2], (key, values)
    for r in rows:  # time_s is rounded to 1 ms; the rate is of the unrounded time
        t, n = r["time_s"], r["tokens_generated"]
        assert n / (t + 5.1e-4) <= r["tokens_per_s_total"] <= n / (t - 5.1e-4), r
        assert 0 <= r["trainer_idle"] <= 1 and 0 <= r["rollout_idle"] <= 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tokens_trained"] == rows[-1]["tokens_trained"] > first[-1]["tokens_trained"]
    assert summary["tokens_generated"] == rows[-1]["tokens_generated"]
    assert summary["wall_s"] == rows[-1]["time_s"] > first[-1]["time_s"]
    # The notes of the first incarnation are kept, the resumed one's follow, later in time.
    notes = (out / "driver_notes.jsonl").read_text().splitlines()
    assert notes[:len(notes_before)] == notes_before and len(notes) > len(notes_before)
    added = [json.loads(x)["t"] for x in notes[len(notes_before):]]
    assert min(added) >= first[-1]["time_s"] - 1e-3


def test_the_notes_are_written_whole_or_not_at_all(tmp_path, tiny_model, monkeypatch, capsys):
    """A resumed run whose note cannot be written (here: one that does not serialise) keeps
    the earlier notes as they were, followed by the notes it wrote before that one, each a
    whole line (the notes are streamed as they happen: runtime.notes); no half-written line."""
    from runtime import session

    out = tmp_path / "run"
    assert _train(out) == 0
    before = (out / "driver_notes.jsonl").read_bytes()

    def unserialisable(obj):
        raise TypeError("cannot write this note")

    monkeypatch.setattr(session, "_jsonable", unserialisable)
    real_write = session._write_outputs

    def with_bad_note(cfg, driver, out_dir, **kw):
        driver.notes.append({"t": 0.0, "event": "odd", "what": object()})
        return real_write(cfg, driver, out_dir, **kw)

    monkeypatch.setattr(session, "_write_outputs", with_bad_note)
    assert main(["train", "--resume", str(out), "--no-progress", "--steps", "4"]) == 70
    assert "TypeError: cannot write this note" in capsys.readouterr().err
    after = (out / "driver_notes.jsonl").read_bytes()
    assert after.startswith(before) and after.endswith(b"\n")
    added = [json.loads(x) for x in after[len(before):].decode().splitlines()]
    assert added and all(isinstance(n, dict) and n["event"] != "odd" for n in added)
    assert not [p.name for p in out.iterdir() if ".tmp-" in p.name]


def test_weights_and_checkpoints_have_the_mode_of_every_other_file(tmp_path, tiny_model):
    """safetensors writes 0600; a run's files are 0666 & ~umask, directories 0777 & ~umask,
    so another account (a separate ``vllm serve``) reads weights as it reads the metrics."""
    out = tmp_path / "run"
    old = os.umask(0o027)
    try:
        assert _train(out, "--set", "run.save_model_every=1", "--set",
                      "recovery.commit_every=1") == 0
    finally:
        os.umask(old)
    weights = sorted((out / "weights").glob("v*/model.safetensors"))
    assert weights and (out / "checkpoint" / "model.safetensors").is_file()
    assert (out / "checkpoint-1" / "optimizer.pt").is_file()
    assert list((out / "checkpoints").glob("step-*/COMMIT.json"))
    modes = {}
    for p in [out, *out.rglob("*")]:
        modes[str(p.relative_to(out))] = oct(p.stat().st_mode & 0o777)
    wrong = {k: m for k, m in modes.items()
             if m != oct(0o750 if (out / k).is_dir() else 0o640)}
    assert not wrong, wrong


# ----------------------------------------------------------------- class 5: unstarted ------

@pytest.mark.parametrize("where", ["trainer", "driver"])
def test_a_start_that_fails_before_a_step_leaves_nothing_that_blocks_a_retry(
        where, tmp_path, tiny_model, monkeypatch, capsys):
    """The trainer cannot be built (after the engine started), or the engine dies before the
    first step (after the event log and the trajectory store exist): the same command, without
    --overwrite, then starts the run."""
    from runtime.driver import Driver
    from runtime.recovery.rundir import run_files
    from runtime.trainer.grpo import GRPOTrainer

    def boom(*args, **kwargs):
        raise RuntimeError("the engine died")

    target = (GRPOTrainer, "__init__") if where == "trainer" else (Driver, "run")
    with monkeypatch.context() as m:
        m.setattr(*target, boom)
        assert _train(tmp_path / "run") == 1
    err = capsys.readouterr()
    assert "the run failed: the engine died" in err.err
    assert run_files(tmp_path / "run") == []
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name != ".lock"]
    if where == "driver":
        assert "no step was trained: removed what this run wrote" in err.out
    assert _train(tmp_path / "run", steps=1) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1


def test_nothing_of_the_run_is_written_while_its_engine_starts(tmp_path, tiny_model,
                                                            monkeypatch):
    """config.json is written once the engines and the trainer are up: a start killed while
    the engine loads (``kill -9``, where no cleanup runs) leaves nothing that blocks a retry."""
    from runtime import session
    from runtime.recovery.rundir import run_files

    out = tmp_path / "run"
    seen = []
    real = session.build_rollout

    def starting(cfg, model_path):
        seen.append(run_files(out))
        return real(cfg, model_path)

    monkeypatch.setattr(session, "build_rollout", starting)
    assert _train(out, steps=1) == 0
    assert seen == [[]] and "config.json" in run_files(out)


def test_a_run_that_trained_a_step_is_kept_when_it_fails(tmp_path, tiny_model, monkeypatch):
    from runtime.recovery.rundir import run_files
    from runtime.trainer.grpo import GRPOTrainer

    real = GRPOTrainer._export

    def export_then_fail(self, version):
        if version == 2:
            raise RuntimeError("the engine died")
        return real(self, version)

    monkeypatch.setattr(GRPOTrainer, "_export", export_then_fail)
    assert _train(tmp_path / "run") == 1
    assert "events.jsonl" in run_files(tmp_path / "run")
    assert (tmp_path / "run" / "weights" / "v1" / "model.safetensors").is_file()


# ----------------------------------------------------------------- class 8: a full disk ----


@pytest.mark.parametrize("checkpointed", ["no", "yes", "without figures"])
def test_a_step_trained_before_a_crash_but_without_its_row_gets_one_on_resume(
        tmp_path, tiny_model, monkeypatch, checkpointed):
    """The process dies after step 2's consume (its batch trained, weights exported) and
    before its metrics row: recovery retrains and publishes the batch. Before: the resumed
    run wrote rows 0, 1, 3, 4 and its tokens_trained lacked step 2's tokens. ``checkpointed``:
    step 2's checkpoint (version 3) was committed before the crash, so recovery retrains
    nothing: the row is written from the figures the checkpoint's COMMIT.json recorded
    (before: its row said ``tokens_unknown`` and tokens_trained left the step out). A
    checkpoint without them (written by an earlier version) still gives ``tokens_unknown``."""
    from runtime import metrics

    out = tmp_path / "run"
    write = metrics.MetricsSink.__call__
    settings = ["--set", "recovery.commit_every=3"] if checkpointed != "no" else []

    def dies_at_step_2(self, record):
        if record.step == 2:
            raise RuntimeError("the process died here")
        write(self, record)

    monkeypatch.setattr(metrics.MetricsSink, "__call__", dies_at_step_2)
    assert _train(out, *settings, steps=5) != 0
    assert [r["step"] for r in _rows(out)] == [0, 1]
    unknown = checkpointed == "without figures"
    if checkpointed != "no":
        commit = out / "checkpoints" / "step-000003" / "COMMIT.json"
        meta = json.loads(commit.read_text())
        assert meta["figures"]["step"] == 2 and meta["figures"]["tokens"] > 0
        if unknown:
            del meta["figures"]
            commit.write_text(json.dumps(meta))
    monkeypatch.setattr(metrics.MetricsSink, "__call__", write)
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0
    rows = _rows(out)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r.get("recovered", False) for r in rows] == [False, False, True, False, False]
    assert [r.get("tokens_unknown", False) for r in rows] == [
        False, False, unknown, False, False]
    per_step = [r.get("train/tokens", 0) for r in rows]
    assert all(t > 0 for k, t in enumerate(per_step) if not (unknown and k == 2))
    assert ("train/tokens" in rows[2]) is not unknown
    if checkpointed == "yes":
        assert per_step[2] == meta["figures"]["tokens"]
    assert [r["tokens_trained"] for r in rows] == [
        sum(per_step[:i + 1]) for i in range(5)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tokens_trained"] == sum(per_step) and summary["steps_with_metrics"] == 5


def _limited(nbytes: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return set_limit


def test_a_full_disk_during_train_is_one_line_and_exit_74(tmp_path, tiny_model):
    """Every file past 1 MB fails to grow (the tiny model's weights are 4 MB): the first
    export fails inside safetensors. Before: a SafetensorError traceback, exit 1, and a
    weights/v1/ without its model.safetensors."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "runtime", "train", *FAKE, "--steps", "2",
                           "--output-dir", str(out)], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=600, preexec_fn=_limited(1 << 20))
    assert proc.returncode == 74, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "reserve-occupy: cannot write the output: File too large")
    for v in (out / "weights").glob("*") if (out / "weights").exists() else []:
        assert (v / "model.safetensors").is_file(), v
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


@pytest.fixture
def file_size_limit():
    """Lower this process's file-size limit for the test (restored after): writes past it
    fail with EFBIG (Python ignores SIGXFSZ)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def set_to(nbytes: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))

    yield set_to
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_weights_and_checkpoints_are_written_whole_or_not_at_all(tmp_path, tiny_model,
                                                                   file_size_limit):
    """A full disk in the middle of an export or a checkpoint raises the OSError (exit 74 in
    ``train``) and leaves no ``weights/vN`` or checkpoint directory, and no temporary one."""
    import torch

    from runtime.config import TrainerConfig
    from runtime.trainer.grpo import GRPOTrainer, torch_save

    trainer = GRPOTrainer(tiny_model, TrainerConfig(), tmp_path)
    file_size_limit(1 << 20)
    for write, path in ((lambda: trainer._export(1), tmp_path / "weights" / "v1"),
                        (lambda: trainer._save(tmp_path / "ck"), tmp_path / "ck")):
        with pytest.raises(OSError) as exc:
            write()
        assert exc.value.errno == errno.EFBIG
        assert not path.exists()
        assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]
    # torch.save reports the failed write as RuntimeError("... unexpected pos ..."): the
    # optimizer state's file raises the OSError instead.
    with pytest.raises(OSError) as exc:
        torch_save({"state": torch.zeros(1 << 19)}, tmp_path / "o.pt")
    assert exc.value.errno == errno.EFBIG


def test_overwrite_of_the_current_directory_is_one_line_exit_2(tmp_path, tiny_model, capsys,
                                                               monkeypatch):
    out = tmp_path / "run"
    assert _train(out, steps=1) == 0
    monkeypatch.chdir(out)
    before = sorted(p.name for p in out.iterdir())
    for extra in ([], ["--check"]):
        capsys.readouterr()
        assert main(["train", *FAKE, "--steps", "1", "--output-dir", ".", "--overwrite",
                     *extra]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.strip().splitlines() == [
            "reserve-occupy train: cannot move . aside: it is the current directory; run from "
            "another directory or choose another output directory"]
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.parametrize("out", [".", ".."])
def test_simulate_overwrite_of_the_current_directory_is_one_line_exit_2(out, tmp_path, capsys,
                                                                        monkeypatch):
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path if out == "." else tmp_path / "sub")
    assert main(["simulate", "--out", out, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"--out {out}" in err and "current directory" in err
    assert (tmp_path / "results.json").read_text() == "{}"


# ------------------------------------------- class 8: a reward that tries to exit ----------

class _Stop(BaseException):
    """Not an Exception, not KeyboardInterrupt: a custom BaseException."""


def exits_zero(prompt, completion):  # used by name: tests.runtime.test_run_outputs:exits_zero
    raise SystemExit(0)


def raises_base(prompt, completion):
    raise _Stop("stop")


@pytest.mark.parametrize("reward, shown", [("exits_zero", "SystemExit(0)"),
                                           ("raises_base", "_Stop('stop')")])
def test_a_reward_that_raises_a_base_exception_fails_the_run(tmp_path, tiny_model, reward,
                                                             shown):
    """Before: SystemExit(0) from the reward ended `train` with exit 0, no summary and
    "Task exception was never retrieved"."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "train", *FAKE, "--steps", "2", "--output-dir",
         str(out), "--set", f"reward.name=tests.runtime.test_run_outputs:{reward}"],
        env=env, cwd=ROOT, text=True, capture_output=True, timeout=600)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "never retrieved" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"reserve-occupy train: the run failed: the reward raised {shown}")


# ------------------------------------- class 6/8: the run's own files on --resume ----------

DEEP = "[" * 1000 + "]" * 1000


@pytest.mark.parametrize("name, what", [("lengths.jsonl", "not a length record"),
                                        ("metrics.jsonl", "not a metrics row")])
@pytest.mark.parametrize("bad", [DEEP, '{"torn', "[]"])
def test_a_bad_line_of_a_report_refuses_the_resume_unless_it_is_the_last(
        tmp_path, tiny_model, capsys, name, what, bad):
    """docs/recovery.md's torn-last-line rule for lengths.jsonl and metrics.jsonl: a bad
    line that is not the last is corruption (exit 2, PATH:LINE, nothing changed); the last
    one is a torn write, dropped. Before: a deep line in lengths.jsonl was an internal error
    (exit 70) and metrics.jsonl dropped bad lines anywhere."""
    out = tmp_path / "run"
    assert _train(out, steps=2) == 0
    path = out / name
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) >= 2
    path.write_text("".join([lines[0], bad + "\n", *lines[1:]]))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--no-progress", "--steps", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}:2: {what}" in err[0], err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    # The same line last: torn by a crash, dropped, and the resume goes on.
    path.write_text("".join(lines) + bad)
    assert main(["train", "--resume", str(out), "--no-progress", "--steps", "3"]) == 0
    assert bad not in path.read_text().splitlines()
    assert [r["step"] for r in _rows(out)] == [0, 1, 2]
