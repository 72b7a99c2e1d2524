"""What ``pytest proofs/`` measured, printed in the terminal summary (``proofs/conftest.py``).

Tests append lines to a named section; the summary prints every section that has lines, so the
numbers show in a normal run without ``-s``.
"""

from __future__ import annotations

SECTIONS: dict[str, list[str]] = {}


def add(section: str, line: str) -> None:
    SECTIONS.setdefault(section, []).append(line)
