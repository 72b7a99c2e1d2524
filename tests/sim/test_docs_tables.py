"""Every table of numbers in the simulator's docs is generated from docs/results/ and agrees
with it, as spec/state-machine.md agrees with the machine (tests/core/test_machine.py).

The check is shown to fail: on a copy of the docs with one number edited, on a copy of the
results with one number edited, on a hand-written numeric table outside the markers, and on
malformed markers.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from reserve_occupy_sim.studies import pages

ROOT = Path(__file__).resolve().parents[2]
SIM_PAGES = [ROOT / "docs" / "simulator.md", *sorted((ROOT / "docs" / "sim").glob("*.md"))]
# A cell that is a measured number: 1995, 0.99, 34.3%, 1.67×, 12,800, 0.99 [0.94, 1.08], ...
NUMBER_CELL = re.compile(r"^[-−+]?\d[\d,.]*\s*(%|×|s|ms)?(\s*\[[^\]]*\])?$")


def test_every_generated_block_agrees_with_its_results():
    assert pages.stale() == [], "\n".join(pages.stale())


def test_every_registered_block_is_shown_on_a_page():
    shown = {name for p in pages.pages() for name, _ in pages.blocks(p.read_text(), str(p))}
    assert shown == set(pages.BLOCKS), set(pages.BLOCKS) ^ shown


def _tables_outside_blocks(text: str) -> list[str]:
    """The first row of every pipe table outside the generated blocks that holds a number."""
    outside = pages.BLOCK.sub("", text)
    found, table = [], []
    for line in outside.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        cells = [c.strip() for row in table[2:] for c in row.strip("|").split("|")]
        if any(NUMBER_CELL.match(c) for c in cells):
            found.append(table[0])
        table = []
    return found


@pytest.mark.parametrize("page", SIM_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hand_written_table_of_numbers(page):
    assert _tables_outside_blocks(page.read_text(encoding="utf-8")) == []


def test_a_hand_written_table_of_numbers_is_found():
    text = "| η | tok/s |\n|---|---|\n| 1 | 1995 |\n\n| policy | L1 |\n|---|---|\n| a | b |\n"
    assert _tables_outside_blocks(text) == ["| η | tok/s |"]


def _copy_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("img"))
    return docs


def test_an_edited_number_on_a_page_is_caught_and_rewritten(tmp_path):
    docs = _copy_docs(tmp_path)
    page = docs / "sim" / "experiments.md"
    text = page.read_text(encoding="utf-8")
    body = dict(pages.blocks(text))["exp3"]
    edited = body.replace("2280", "2281", 1)
    assert edited != body
    page.write_text(text.replace(body, edited), encoding="utf-8")
    found = pages.stale(docs / "results", docs)
    assert len(found) == 1 and "experiments.md: block 'exp3'" in found[0], found
    assert "make sim-experiments" in found[0]
    assert pages.update(None, docs / "results", docs) == [page]
    assert page.read_text(encoding="utf-8") == text
    assert pages.stale(docs / "results", docs) == []


def test_an_edited_results_file_is_caught(tmp_path):
    docs = _copy_docs(tmp_path)
    tables = docs / "results" / "tables.md"
    old = tables.read_text(encoding="utf-8")
    start = old.index("## bound")
    new = old[:start] + old[start:].replace("1499", "1500", 1)
    assert new != old
    tables.write_text(new, encoding="utf-8")
    found = pages.stale(docs / "results", docs)
    assert len(found) == 1 and "bound.md: block 'bound'" in found[0], found
    assert "make sim-bound" in found[0]


def test_an_edited_results_json_is_caught(tmp_path):
    docs = _copy_docs(tmp_path)
    path = docs / "results" / "exp1_correctness.json"
    path.write_text(path.read_text().replace('"prompt_max": 618.0', '"prompt_max": 619.0'))
    found = pages.stale(docs / "results", docs)
    assert [f for f in found if "workload_stats" in f], found


def test_a_study_writing_elsewhere_leaves_the_pages_alone(tmp_path):
    assert pages.update(None, tmp_path) == []


@pytest.mark.parametrize("text,what", [
    ("<!-- BEGIN generated:nope -->\nx\n<!-- END generated:nope -->\n", "not registered"),
    ("<!-- BEGIN generated:exp1 -->\nx\n<!-- END generated:exp3 -->\n", "ends as"),
    ("<!-- BEGIN generated:exp1 -->\nx\n", "no partner"),
    ("x\n<!-- END generated:exp1 -->\n", "no partner"),
])
def test_malformed_markers_are_refused(text, what):
    with pytest.raises(pages.PageError, match=what):
        pages.rewrite(text)


def test_a_missing_results_source_is_named(tmp_path):
    with pytest.raises(pages.PageError, match="no results file"):
        pages.BLOCKS["exp1"].text(tmp_path)
    (tmp_path / "tables.md").write_text("## other\n\nx\n")
    with pytest.raises(pages.PageError, match="no section '## exp1'"):
        pages.BLOCKS["exp1"].text(tmp_path)


def test_a_block_registers_once_with_one_kind_of_source():
    with pytest.raises(pages.PageError, match="registered twice"):
        pages.register(pages.Block("exp1", "make x", "other.json", render=str))
    with pytest.raises(pages.PageError, match="section or a render"):
        pages.register(pages.Block("new_block", "make x", "tables.md"))
    assert "new_block" not in pages.BLOCKS


def test_a_render_function_can_be_named_by_path(tmp_path):
    (tmp_path / "r.json").write_text('{"table": "| a |\\n|---|\\n| 1 |"}')
    block = pages.Block("by_path", "make x", "r.json",
                        render="reserve_occupy_sim.studies.pages:frontier_table")
    assert block.text(tmp_path) == "| a |\n|---|\n| 1 |\n"


def test_sim_bound_writes_its_section_and_leaves_other_folders_pages_alone(tmp_path, capsys):
    from reserve_occupy_sim.studies import bound

    before = {p: p.read_text() for p in pages.pages()}
    assert bound.main(["--seeds", "0", "--eta", "1", "--batches", "5", "--batch-size", "4",
                       "--results-dir", str(tmp_path)]) == 0
    text = (tmp_path / "tables.md").read_text()
    assert text.startswith("## bound\n\n| η | upper bound tok/s |")
    assert pages.BLOCKS["bound"].text(tmp_path).splitlines()[2].startswith("| 1 | ")
    assert {p: p.read_text() for p in pages.pages()} == before
    (tmp_path / "file").write_text("")
    assert bound.main(["--results-dir", str(tmp_path / "file")]) == 2
    assert "--results-dir" in capsys.readouterr().err
