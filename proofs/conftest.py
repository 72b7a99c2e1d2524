"""Pytest glue for proofs/: the terminal summary with state counts, proof times and the mutant
kill table (collected in ``proofs.report``); every test here carries the ``proofs`` marker
(``make test-fast`` leaves them out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proofs import report

_HERE = Path(__file__).parent

# Long sections first, so the short tables end up next to the final result line.
_ORDER = ["mutant counterexamples (shortest, from the model checker)",
          "model checking: real StalenessController, exhaustive", "Z3 proofs",
          "Z3 refinement (Hypothesis)", "Hypothesis state machine", "mutant kill table"]


def pytest_sessionfinish(session, exitstatus):
    # On a pytest-xdist worker (`make test` runs two): hand the sections to the controller,
    # which prints the summary (pytest_testnodedown below).
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["proofs_sections"] = {t: list(lines) for t, lines in report.SECTIONS.items()}


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: inert without it
def pytest_testnodedown(node, error):
    for title, lines in getattr(node, "workeroutput", {}).get("proofs_sections", {}).items():
        report.SECTIONS.setdefault(title, []).extend(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    titles = sorted(report.SECTIONS, key=lambda t: _ORDER.index(t) if t in _ORDER else -1)
    for title in titles:
        terminalreporter.write_sep("=", title)
        for line in report.SECTIONS[title]:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config, items):
    # A conftest's collection hook sees the whole session's items: mark only those under proofs/.
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.proofs)
