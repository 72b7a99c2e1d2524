"""The runtime driver's step records and notes over a run (issue 38, item 4): what it holds in
memory per step at scale, on the old in-memory path and on the session's bounded one.

Runs ``runtime.driver.Driver`` on the scripted fake engine and fake trainer under the virtual
clock (no model, no engine), ``--groups`` groups of ``--samples`` samples a step, twice:
``memory``, a driver built with the defaults (every ``StepRecord`` kept in ``driver.records``,
every note in the list ``driver.notes``: what a library user or a test gets, and what the
session held before), and ``session``, built as ``runtime.session`` builds it
(``keep_records=False``, the notes streamed to a ``driver_notes.jsonl`` in a temporary folder by
``runtime.notes.NoteLog``). ``--path`` picks one.

Prints per ``--every`` steps: the records held and their pickled size, the note entries held and
their size as JSON lines, and the notes written to the file. Sizes are serialised bytes, a proxy
for the memory the objects take (Python's objects take more). Asserts nothing.

    python bench/driver_memory.py --groups 1024 --samples 16 --steps 10 --every 2
"""

from __future__ import annotations

import json
import pickle
import sys as _sys
import tempfile
from pathlib import Path as _Path

if str(_Path(__file__).resolve().parents[1]) not in _sys.path:
    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

from bench.cli import Parser, int_in  # noqa: E402

from runtime.clock import VirtualClock  # noqa: E402
from runtime.controller import make_controller  # noqa: E402
from runtime.driver import Driver  # noqa: E402
from runtime.records import DriverSettings  # noqa: E402
from runtime.rollout.fake import FakeRollout, FakeTrainer, random_script  # noqa: E402
from runtime.tasks.base import Prompt  # noqa: E402

PROMPTS = [Prompt(f"{i % 10}+{i // 10}=", str(i % 10 + i // 10), i) for i in range(1000)]


def _parity(prompt: Prompt, completion: str) -> float:
    return float(len(completion) % 2 == 0)


def _run(path: str, a, folder: _Path) -> None:
    clock = VirtualClock()
    settings = DriverSettings(max_staleness=a.eta, batch_size=a.groups, group_size=a.samples,
                              steps=a.steps, max_tokens=a.max_tokens, check_invariants=False)
    kw = {}
    log = None
    if path == "session":
        from runtime.notes import NoteLog

        log = NoteLog(folder / "driver_notes.jsonl")
        kw = {"notes": log, "keep_records": False}
    driver = Driver(settings, FakeRollout(clock, random_script(a.seed, max_len=a.max_tokens)),
                    FakeTrainer(clock, 0.05), _parity, PROMPTS, clock,
                    controller=make_controller(settings, clock.now), **kw)
    sizes = {"records": 0, "notes": 0, "seen": 0}

    def on_step(record) -> None:
        if driver.records and driver.records[-1] is record:
            sizes["records"] += len(pickle.dumps(record))
        if isinstance(driver.notes, list):  # the new entries since the last step
            new = driver.notes[sizes["seen"]:]
            sizes["seen"] = len(driver.notes)
            sizes["notes"] += sum(len(json.dumps(n, default=str)) + 1 for n in new)
        step = record.step + 1
        if step % a.every == 0 or step == 1:
            held_notes = len(driver.notes) if isinstance(driver.notes, list) else 0
            written = (folder / "driver_notes.jsonl").stat().st_size if log else 0
            print(f"{path:>8} {step:>5} {len(driver.records):>8} {sizes['records']:>14,} "
                  f"{held_notes:>11} {sizes['notes']:>13,} {len(driver.notes):>12} "
                  f"{written:>14,}", flush=True)

    driver.on_step = on_step
    clock.run(driver.run())
    if log is not None:
        log.close()


def main(argv: list[str] | None = None) -> None:
    p = Parser(prog="driver_memory.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int_in(1, 10**6), default=1024)
    p.add_argument("--samples", type=int_in(1, 4096), default=16)
    p.add_argument("--max-tokens", type=int_in(1, 10**6), default=32)
    p.add_argument("--eta", type=int_in(0, 1024), default=1)
    p.add_argument("--steps", type=int_in(1, 10**6), default=10)
    p.add_argument("--every", type=int_in(1, 10**6), default=2)
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0)
    p.add_argument("--path", choices=("both", "memory", "session"), default="both")
    a = p.parse_args(argv)
    print(f"{'path':>8} {'step':>5} {'records':>8} {'record bytes':>14} {'notes held':>11} "
          f"{'note bytes':>13} {'notes made':>12} {'file bytes':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for path in (("memory", "session") if a.path == "both" else (a.path,)):
            _run(path, a, _Path(tmp))


if __name__ == "__main__":
    main()
