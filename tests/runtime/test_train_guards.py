"""``train`` on input a user or a file controls (issue 13): a run in which nothing can finish
stops; ``--check`` loads what the run loads; bad options and files get one line and exit 2
before any work; a run directory is never silently reused, half-overwritten or resumed from
state recovery would refuse; and the summary's counts are the event log's (its length bias the
log's fates joined with ``lengths.jsonl``).

The runs use the fake engine with the real GRPO trainer on the tiny model, in-process
(``runtime.cli.main``), a few seconds each."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.rollout.fake import Plan

from .helpers import derive_lengths, fixed_script, make, run

ROOT = Path(__file__).resolve().parents[2]

# A short fake-engine run: small batches, no evaluation, no plot.
FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]


def _train(out: Path, *extra: str, steps: int = 3) -> int:
    return main(["train", *FAKE, "--steps", str(steps), "--output-dir", str(out), *extra])


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("reserve-occupy train:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ----------------------------------------------------------------------- progress -----------

def _bounded(driver, limit: int = 3_000) -> None:
    """Turn a livelock into a failure: a driver that logs ``limit`` events has not stopped."""
    log = driver._note

    def counted(*args, **kwargs):
        if len(driver.notes) > limit:
            raise AssertionError(f"the driver logged {limit} events without stopping")
        log(*args, **kwargs)

    driver._note = counted


@pytest.mark.parametrize("overrides, script, message", [
    # every group times out and is re-admitted: the timeout aborts count as losses
    ({"unit_s": 0.05}, fixed_script(1.0), "timeout: 30"),
    # every request fails: the groups fail
    ({}, fixed_script(0.1, special={"g": Plan(0.05, [], error=RuntimeError("bad"))}),
     "candidates_failed: 30"),
])
def test_a_run_that_only_loses_groups_stops_whatever_the_reason(overrides, script, message):
    driver, rollout, _, clock = make(script=script, steps=3, max_dropped_in_a_row=30,
                                     **overrides)
    _bounded(driver)
    with pytest.raises(RuntimeError, match="30 groups in a row were dropped") as exc:
        run(driver, clock)
    assert message in str(exc.value)
    driver.controller.check()
    assert rollout.active == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_train_whose_groups_all_time_out_exits_1(tmp_path, capsys):
    """The issue's example: ``--set timeouts.unit_s=0.001`` used to run forever."""
    code = main(["train", "--no-progress", "--set", "rollout.backend=fake",
                 "--set", "timeouts.unit_s=0.001", "--steps", "2", "--set", "run.eval_prompts=0",
                 "--output-dir", str(tmp_path / "run")])
    assert code == 1
    err = capsys.readouterr().err
    assert "the run failed" in err and "timeout: " in err and "timeouts.unit_s" in err


# ----------------------------------------------------------------------- one-line errors ----

def test_bad_set_values_and_unreadable_files_are_one_line(tmp_path, capsys):
    assert main(["train", "--set", "run.steps=[1", "--check"]) == 2
    _one_line_error(capsys, "--set run.steps=[1", "not valid YAML")
    assert main(["train", "--set", "run=1", "--set", "run.steps=2", "--check"]) == 2
    _one_line_error(capsys, "run is not a section")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"run:\n  output_dir: caf\xe9\n")
    assert main(["train", "--config", str(latin), "--check"]) == 2
    _one_line_error(capsys, str(latin), "not a UTF-8 text file")
    assert main(["train", "--config", str(tmp_path), "--check"]) == 2
    _one_line_error(capsys, str(tmp_path), "cannot read the config file")
    data = tmp_path / "d.jsonl"
    data.write_bytes(b'{"prompt": "1+1=", "answer": "\xff"}\n')
    assert main(["train", "--set", f"data.path={data}", "--check", "--output-dir",
                 str(tmp_path / "out")]) == 2
    _one_line_error(capsys, str(data), "not a UTF-8 text file")


