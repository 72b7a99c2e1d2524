"""``make bench-export`` (bench/export_push.py): its refusals, one line and exit 2 each, and one
small size end to end over two ranks (no engine: the push is the runtime's
``VLLMRollout.load_weights``, tested with the real engine in test_vllm_refit.py). The bench's
numbers are its output, not asserted; what is asserted is structural (what the streamed file
holds is tested in test_safetensors_writer.py and test_sharded_trainer.py)."""

from __future__ import annotations

import json

import pytest

from .helpers import load_bench


@pytest.mark.parametrize("argv, needle", [
    (["--sizes", "h256x4,7b"], "--sizes: unknown 7b (choose from h256x4"),
    (["--sizes", ","], "--sizes: unknown (none given)"),
    (["--ranks", "0"], "--ranks 0: between 1 and the"),
    (["--ranks", "4096"], "--ranks 4096: between 1 and the"),
    (["--repeats", "0"], "--repeats 0: at least 1"),
])
def test_bad_arguments_are_refused_in_one_line(argv, needle, capsys, tmp_path):
    bench = load_bench("export_push")
    assert bench.main([*argv, "--work", str(tmp_path / "w"), "--out",
                       str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "w").exists() and not (tmp_path / "o.json").exists()


def test_table_of_a_saved_run_and_a_file_it_did_not_write(tmp_path, capsys):
    bench = load_bench("export_push")
    row = {"size": "h256x4", "params": 12_100_000, "file_bytes": 48 * 2**20,
           "single": {"export_s": 0.08, "rss_rise": 43 * 2**20},
           "streamed": {"export_s": 0.7, "rss_rise": 61 * 2**20, "start_s": 15.0},
           "whole": {"export_s": 0.6, "rss_rise": 114 * 2**20, "start_s": 13.0},
           "push": {"push_s": 0.24, "start_s": 24.0}}
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps({"ranks": 2, "repeats": 3, "seconds": 1.0, "rows": [row]}))
    assert bench.main(["--table", str(saved)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == ("| h256x4 | 12.1 M | 48 | 0.08 | 0.70 | 0.60 | 0.24 | 0.32 | 0.94 | 43 | "
                    "61 | 114 |")
    (tmp_path / "other.json").write_text("[1, 2]")
    assert bench.main(["--table", str(tmp_path / "other.json")]) == 2
    assert "not a file this bench wrote" in capsys.readouterr().err


@pytest.mark.slow
def test_the_smallest_size_end_to_end_over_two_ranks(tmp_path, capsys):
    bench = load_bench("export_push")
    out = tmp_path / "r.json"
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "mine.txt").write_text("a user's file")  # --work is a directory of theirs
    assert bench.main(["--sizes", "h256x4", "--repeats", "1", "--no-engine", "--ranks", "2",
                       "--work", str(tmp_path / "w"), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    (row,) = res["rows"]
    assert row["size"] == "h256x4" and 11e6 < row["params"] < 13e6
    # fp32, tied embeddings stored once: the file is the parameters' bytes plus its header
    assert 4 * row["params"] < row["file_bytes"] < 4 * row["params"] + 2**16
    for path in ("single", "streamed", "whole"):
        assert row[path]["export_s"] > 0 and row[path]["rss_rise"] >= 0
    assert "push" not in row
    assert "| h256x4 | 12.1 M |" in capsys.readouterr().out
    # the models and weights are removed, and nothing else of --work (the bench deleted the
    # whole directory before)
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["mine.txt"]


def test_the_docs_table_is_rendered_from_the_results_file():
    """docs/runtime.md's export-push block is what ``make bench-export`` last measured: the
    bench's own ``render`` of docs/results/export_push.json (a hand edit fails)."""
    from bench.docblock import between

    bench = load_bench("export_push")
    results = json.loads(bench.RESULTS.read_text())
    page = between(bench.DOC.read_text(), bench.BEGIN, bench.END)
    assert page == bench.render(results)
    assert [r["size"] for r in results["rows"]][-1] == "qwen2.5-0.5b"  # 0.5 B measured
    assert results["rows"][-1]["params"] > 490e6 and "push" in results["rows"][-1]
    results["rows"][-1]["streamed"]["export_s"] += 1.0
    assert page != bench.render(results)
