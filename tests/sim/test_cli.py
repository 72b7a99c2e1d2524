"""The ``simulate`` subcommand end to end, through the project's own command line."""

from __future__ import annotations

import json

import pytest

from runtime.cli import main


def test_compare_policies_writes_json_and_plots(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["simulate", "--policy", "nemo_in_order,reserve_occupy,verl_drop", "--eta", "1,2",
               "--batches", "3", "--groups", "96", "--out", str(out), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| η | policy" in text and "Reserve–Occupy" in text and "1.00×" in text
    payload = json.loads((out / "results.json").read_text())
    assert len(payload["runs"]) == 6
    assert payload["runs"][0]["policy"] == "reserve_occupy"  # the reference goes first
    for name in ("throughput.png", "staleness_reserve_occupy.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_user_workload_and_cost_file(tmp_path, capsys):
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps({"group": i, "prompt_len": 50 + i,
                                           "response_lens": [100 + 7 * i, 300, 40, 900]})
                               for i in range(40)))
    cost = tmp_path / "c.json"
    cost.write_text(json.dumps({"preset": "toy", "concurrency": 4}))
    rc = main(["simulate", "--policy", "reserve_occupy", "--eta", "1", "--batches", "4",
               "--batch-size", "2", "--workload", str(jsonl), "--cost", str(cost), "--no-progress"])
    assert rc == 0
    assert "t.jsonl (40 groups of 4), cost toy" in capsys.readouterr().out


def test_malformed_workload_is_one_clear_line(tmp_path, capsys):
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"group": 1, "prompt_len": 5, "response_lens": [1, 2]}\n'
                     '{"group": 2, "prompt_len": 5, "response_lens": [1, "x"]}\n')
    rc = main(["simulate", "--trace", str(jsonl), "--no-progress"])  # the older flag
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().count("\n") == 0 and "bad.jsonl:2:" in err and "'response_lens'[1]" in err


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["simulate", "--policy", "nope", "--no-progress"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert main(["simulate", "--eta", "1,x", "--no-progress"]) == 2
    assert main(["simulate", "--preset", "h100", "--no-progress"]) == 2
    assert "unknown preset" in capsys.readouterr().err


def test_list(capsys):
    assert main(["simulate", "list"]) == 0
    text = capsys.readouterr().out
    assert "reserve_occupy" in text and "qwen3-8b-h20" in text and "NVIDIA-NeMo/RL@7ea279ab" in text


def test_experiments_subset_runs(tmp_path, capsys, monkeypatch):
    # the experiments entry point with tiny sizes (the full run is `make sim-experiments`)
    import reserve_occupy_sim.studies.experiments as ex

    monkeypatch.setattr(ex, "EXP2_POLICIES", ("reserve_occupy", "nemo_in_order"))
    real_exp3 = ex.exp3
    monkeypatch.setattr(ex, "exp3", lambda w, c, **kw: real_exp3(w, c, batches=3, etas=(0, 1),
                                                                 progress=False))
    rc = main(["simulate", "experiments", "--only", "3", "--groups", "64",
               "--results-dir", str(tmp_path / "r"), "--img-dir", str(tmp_path / "i"),
               "--no-progress"])
    assert rc == 0
    assert (tmp_path / "r" / "exp3_ceiling.json").exists()
    assert (tmp_path / "i" / "sim_exp3_ceiling.png").exists()
    assert "unbounded" in capsys.readouterr().out


def test_filtering_and_timeout_from_the_command_line(capsys):
    rc = main(["simulate", "--policy", "reserve_occupy,nemo_in_order,verl_drop", "--eta", "1",
               "--batches", "4", "--batch-size", "4", "--groups", "96", "--filter-rate", "0.3",
               "--stuck-timeout", "30", "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "no gradient: filtered / trained" in text and "NeMo in_order" in text


def test_bad_filter_or_timeout_is_one_line(capsys):
    assert main(["simulate", "--filter-rate", "1.5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "filter rate" in err
    assert main(["simulate", "--stuck-timeout", "-3", "--no-progress"]) == 2
    assert "--stuck-timeout" in capsys.readouterr().err
    assert main(["simulate", "experiments", "--only", "7", "--no-progress"]) == 2
    assert "1 to 6" in capsys.readouterr().err


def test_regimes_tiny_writes_json_tables_and_heatmaps(tmp_path, capsys):
    rc = main(["simulate", "regimes", "--tiny", "--results-dir", str(tmp_path / "r"),
               "--img-dir", str(tmp_path / "i"), "--no-progress"])
    assert rc == 0
    assert "regime (of RO's runs)" in capsys.readouterr().out
    payload = json.loads((tmp_path / "r" / "regimes.json").read_text())
    assert payload["cells"] and payload["definitions"]["trainer_idle_max"] == 0.10
    assert "## exp6_regimes" in (tmp_path / "r" / "tables.md").read_text()
    for name in ("sim_regimes_hardware.png", "sim_regimes_filtering.png"):
        assert (tmp_path / "i" / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_tiny_sweep_never_writes_into_docs(tmp_path, monkeypatch):
    # Run from a directory laid out like a checkout: the tiny sweep's defaults must not replace
    # the shipped results of the full sweep (docs/results, docs/img).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs" / "results").mkdir(parents=True)
    assert main(["simulate", "regimes", "--tiny", "--no-progress"]) == 0
    assert not any((tmp_path / "docs").rglob("*.*"))
    assert (tmp_path / "out" / "sim-tiny" / "results" / "regimes.json").is_file()
    assert (tmp_path / "out" / "sim-tiny" / "img" / "sim_regimes_hardware.png").is_file()
