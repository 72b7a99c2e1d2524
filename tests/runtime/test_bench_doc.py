"""The streaming table in docs/runtime.md is what ``make bench-runtime`` last measured: the
benchmark writes docs/results/runtime_bench.json and the table from it, and this test renders
the table from the file again (a hand edit, or a results file without its table, fails)."""

from __future__ import annotations

import json

from .helpers import load_bench


def _bench():
    return load_bench("runtime_bench")


def test_the_docs_table_is_rendered_from_the_results_file():
    bench = _bench()
    results = json.loads(bench.RESULTS.read_text())
    assert bench.doc_block(bench.DOC.read_text()) == bench.render(results)
    assert {(r["eta"], r["streaming"]) for r in results["runs"]} >= {(1, False), (1, True)}


def test_a_changed_number_is_caught():
    bench = _bench()
    results = json.loads(bench.RESULTS.read_text())
    results["runs"][0]["tail_s"] += 0.5
    assert bench.doc_block(bench.DOC.read_text()) != bench.render(results)
