"""A session run's driver holds O(1) records and notes over the run's life (issue 38, item 4):
it keeps no ``StepRecord`` (the metrics sink writes each step's row) and streams its notes to
``driver_notes.jsonl`` as they happen (``runtime.notes.NoteLog``), keeping none, and with
``run.trace`` off keeps none and writes none. The file is the one the old end-of-run write
gave, byte for byte; a crash leaves every note up to it in the file; a continuing run appends,
dropping a torn last line. The runs use the fake engine with the real trainer on the tiny model.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli import main

ROOT = Path(__file__).resolve().parents[2]
FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]


def _notes_held(notes) -> int:
    """Note entries the driver's ``notes`` holds in memory: a list's length, or the entries of
    every container a sink object keeps."""
    if isinstance(notes, list):
        return len(notes)
    return sum(len(v) for v in vars(notes).values() if isinstance(v, (list, dict, set, tuple)))


class Shadow:
    """Wraps the driver's notes and keeps a copy of each note as the driver appended it: what
    the old in-memory path held, to write the old file from."""

    def __init__(self, inner) -> None:
        self.inner, self.rows = inner, []

    def append(self, row) -> None:
        self.rows.append(dict(row))
        self.inner.append(row)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        return iter(self.inner)


def _old_lines(rows, t_offset: float = 0.0) -> list[str]:
    """The old ``session._write_outputs``'s lines for these notes."""
    from runtime.session import _jsonable

    out = []
    for row in rows:
        if t_offset and isinstance(row.get("t"), (int, float)):
            row = {**row, "t": row["t"] + t_offset}
        out.append(json.dumps(row, default=_jsonable) + "\n")
    return out


def _session(run_dir: Path, tiny_model, steps: int, hook, trace: bool = True):
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.session import run_training
    from runtime.tasks.base import load_reward

    cfg = load_config(None, {
        "rollout.backend": "fake", "run.progress": False, "run.plot": False,
        "run.eval_prompts": 0, "run.output_dir": str(run_dir), "run.steps": steps,
        "run.trace": trace, "staleness.batch_size": 4, "staleness.group_size": 4,
        "staleness.max_staleness": 1})
    reward = load_reward(cfg.reward.name, **cfg.reward.options)
    return asyncio.run(run_training(cfg, tiny_model, load_prompts(cfg.data.path), reward,
                                    run_dir, log=lambda _: None, driver_hook=hook))


@pytest.mark.parametrize("trace", [True, False])
def test_the_sessions_driver_holds_no_records_and_no_notes(tmp_path, tiny_model, trace):
    """Counted at every step of an 8-step run: the records and note entries the driver holds.
    Before: one more record each step (1 .. 8) and every note so far."""
    held: list[tuple[int, int]] = []

    def hook(driver):
        inner = driver.on_step

        def on_step(record):
            held.append((len(driver.records), _notes_held(driver.notes)))
            inner(record)

        driver.on_step = on_step

    result = _session(tmp_path / "run", tiny_model, 8, hook, trace=trace)
    assert len(held) == 8 and len(result.rows) == 8
    assert max(h for pair in held for h in pair) == 0, held
    made = len(result.driver.notes)  # the notes the driver made: counted either way
    assert made > 0
    path = tmp_path / "run" / "driver_notes.jsonl"
    if trace:
        assert len(path.read_text().splitlines()) == made
    else:
        assert not path.exists()


def test_the_notes_are_streamed_and_the_file_is_the_old_one(tmp_path, tiny_model):
    """At every step the file already holds every note so far, as the old end-of-run write
    wrote them; at the end it is that file byte for byte, and ``driver.notes`` reads it back.
    Before: no file until the run ended (FileNotFoundError at the first step)."""
    out = tmp_path / "run"
    shadows: list[Shadow] = []

    def hook(driver):
        shadow = Shadow(driver.notes)
        shadows.append(shadow)
        driver.notes = shadow
        inner = driver.on_step

        def on_step(record):
            written = (out / "driver_notes.jsonl").read_text()
            assert written == "".join(_old_lines(shadow.rows))
            inner(record)

        driver.on_step = on_step

    result = _session(out, tiny_model, 5, hook)
    rows = shadows[0].rows
    assert rows and (out / "driver_notes.jsonl").read_text() == "".join(_old_lines(rows))
    assert [n["event"] for n in result.driver.notes] == [r["event"] for r in rows]


