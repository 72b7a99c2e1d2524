"""The driver's notes (``Driver.notes``: stream, train_chunk, occupy, abort, release_stuck,
rejected_completion, ...) as a session run keeps them: written to ``driver_notes.jsonl`` as
they happen, not held in memory (issue 38, item 4: a run of thousands of steps of 1,024 groups
would otherwise hold every note until it ends).

A driver built without ``notes=`` keeps a plain list (a library user's or a test's run reads it
after ``run()``); the session (``runtime.session``) passes a ``NoteLog``: with ``run.trace`` on
each note is one JSON line, flushed as it is written, so a crash leaves every note up to it in
the file (at most a torn last line, which a continuing run drops, as it drops the torn last line
of ``metrics.jsonl``: docs/recovery.md); with ``run.trace`` off the notes are counted and not
kept at all. The lines are those the session wrote at the run's end before: ``json.dumps`` of
the note (a resumed run's ``t`` counted on from the earlier incarnations' time), one per line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import atomic_io

NOTES_NAME = "driver_notes.jsonl"


class NoteLog:
    """A driver's notes streamed to ``path`` (None: counted, not kept). ``append``: a continuing
    run adds to the notes already there (a torn last line dropped first); else the file starts
    empty. ``t_offset``: added to each note's ``t`` (the seconds the earlier incarnations ran).
    ``default``: ``json.dumps``'s hook for what JSON cannot hold."""

    def __init__(self, path: Path | None, append: bool = False, t_offset: float = 0.0,
                 default: Callable[[Any], Any] | None = None) -> None:
        self.path = path
        self.t_offset = t_offset
        self._default = default
        self._count = 0
        self._file: Any = None
        self.error: OSError | None = None  # the write that failed; nothing written after it
        self._start = 0
        if path is not None:
            # a link, fifo or directory there is refused (NotReplaceable), not written through,
            # as the end-of-run atomic write refused it
            atomic_io.check_replaceable(path)
            if append and path.is_file():
                keep_whole_lines(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a" if append else "w", encoding="utf-8")
            self._start = self._file.tell()

    def append(self, row: dict[str, Any]) -> None:
        """Write the note (one line, flushed). A note that cannot be serialised raises and
        leaves no part of its line in the file (it is serialised before anything is written).
        A write the disk refuses (``OSError``: a full disk) does not raise here, inside the
        driver, where it would stop whatever the driver was doing (an abort loop of the
        stop, say) half done: the notes are a report, not the run's state. It is kept as
        ``error``, the file closed, and nothing written after it (a line it tore is the torn
        last line a continuing run drops); the session raises it once the run has ended."""
        if self._file is not None:
            if self.t_offset and isinstance(row.get("t"), (int, float)):
                row = {**row, "t": row["t"] + self.t_offset}
            line = json.dumps(row, default=self._default) + "\n"
            try:
                self._file.write(line)
                self._file.flush()
            except OSError as exc:
                self.error = exc
                self._abandon()
        self._count += 1

    def _abandon(self) -> None:
        """Close the file after a failed write; what its buffer still holds may fail again."""
        file, self._file = self._file, None
        try:
            file.close()
        except OSError:
            pass

    def __len__(self) -> int:
        """The notes this process appended (written or, without a path, only counted)."""
        return self._count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """This process's notes, read back from the file as written (``t`` with the offset);
        nothing without a path. For a reader after the run (a test), not for the driver."""
        if self.path is None:
            return iter(())
        if self._file is not None:
            self._file.flush()
        with self.path.open(encoding="utf-8") as f:
            f.seek(self._start)
            return iter([json.loads(line) for line in f if line.strip()])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def keep_whole_lines(path: Path) -> None:
    """Rewrite ``path`` (whole or not at all: ``atomic_io``) as the notes a continuing run
    adds to: its lines without blank ones, a last line without its newline given one if it is
    a JSON object and dropped otherwise (the line a crash tore). Reads line by line."""
    with path.open(encoding="utf-8") as earlier, \
            atomic_io.atomic(path) as f:
        for line in earlier:
            if not line.strip():
                continue
            if not line.endswith("\n"):  # the last line: complete, or torn by a crash
                try:
                    whole = isinstance(json.loads(line), dict)
                except ValueError:
                    whole = False
                if not whole:
                    break
                line += "\n"
            f.write(line)
