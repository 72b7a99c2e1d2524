"""The StaleFlow page's study: PSRL's example shape as the simulator takes it, and its table
computed from the runs (ratios per seed, stalled rows marked), never typed."""

from __future__ import annotations

import pytest

from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.studies import staleflow


def test_the_cost_model_is_the_preset_with_the_example_layout():
    base, c = preset("qwen3-8b-h20"), staleflow.example_cost()
    assert c.instances == staleflow.EXAMPLE["rollout_instances"] == 16
    assert c.train.per_token_s == pytest.approx(base.train.per_token_s * 6 / 16)
    assert c.train.per_token_sq_s == pytest.approx(base.train.per_token_sq_s * 6 / 16)
    assert c.train.pipeline_stages == 1 and c.train.fixed_s == base.train.fixed_s
    assert c.rollout == base.rollout and c.concurrency == base.concurrency
    shape = staleflow.example_shape(256)
    assert (shape.max_prompt, shape.max_response, shape.group_size) == (1024, 10240, 8)


def _payload():
    runs = []
    for seed, scale in ((0, 1.0), (1, 1.1)):
        for row, tok in (("RO full", 100.0), ("RO stream in-flight", 120.0),
                         ("verl V1 drop", 80.0)):
            runs.append({"seed": seed, "eta": 2, "row": row, "steady": tok * scale,
                         "max_staleness": 2, "trainer_idle": 0.04 + 0.06 * seed,
                         "length_ratio": 0.9 if row == "verl V1 drop" else 1.0,
                         "waste": 0.25 if row == "verl V1 drop" else 0.0})
        runs.append({"seed": seed, "eta": 2, "row": "tinker", **(
            {"stalled": "wedged"} if seed == 1 else {"steady": 50.0, "max_staleness": 1,
                                                     "trainer_idle": 0.5,
                                                     "length_ratio": 1.0, "waste": 0.0})})
    return {"setting": {"seeds": [0, 1], "etas": [2]}, "runs": runs}


def test_the_table_is_computed_from_the_runs():
    lines = staleflow.table(_payload()).splitlines()
    verl = next(line for line in lines if "verl V1 drop" in line)
    cells = [c.strip() for c in verl.strip("|").split("|")]
    assert cells[2] == "84"  # (80 + 88) / 2
    assert cells[3] == "1.25 [1.25]" and cells[4] == "1.50 [1.50]"
    assert cells[5:] == ["7 %", "2", "0.900", "25.0 %"]  # idle: (4 + 10) / 2 %
    tinker = next(line for line in lines if "tinker" in line)
    assert "tinker (1 stalled)" in tinker and "2.00 [2.00]" in tinker
    rows = [line.split("|")[2].strip() for line in lines[2:]]
    assert rows[:2] == ["RO full", "RO stream in-flight"]  # ROWS order, absent rows left out


@pytest.mark.parametrize("argv", [["--eta", "2000"], ["--batches", "1"], ["--seeds", "x"]])
def test_the_command_refuses_bad_options_before_running(argv, tmp_path, capsys):
    assert staleflow.main(argv + ["--results-dir", str(tmp_path)]) == 2
    assert "error" in capsys.readouterr().err
