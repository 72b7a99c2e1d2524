"""A full disk while the driver writes a note (``runtime.notes.NoteLog``, driver_notes.jsonl
streamed as the run goes, ``run.trace``): the write's ``OSError`` is kept, not raised inside
the driver, where it stopped whatever the driver was doing half done (a note is written in the
middle of its operations: ``_close_aborted`` notes an abort before it stops the group's
requests, inside the stop's abort loop); nothing is written after it, and the session raises it
once the run has ended (the CLI's exit 74 for an output that cannot be written). The disk is
made full by a file object whose writes fail with ENOSPC after a number of notes."""

from __future__ import annotations

import errno
import json

import pytest

from runtime.notes import NoteLog

from .test_driver_memory_bounded import _session


class FullAfter:
    """A file whose writes fail with ENOSPC after ``n`` successful ones."""

    def __init__(self, inner, n: int) -> None:
        self.inner, self.left, self.closed = inner, n, False

    def write(self, text: str) -> int:
        if self.left <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= 1
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def tell(self) -> int:
        return self.inner.tell()

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def test_a_refused_write_is_kept_and_nothing_is_written_after_it(tmp_path):
    path = tmp_path / "driver_notes.jsonl"
    log = NoteLog(path)
    log._file = full = FullAfter(log._file, 2)
    for i in range(5):
        log.append({"t": float(i), "event": "occupy", "unit": f"g{i}"})  # never raises
    assert isinstance(log.error, OSError) and log.error.errno == errno.ENOSPC
    assert len(log) == 5 and full.closed
    assert [json.loads(x)["unit"] for x in path.read_text().splitlines()] == ["g0", "g1"]
    log.close()  # nothing left to close, nothing raised


def test_a_session_whose_notes_fill_the_disk_trains_its_steps_then_raises(tmp_path,
                                                                          tiny_model):
    run = tmp_path / "run"

    def hook(driver):
        driver.notes._file = FullAfter(driver.notes._file, 3)

    with pytest.raises(OSError) as exc:
        _session(run, tiny_model, 4, hook)
    assert exc.value.errno == errno.ENOSPC
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # every step trained and written
    assert len((run / "driver_notes.jsonl").read_text().splitlines()) == 3
