"""``make bench`` keeps working: a tiny run prints every row and every ratio it promises.

Only the output's shape is checked; speed targets are read from a real run, never asserted.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "core_bench.py"


def test_core_bench_prints_both_batch_sizes_the_trigger_and_the_ratios(capsys):
    spec = importlib.util.spec_from_file_location("core_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    bench.main(["--units", "64", "--min-batches", "3", "--rounds", "1", "--trigger-calls", "200",
                "--oversampling"])
    out = capsys.readouterr().out
    assert "bare transitions trigger" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["16"], ["256"])]
    assert [r[:2] for r in rows] == [["16", "16"], ["16", "20"], ["256", "256"], ["256", "320"]]
    for ratio in ("consume+publish / pair at B=16", "consume+publish / pair at B=256",
                  "pair at B=256 / pair at B=16"):
        assert ratio in out
