"""The README's table of claims cites numbers its pages show: every number in a claim's
"number" cell appears on one of the pages its "shown in" cell links, so a page whose table was
regenerated with different numbers leaves the README claim failing here, not silently stale.
Shown to fail on an edited claim (``test_an_edited_claim_is_caught``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"\d[\d,.]*\d|\d")


def claims(readme: str) -> list[tuple[str, list[str], list[str]]]:
    """(claim, numbers, linked pages) per row of the table under "What it claims"."""
    section = readme.split("## What it claims", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines()[3:]:
        if not line.startswith("| "):
            continue
        claim, number, shown = (c.strip() for c in line.strip().strip("|").split("|"))
        out.append((claim, NUMBER.findall(number), re.findall(r"\]\(([^)#]+)", shown)))
    return out


def unsupported(readme: str) -> list[str]:
    found = []
    for claim, numbers, links in claims(readme):
        text = "".join((ROOT / link).read_text(encoding="utf-8") for link in links)
        missing = [n for n in numbers if n not in text]
        if not links or missing:
            found.append(f"{claim!r}: {missing or 'no page'} not on {links}")
    return found


def test_every_claim_is_on_its_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(claims(readme)) >= 10
    assert unsupported(readme) == []


def test_an_edited_claim_is_caught():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    edited = readme.replace("in_order over 88 cells", "in_order over 888 cells")
    assert edited != readme
    (problem,) = unsupported(edited)
    assert "888" in problem and "docs/sim/regimes.md" in problem
