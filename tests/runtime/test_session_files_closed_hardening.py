"""A session that fails before its run begins closes every file it opened: the metrics sink
(metrics.jsonl), the length log (lengths.jsonl) and the driver's notes (driver_notes.jsonl).
Two failures: a ``driver_hook`` that raises (the driver built, its files open), and a notes
file refused (a symbolic link where driver_notes.jsonl goes, ``NoteLog`` refusing it after
the sink and the length log opened theirs). Before, both left the files open: the session
built them outside the ``try`` that closes them. What shows a file left open is the
``ResourceWarning`` its object gives when collected; every one is recorded here."""

from __future__ import annotations

import gc
import warnings

import pytest

from .test_driver_memory_bounded import _session


class HookFailed(RuntimeError):
    pass


def _left_open(run, *args) -> list[str]:
    """The files of the run directory left open by ``run(*args)`` (which must raise)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        try:
            run(*args)
        except (HookFailed, OSError) as exc:
            failure = exc
        else:
            raise AssertionError("the session did not fail")
        del failure  # its traceback holds the session's frames (and the files in them)
        gc.collect()
    return sorted(str(w.message) for w in caught if issubclass(w.category, ResourceWarning))


def test_a_driver_hook_that_raises_leaves_no_file_open(tmp_path, tiny_model):
    def hook(driver):
        raise HookFailed("the hook")

    run = tmp_path / "run"
    left = _left_open(_session, run, tiny_model, 2, hook)
    assert not [w for w in left if str(run) in w], left


def test_a_refused_notes_file_leaves_no_file_open(tmp_path, tiny_model):
    from runtime.atomic_io import NotReplaceable

    run = tmp_path / "run"
    run.mkdir()
    (run / "driver_notes.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")

    def refused():
        with pytest.raises(NotReplaceable):
            _session(run, tiny_model, 2, None)
        raise HookFailed("refused as it should be")

    left = _left_open(refused)
    assert not [w for w in left if str(run) in w], left
    assert not (tmp_path / "elsewhere.jsonl").exists()
