"""bench/docblock.py: the one place a benchmark's generated table is found and rewritten."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.docblock import between, splice  # noqa: E402

B, E = "<!-- b -->", "<!-- e -->"


def test_splice_replaces_only_the_block_and_between_reads_it_back(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(f"head {E} mention\n{B}\nold\n{E}\ntail {B}\n")
    splice(doc, B, E, "new\ntable")
    # an END marker quoted before the block is not taken for the block's end
    assert doc.read_text() == f"head {E} mention\n{B}\nnew\ntable\n{E}\ntail {B}\n"
    assert between(doc.read_text(), B, E) == "new\ntable"


def test_a_missing_marker_is_named_and_the_page_left_alone(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(f"{B}\nold\n")
    with pytest.raises(ValueError, match="no marker '<!-- e -->'"):
        splice(doc, B, E, "new")
    assert doc.read_text() == f"{B}\nold\n"