def test_an_output_dir_that_cannot_be_one_is_refused_before_work(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    for out, needle in ((afile, "exists and is not a directory"),
                        (afile / "sub", "is not a directory")):
        for extra in ([], ["--check"]):
            assert _train(out, *extra) == 2
            _one_line_error(capsys, f"run.output_dir {out}", needle)
    assert afile.read_text() == "x"


# ----------------------------------------------------------------------- --check ------------

def _model_dir(tmp_path, tiny_model, config: str | None, tokenizer: bool,
               weights: bool = True) -> Path:
    d = tmp_path / "model"
    d.mkdir(parents=True)
    if config is not None:
        (d / "config.json").write_text(config)
    if weights:
        shutil.copy(Path(tiny_model) / "model.safetensors", d / "model.safetensors")
    if tokenizer:
        for p in Path(tiny_model).iterdir():
            if "token" in p.name:
                shutil.copy(p, d / p.name)
    return d


@pytest.mark.parametrize("setting, needle", [
    ("trainer.device=cuda", "CUDA is not available"),
    ("trainer.device=quantum", "not a torch device"),
    ("staleness.batch_size=1000000000", "staleness.batch_size"),
    ("staleness.max_staleness=1000000000", "staleness.max_staleness"),
    # Above the core's limit: refused by the config's own check (naming the key, "less than
    # or equal to 1024"), not by the core later.
    ("staleness.max_staleness=2000",
     "staleness.max_staleness: Input should be less than or equal to 1024"),
])
def test_check_refuses_what_the_run_would_die_on(setting, needle, capsys, tmp_path):
    import torch

    if "cuda" in setting and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["train", "--set", setting, "--check", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and "OK" not in err


@pytest.mark.slow
def test_check_loads_the_model_directory(tmp_path, tiny_model, capsys):
    config = (Path(tiny_model) / "config.json").read_text()
    bad_json = _model_dir(tmp_path / "a", tiny_model, "{not json", tokenizer=True)
    no_tokenizer = _model_dir(tmp_path / "b", tiny_model, config, tokenizer=False)
    good = _model_dir(tmp_path / "c", tiny_model, config, tokenizer=True)
    for d, needle in ((bad_json, "config.json is not readable JSON"),
                      (no_tokenizer, "cannot load its tokenizer")):
        assert main(["train", "--set", f"model.path={d}", "--check", "--output-dir",
                     str(tmp_path / "out")]) == 2
        _one_line_error(capsys, f"model.path {d}", needle)
    assert main(["train", "--set", f"model.path={good}", "--check", "--output-dir",
                 str(tmp_path / "out")]) == 0


def test_the_example_config_checks_with_its_paths_filled_in(tmp_path, tiny_model, capsys):
    """configs/example.yaml sets trainer.device: auto (cuda where there is one, else cpu)."""
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": i + 1}) + "\n"
                            for i in range(300)))
    assert main(["train", "--config", str(ROOT / "configs" / "example.yaml"),
                 "--set", f"model.path={tiny_model}", "--set", f"data.path={data}",
                 "--set", "rollout.max_tokens=8", "--set", "rollout.max_model_len=128",
                 "--output-dir", str(tmp_path / "out"), "--check"]) == 0, capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # --check leaves no trace


