"""Pytest glue for proofs/: the terminal summary with state counts, proof times and the mutant
kill table (collected in ``proofs.report``)."""

from __future__ import annotations

from proofs import report


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ANN001, ARG001
    for title, lines in report.SECTIONS.items():
        terminalreporter.write_sep("=", title)
        for line in lines:
            terminalreporter.write_line(line)
