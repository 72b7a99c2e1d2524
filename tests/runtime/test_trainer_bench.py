"""``make bench-trainer`` with sharded-trainer ranks: the table has a row per trainer and
mode, and the training state each rank holds (its shards of the parameters, gradients and
AdamW moments) at 2 ranks is half the single process's: a structural fact, not a timing."""

from __future__ import annotations

import json

import pytest

from .helpers import load_bench


@pytest.mark.slow
def test_the_trainer_bench_reports_per_rank_state_halved_at_two_ranks(tmp_path, capsys):
    bench = load_bench("trainer_bench")
    out = tmp_path / "r.json"
    assert bench.main(["--groups", "2", "--group-size", "3", "--max-response", "64",
                       "--budget", "256", "--steps", "1", "--ranks", "2", "--modes", "packed",
                       "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| single | packed |" in printed and "| 2 ranks | packed |" in printed
    res = {r["trainer"]: r for r in json.loads(out.read_text())["results"]}
    single, two = res["single"], res["2 ranks"]
    assert two["world"] == 2 and len({r["pid"] for r in two["ranks"]}) == 2
    # the optimiser has stepped: its moments are counted (AdamW: two per parameter)
    for r in (*single["ranks"], *two["ranks"]):
        assert r["optim"] >= 2 * r["params"] > 0 and r["grads"] == r["params"]
        assert r["peak_rss"] > r["params"]
    # each rank holds half (dim-0 shards, padded to equal size: within a few percent)
    for r in two["ranks"]:
        total = r["params"] + r["grads"] + r["optim"]
        assert 0.45 < total / single["state_bytes"] < 0.55, (total, single["state_bytes"])
    assert two["padding_frac"] == 0.0 and two["trained_tokens"] == single["trained_tokens"]
