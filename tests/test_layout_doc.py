"""README's "Layout" table draws the repository as it is (issue 35): every top-level package
has a row, and README and ``runtime/__init__.py`` say the same thing about what ``runtime/``
is, the production path and only it. (Before: the docstring called ``runtime`` "thin bindings
... the discrete-event simulator and the command line" while README called it the production
path.)"""

from __future__ import annotations

import re
from pathlib import Path

import runtime

ROOT = Path(__file__).resolve().parents[1]


def _layout_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)`(?:, `[^`]+`)* \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_top_level_package_has_a_row():
    packages = sorted(p.name for p in ROOT.iterdir()
                      if (p / "__init__.py").is_file() and p.name not in ("tests", "bench"))
    rows = _layout_rows()
    missing = [p for p in packages if not any(r.split("/")[0] == p for r in rows)]
    assert missing == [], missing


def test_readme_and_the_package_docstring_say_what_runtime_is():
    row = _layout_rows()["runtime/"]
    assert row.startswith("the production path, and only it")
    assert runtime.__doc__.startswith("The production path, and only it")
    for tool in ("reserve_occupy_sim", "reserve_occupy_porting", "reserve_occupy_faults"):
        assert tool in runtime.__doc__  # named as what lives beside it, not in it
