"""``bench/gpu_trainer.py`` is prepared for a GPU machine this suite never has: every one of
its configurations runs here with ``--tiny`` on CPU, as does one over two sharded-trainer rank
processes (``--ranks 2``, gloo); without CUDA the full run says why it cannot start, and more
ranks than the machine has are refused before any work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_trainer", ROOT / "bench" / "gpu_trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_every_configuration_runs_tiny_on_cpu(tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "gpu.json"
    assert bench.main(["--tiny", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert [r["config"] for r in results["rows"]] == [c[0] for c in bench.CONFIGS]
    for r in results["rows"]:
        assert r["train_s_per_step"] > 0 and r["tokens_per_s"] > 0 and r["export_s"] > 0
    table = capsys.readouterr().out
    assert "s/step" in table and "bf16-mixed+ckpt" in table


def test_without_cuda_the_full_run_refuses_with_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert _bench().main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a CUDA device" in err and "--tiny" in err
    assert _bench().main(["--ranks", "1,2"]) == 2  # the sharded run needs CUDA as well
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a CUDA device" in err
    assert _bench().main(["--tiny", "--configs", "fp16"]) == 2
    assert "unknown --configs ['fp16']" in capsys.readouterr().err


def _rank_room() -> int:
    """How many ranks the bench accepts here: one per GPU, or with --tiny on CPU one per CPU."""
    import os

    import torch

    return (torch.cuda.device_count() if torch.cuda.is_available()
            else len(os.sched_getaffinity(0)))


@pytest.mark.slow
def test_tiny_runs_sharded_over_two_rank_processes(tmp_path, capsys):
    """``--ranks 2``: the sharded trainer's two spawned ranks (gloo on CPU) train the tiny
    model; per rank its own pid, its peak resident set and its shards, which together are
    the whole model."""
    import os

    if _rank_room() < 2:
        pytest.skip("fewer than 2 CPUs (or GPUs) for 2 ranks")
    bench = _bench()
    out = tmp_path / "gpu.json"
    assert bench.main(["--tiny", "--ranks", "2", "--configs", "fp32", "--steps", "2",
                       "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["ranks"] == [2]
    [row] = results["rows"]
    assert row["config"] == "fp32" and row["ranks"] == 2 and "error" not in row
    assert row["startup_s"] > 0 and row["train_s_per_step"] > 0 and row["export_s"] > 0
    ranks = row["per_rank"]
    assert len(ranks) == 2 and len({r["pid"] for r in ranks}) == 2
    assert os.getpid() not in {r["pid"] for r in ranks}
    assert all(r["peak_rss"] > 0 and r["params"] > 0 for r in ranks)
    # fp32: the two ranks' parameter shards add up to the whole model, 4 bytes a parameter
    assert sum(r["params"] for r in ranks) == 4 * results["parameters"]
    assert all(r["params"] < 4 * results["parameters"] for r in ranks)
    text = capsys.readouterr().out
    table = text[text.index("config "):]
    head, line = table.splitlines()[:2]
    assert head.split()[:2] == ["config", "ranks"] and "state MiB/rank" in head
    cells = line.split()
    assert cells[:2] == ["fp32", "2"]
    # state and RSS: two values each, rank 0's and rank 1's (no GPU here: peak GiB is "-")
    assert [c.count("/") for c in cells[-3:]] == ([1, 1, 1] if row["peak_gib"] else [0, 1, 1])


def test_the_budget_counts_the_rank_start_up():
    bench = _bench()
    assert bench.expected_startup({}, 2) == 0.0
    assert bench.expected_startup({1: 12.0}, 2) == 12.0  # a count not run yet: the longest
    assert bench.expected_startup({1: 12.0, 2: 30.0}, 1) == 12.0
    assert bench.expected_startup({None: 3.0, 2: 30.0}, 4) == 30.0


def test_more_ranks_than_this_machine_has_are_refused_before_any_work(tmp_path, capsys):
    too_many = _rank_room() + 1
    out = tmp_path / "gpu.json"
    assert _bench().main(["--tiny", "--ranks", f"1,{too_many}", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and f"--ranks {too_many} refused" in captured.err
    assert "fewer than one per rank" in captured.err or "CUDA device(s)" in captured.err
    assert captured.out == "" and not out.exists()  # no model built, nothing run
