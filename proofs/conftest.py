"""Pytest glue for proofs/: the terminal summary with state counts, proof times and the mutant
kill table (collected in ``proofs.report``)."""

from __future__ import annotations

from proofs import report

# Long sections first, so the short tables end up next to the final result line.
_ORDER = ["mutant counterexamples (shortest, from the model checker)",
          "model checking: real StalenessController, exhaustive", "Z3 proofs",
          "Z3 refinement (Hypothesis)", "Hypothesis state machine", "mutant kill table"]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    titles = sorted(report.SECTIONS, key=lambda t: _ORDER.index(t) if t in _ORDER else -1)
    for title in titles:
        terminalreporter.write_sep("=", title)
        for line in report.SECTIONS[title]:
            terminalreporter.write_line(line)
