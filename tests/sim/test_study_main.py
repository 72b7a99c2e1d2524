"""pages.study_main: the command line the small evidence studies beside the regime map share
(regimes_stretch, regimes_drift): it writes the payload where --results-dir says, prints the
table, and leaves the repository's pages alone when the results go elsewhere."""

from __future__ import annotations

import json

import pytest

from reserve_occupy_sim.studies import pages


def test_it_writes_the_payload_and_prints_the_table(tmp_path, capsys):
    calls = []

    def compute():
        calls.append(1)
        return {"cells": [1, 2, 3]}

    rc = pages.study_main(["--results-dir", str(tmp_path / "out")], "A study.\n\nMore.",
                          "a_study.json", compute, lambda p: f"| {sum(p['cells'])} |")
    assert rc == 0 and calls == [1]
    assert json.loads((tmp_path / "out" / "a_study.json").read_text()) == {"cells": [1, 2, 3]}
    out = capsys.readouterr().out
    assert "| 6 |" in out and "rewrote" not in out  # pages only for docs/results


def test_a_bad_argument_is_refused_before_anything_runs(tmp_path):
    calls = []
    with pytest.raises(SystemExit) as exc:
        pages.study_main(["--no-such"], "A study.", "a_study.json",
                         lambda: calls.append(1) or {}, str)
    assert exc.value.code == 2 and calls == []
