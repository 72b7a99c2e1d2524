"""``bench/gpu_trainer.py`` is prepared for a GPU machine this suite never has: every one of
its configurations runs here with ``--tiny`` on CPU, and without CUDA the full run says why
it cannot start."""

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
    assert _bench().main(["--tiny", "--configs", "fp16"]) == 2
    assert "unknown --configs ['fp16']" in capsys.readouterr().err