# ----------------------------------------------------------------------- run directories ----

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 3-step fake-engine run (copied by each test that changes it)."""
    out = tmp_path_factory.mktemp("runs") / "run"
    assert _train(out) == 0
    return out


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    return out


def test_starting_into_a_run_needs_resume_or_overwrite(finished_run, tmp_path, capsys):
    out = _copy(finished_run, tmp_path)
    before = (out / "events.jsonl").read_bytes()
    assert _train(out) == 2
    _one_line_error(capsys, "holds a run", f"--resume {out}", "--overwrite")
    assert (out / "events.jsonl").read_bytes() == before
    assert _train(out, "--overwrite", "--resume", str(out)) == 2
    _one_line_error(capsys, "choose one")
    assert _train(out, "--overwrite", steps=2) == 0
    aside = tmp_path / "run.replaced-1"
    assert (aside / "events.jsonl").read_bytes() == before  # moved whole, not deleted
    assert sorted(p.name for p in aside.iterdir()) == sorted(p.name for p in
                                                              finished_run.iterdir())
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


def test_run_training_as_a_library_never_starts_a_new_run_into_one(finished_run, tmp_path):
    """``session.run_training`` keeps the same rule as ``train``: a new run (no resume, or a
    trainer checkpoint) into a directory holding a run raises before it writes anything; the
    run continued in place passes that check."""
    import asyncio

    from runtime.config import load_config
    from runtime.recovery.rundir import RunDirError
    from runtime.session import run_training
    from runtime.tasks.base import load_reward

    out = _copy(finished_run, tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    cfg = load_config(out / "config.json", {})
    reward = load_reward(cfg.reward.name)
    missing_model = tmp_path / "no-model"  # anything past the check fails on it
    for resume in (None, out / "checkpoint"):
        with pytest.raises(RunDirError, match="holds a run"):
            asyncio.run(run_training(cfg, missing_model, [], reward, out, resume=resume,
                                     log=lambda _: None))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "metrics.jsonl").write_text("")  # any run file counts
    with pytest.raises(RunDirError, match="metrics.jsonl"):
        asyncio.run(run_training(cfg, missing_model, [], reward, tmp_path / "half"))
    with pytest.raises(Exception) as exc:  # continuing in place: past the check
        asyncio.run(run_training(cfg, missing_model, [], reward, out, resume=out,
                                 log=lambda _: None))
    assert not isinstance(exc.value, RunDirError)


def test_resume_with_an_empty_log_is_refused_and_changes_nothing(finished_run, tmp_path,
                                                                 capsys):
    out = _copy(finished_run, tmp_path)
    (out / "events.jsonl").write_text("")
    metrics = (out / "metrics.jsonl").read_bytes()
    assert main(["train", "--resume", str(out), "--no-progress"]) == 2
    _one_line_error(capsys, "no header line", "nothing to resume", "--overwrite")
    assert (out / "metrics.jsonl").read_bytes() == metrics


def test_resume_without_config_json_is_refused(finished_run, tmp_path, capsys):
    out = _copy(finished_run, tmp_path)
    (out / "config.json").unlink()
    assert main(["train", "--resume", str(out), "--no-progress"]) == 2
    _one_line_error(capsys, "no config.json", "--config")
    assert not list(tmp_path.glob("*.replaced-*"))


def test_resume_validates_the_whole_run_dir_before_any_engine(finished_run, tmp_path, capsys):
    out = _copy(finished_run, tmp_path)
    lines = (out / "events.jsonl").read_text().splitlines()
    (out / "events.jsonl").write_text("\n".join([*lines[:5], *lines[4:]]) + "\n")
    assert main(["train", "--resume", str(out), "--no-progress"]) == 2  # a line twice
    _one_line_error(capsys, "events are missing")
    out2 = _copy(finished_run, tmp_path / "b")
    traj = sorted((out2 / "trajectories").glob("*.json"))
    assert traj, "the fake run keeps its trajectories (no checkpoint yet)"
    traj[0].write_text('{"samples": [')
    assert main(["train", "--resume", str(out2), "--no-progress"]) == 2
    _one_line_error(capsys, str(traj[0]), "not a readable trajectory record")
    out3 = _copy(finished_run, tmp_path / "c")
    assert main(["train", "--resume", str(out3), "--no-progress",
                 "--set", "staleness.max_staleness=3"]) == 2
    _one_line_error(capsys, "staleness.max_staleness", "a resume cannot change")


def test_corrupt_log_is_refused_with_exit_2_before_the_engine(finished_run, tmp_path, capsys):
    out = _copy(finished_run, tmp_path)
    lines = (out / "events.jsonl").read_text().splitlines()
    lines[5] = "{not json"
    (out / "events.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["train", "--resume", str(out), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "starting the" not in captured.out  # no engine was started
    assert "line 6 is corrupt" in captured.err and "Traceback" not in captured.err


# ----------------------------------------------------------------------- numbers ------------

def derive(events_path: Path) -> dict[str, object]:
    """The summary's counts, derived here from events.jsonl on their own (not through the
    runtime's counter): reserve, publish, consume lines; aborts by their meta.reason."""
    ops: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    staleness: Counter[str] = Counter()
    for line in events_path.read_text().splitlines()[1:]:
        r = json.loads(line)
        ops[r["op"]] += 1
        if r["op"] == "abort":
            reasons[r.get("meta", {}).get("reason", "unspecified")] += 1
        if r["op"] == "consume":
            staleness.update(str(u["staleness"]) for u in r["batch"]["units"])
        for _ in r.get("aborted", ()):
            reasons["released_stuck" if r["op"] == "release_stuck" else "closing_rule"] += 1
    filtered = reasons.pop("no_gradient", 0) + ops["filter"]
    return {"steps": ops["publish"], "admitted": ops["reserve"], "filtered": filtered,
            "aborted": sum(reasons.values()), "aborted_by_reason": dict(reasons),
            "trained": sum(staleness.values()), "staleness": dict(staleness)}