_CRASH = """
import os, sys
from runtime import metrics
from runtime.cli import main

real = metrics.MetricsSink.__call__

def crash_after(self, record):
    real(self, record)
    if record.step == {step}:
        os._exit(9)  # a hard kill: no finally block runs

metrics.MetricsSink.__call__ = crash_after
sys.exit(main({argv!r}))
"""


def test_a_crash_leaves_the_notes_up_to_it_and_the_resumed_run_appends(tmp_path, tiny_model):
    """A process killed hard after step 2's row leaves ``driver_notes.jsonl`` with whole lines,
    an ``occupy`` note for every unit its streamed event log consumed; the resumed run keeps
    those lines as they were and adds its own after them, later in time.
    Before: the notes were written only at the run's end (no file after the kill)."""
    out = tmp_path / "run"
    argv = ["train", *FAKE, "--steps", "6", "--output-dir", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", _CRASH.format(step=2, argv=argv)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 9, done.stderr[-2000:]
    notes_path = out / "driver_notes.jsonl"
    assert notes_path.is_file()
    before = notes_path.read_bytes()
    assert before.endswith(b"\n")
    notes = [json.loads(x) for x in before.decode().splitlines()]
    occupied = {n["unit"] for n in notes if n["event"] == "occupy"}
    consumed = {u["unit"] for x in (out / "events.jsonl").read_text().splitlines()[1:]
                for u in (json.loads(x).get("batch") or {}).get("units", ())}
    assert len(consumed) >= 3 * 4 and consumed <= occupied
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert main(["train", "--resume", str(out), "--no-progress", "--steps", "6"]) == 0
    after = notes_path.read_bytes()
    assert after.startswith(before) and len(after) > len(before)
    added = [json.loads(x) for x in after[len(before):].decode().splitlines()]
    assert min(n["t"] for n in added) >= rows[-1]["time_s"] - 1e-3


def test_a_continuing_run_drops_a_torn_last_note(tmp_path, tiny_model):
    """A notes file whose last line a crash tore (no newline, not JSON): the resumed run drops
    that fragment and appends; every line is a note. Before: the fragment was given a newline
    and kept, and the file no longer read (json.JSONDecodeError)."""
    out = tmp_path / "run"
    assert main(["train", *FAKE, "--steps", "3", "--output-dir", str(out)]) == 0
    path = out / "driver_notes.jsonl"
    whole = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"t": 1.5, "event": "occ')
    assert main(["train", "--resume", str(out), "--no-progress", "--steps", "4"]) == 0
    after = path.read_bytes()
    assert after.startswith(whole) and len(after) > len(whole)
    assert all(isinstance(json.loads(x), dict) for x in after.decode().splitlines())


def test_a_complete_last_note_without_its_newline_is_kept(tmp_path):
    """``keep_whole_lines``: a last line that is a whole note keeps it (given its newline, as
    the old copy did), blank lines go, a torn one is dropped; the file is rewritten in place."""
    from runtime.notes import NoteLog

    path = tmp_path / "driver_notes.jsonl"
    path.write_text('{"t": 0.5, "event": "a"}\n\n{"t": 1.0, "event": "b"}')
    log = NoteLog(path, append=True, t_offset=2.0)
    log.append({"t": 0.25, "event": "c", "slot": (1, 2)})
    log.close()
    assert path.read_text() == ('{"t": 0.5, "event": "a"}\n{"t": 1.0, "event": "b"}\n'
                                '{"t": 2.25, "event": "c", "slot": [1, 2]}\n')
    assert len(log) == 1 and list(log) == [{"t": 2.25, "event": "c", "slot": [1, 2]}]
    path.write_text('{"t": 0.5, "event": "a"}\n{"t": 1.0, "ev')
    NoteLog(path, append=True).close()
    assert path.read_text() == '{"t": 0.5, "event": "a"}\n'


def test_a_link_where_the_notes_go_is_refused_not_written_through(tmp_path):
    """A symbolic link (here a dangling one) at the notes' name is refused before anything is
    written, new run or continuing, as the old end-of-run atomic write refused it."""
    from runtime.atomic_io import NotReplaceable
    from runtime.notes import NoteLog

    path, target = tmp_path / "driver_notes.jsonl", tmp_path / "elsewhere.jsonl"
    path.symlink_to(target)
    for append in (False, True):
        with pytest.raises(NotReplaceable, match="symbolic link"):
            NoteLog(path, append=append)
    assert not target.exists() and path.is_symlink()
