"""The generated tables of docs/: each benchmark that writes one keeps it between a BEGIN and an
END marker of its page, and its doc test renders the table from the committed results file
with the benchmark's own code and compares it with what the page holds. This module is the
one place that finds the block and rewrites it (the benchmarks had a copy each)."""

from __future__ import annotations

from pathlib import Path


def between(text: str, begin: str, end: str) -> str:
    """What stands between the markers (without the blank lines next to them); ``ValueError``
    naming the marker if one is missing."""
    for marker in (begin, end):
        if marker not in text:
            raise ValueError(f"the page has no marker {marker!r}")
    start = text.index(begin) + len(begin)
    return text[start:text.index(end, start)].strip("\n")


def splice(doc: Path, begin: str, end: str, body: str) -> None:
    """Put ``body`` between the markers of ``doc``, keeping the rest of the page as it is."""
    text = doc.read_text()
    between(text, begin, end)  # both markers there, END after BEGIN
    start = text.index(begin) + len(begin)
    doc.write_text(text[:start] + "\n" + body + "\n" + text[text.index(end, start):])
