"""The OpenRLHF table in docs/porting/openrlhf.md is what ``bench/openrlhf_compare.py --write``
last measured: the benchmark writes docs/results/openrlhf_compare.json and the table from it,
and this test renders the table from the file again (a hand edit, or a results file without its
table, fails). Needs neither OpenRLHF nor Ray."""

from __future__ import annotations

import json

from tests.runtime.helpers import load_bench


def test_the_docs_table_is_rendered_from_the_results_file():
    bench = load_bench("openrlhf_compare")
    results = json.loads(bench.RESULTS.read_text())
    assert bench.doc_block(bench.DOC.read_text()) == bench.render(results)
    runs = results["runs"]
    assert {r["run"] for r in runs} == {name for name, _ in bench.RUNS}
    assert all(r["trace_ok"] for r in runs if r["run"].startswith("+ Reserve"))


def test_a_changed_number_is_caught():
    bench = load_bench("openrlhf_compare")
    results = json.loads(bench.RESULTS.read_text())
    results["runs"][0]["stale_max"] += 1
    assert bench.doc_block(bench.DOC.read_text()) != bench.render(results)
