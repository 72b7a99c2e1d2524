"""The ``train`` command (bad input, --check, and one real short run in a fresh process as
``make demo`` does it), the metrics outputs, and the virtual clock."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.clock import MonotonicClock, VirtualClock
from runtime.metrics import plot, step_row, summarize, summary_table
from runtime.records import StepRecord

ROOT = Path(__file__).resolve().parents[2]


def test_invalid_config_is_one_clear_line_and_exit_2(tmp_path, capsys):
    # each with its own output directory: a train command that got past its check would
    # otherwise write into the default one (out/runtime/demo), a user's `make demo` run
    run = ["--output-dir", str(tmp_path / "run")]
    bad = tmp_path / "bad.yaml"
    bad.write_text("staleness:\n  max_staleness: -1\n")
    assert main(["train", "--config", str(bad), *run]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: invalid configuration" in err and "staleness.max_staleness" in err
    assert "Traceback" not in err
    assert main(["train", "--set", "run.steps", *run]) == 2
    assert "--set expects KEY=VALUE" in capsys.readouterr().err
    assert main(["train", "--set", "model.path=/nonexistent", *run]) == 2
    assert "not a local Hugging Face model directory" in capsys.readouterr().err
    data = tmp_path / "d.jsonl"
    data.write_text("not json\n")
    assert main(["train", "--set", f"data.path={data}", *run]) == 2
    assert f"{data}:1: not valid JSON" in capsys.readouterr().err


def test_check_validates_and_prints_the_config(capsys, tmp_path):
    assert main(["train", "--config", str(ROOT / "configs" / "demo.yaml"), "--check",
                 "--steps", "7", "--output-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert '"steps": 7' in out and "100 prompts, reward exact_answer, model tiny" in out
    assert out.rstrip().endswith(": OK")


@pytest.mark.vllm
@pytest.mark.slow
def test_train_command_runs_in_a_fresh_process(tmp_path):
    """What ``make demo`` runs, shortened: the command sets vLLM's environment itself."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "OMP_", "TORCH_COMPILE"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "train", "--steps", "3", "--no-progress",
         "--output-dir", str(tmp_path), "--set", "run.eval_prompts=8",
         "--set", "staleness.batch_size=4"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "summary" in proc.stdout and "generated tokens/s" in proc.stdout
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for name in ("curves.png", "summary.json", "events.jsonl", "driver_notes.jsonl",
                 "checkpoint/model.safetensors", "checkpoint/optimizer.pt"):
        assert (tmp_path / name).exists(), name


def _record(step, rewards, staleness, tokens, t):
    return StepRecord(step=step, version=step, time_s=t, rewards=rewards,
                      rollout_rewards=rewards, staleness=staleness,
                      token_version_lag=staleness, train={"loss": 0.1}, step_s=1.0, train_s=0.5,
                      sync_s=0.1, wait_s=0.4, tokens_generated=tokens, tokens_trained=tokens,
                      trainer_idle=0.4, rollout_idle=0.2,
                      counts={"admitted": 4, "aborted": 0, "filtered": 1, "resumed": 2,
                              "released_stuck": 0})


def test_metrics_rows_summary_and_plot(tmp_path):
    recs = [_record(i, [0.1 * i, 0.1 * i], [0, min(i, 1)], 100 * (i + 1), i + 1.0)
            for i in range(6)]
    rows = [step_row(r, recs[i - 1] if i else None) for i, r in enumerate(recs)]
    assert rows[1]["tokens_per_s"] == 100.0 and rows[1]["staleness"] == {"0": 1, "1": 1}
    assert rows[0]["train/loss"] == 0.1
    s = summarize(rows, window=2)
    assert s["reward_first"] == pytest.approx(0.05) and s["reward_last"] == pytest.approx(0.45)
    assert s["staleness"] == {"0": 7, "1": 5}
    table = summary_table(s, {"extra row": "x"})
    assert "reward, last 2 steps" in table and "extra row" in table
    assert plot(rows, tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_metrics_sink_writes_jsonl_and_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from runtime.metrics import MetricsSink

    sink = MetricsSink(tmp_path, 2, progress=False, tensorboard=True)
    sink(_record(0, [0.0, 1.0], [0, 1], 10, 1.0))
    sink(_record(1, [1.0, 1.0], [1, 1], 20, 2.0))
    sink.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in rows] == [0.5, 1.0]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_virtual_clock_jumps_to_deadlines_in_order():
    clock = VirtualClock()
    order = []

    async def sleeper(name, d):
        await clock.sleep(d)
        order.append((name, clock.now()))

    async def main_():
        await asyncio.gather(sleeper("b", 2.0), sleeper("a", 1.0), sleeper("c", 2.0))

    clock.run(main_())
    assert order == [("a", 1.0), ("b", 2.0), ("c", 2.0)]

    async def stuck():
        await asyncio.Event().wait()

    with pytest.raises(RuntimeError, match="deadlock"):
        VirtualClock().run(stuck())


def test_monotonic_clock_sleeps_for_real():
    clock = MonotonicClock()

    async def go():
        t0 = clock.now()
        await clock.sleep(0.01)
        return clock.now() - t0

    assert asyncio.run(go()) >= 0.009


def test_prompts_too_long_for_the_engine_are_refused_before_it_starts(tiny_model, tmp_path):
    from runtime.session import check_lengths
    from runtime.tasks.base import Prompt

    check_lengths(tiny_model, [Prompt("1+1=")], 8, 128)
    with pytest.raises(ValueError, match="prompt 3 is 124 tokens; with rollout.max_tokens 8 "
                                         "it exceeds rollout.max_model_len 128"):
        check_lengths(tiny_model, [Prompt("1+1="), Prompt("1" * 124, index=3)], 8, 128)