def _check_summary(run_dir: Path, resumed: bool = False) -> dict[str, object]:
    summary = json.loads((run_dir / "summary.json").read_text())
    derived = derive(run_dir / "events.jsonl")
    for key, value in derived.items():
        assert summary[key] == value, (key, summary[key], value)
    lengths = derive_lengths(run_dir)  # the length bias: events.jsonl joined with lengths.jsonl
    for key in ("samples_trained", "samples_admitted"):
        assert summary[key] == lengths[key], (key, summary[key], lengths[key])
    for key in ("length_ratio", "length_ks"):
        assert summary[key] == pytest.approx(lengths[key], abs=1e-12), key
    if not resumed:  # the driver's own token count (a resumed run restarts it) agrees
        assert lengths["trained_tokens"] == summary["tokens_trained"]
        assert lengths["samples_trained"] == summary["trained"] * 4  # groups x group_size
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]  # the last row's counts are the log's up to that step
    assert last["admitted"] <= summary["admitted"] and last["steps"] == summary["steps"]
    return summary


def test_every_summary_count_is_derived_from_the_event_log(finished_run):
    summary = _check_summary(finished_run)
    assert summary["steps"] == 3 and summary["filtered"] > 0
    assert summary["aborted_by_reason"].get("shutdown", 0) == summary["aborted"] - sum(
        v for k, v in summary["aborted_by_reason"].items() if k != "shutdown")


def test_after_a_crash_and_resume_the_summary_counts_every_trained_batch(finished_run,
                                                                         tmp_path):
    """Cut the log as a crash while batch 1 trained leaves it (its metrics row was never
    written); the resumed run publishes that batch in recovery and trains on to 4 steps."""
    out = _copy(finished_run, tmp_path)
    lines = (out / "events.jsonl").read_text().splitlines()
    consumes = [i for i, x in enumerate(lines) if json.loads(x)["op"] == "consume"]
    (out / "events.jsonl").write_text("\n".join(lines[:consumes[1] + 1]) + "\n")
    rows = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text(rows[0] + "\n")
    assert main(["train", "--resume", str(out), "--no-progress", "--steps", "4"]) == 0
    summary = _check_summary(out, resumed=True)
    assert summary["steps"] == 4  # 4 batches trained: 2 before the crash, 2 after
    # batch 1's row, lost with the crash, is written from recovery's retraining of it
    assert summary["steps_with_metrics"] == 4
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and rows[1]["recovered"] is True
    assert derive_lengths(out)["trained_tokens"] == summary["tokens_trained"]
