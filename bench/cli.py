"""The benches' command lines, held to the CLI's rules (docs/cli.md): each script its own
``--help``; every value checked before anything starts; bad input one line on stderr, exit 2.

``Parser`` is ``argparse.ArgumentParser`` whose errors are one line (``PROG: MESSAGE``, not the
usage block then the message), and the ``type=`` functions below refuse what ``int``/``float``
let through: NaN, infinities, out-of-range numbers, empty lists and empty paths. argparse calls
them while parsing, so a refusal comes before any import of torch or vLLM."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {' '.join(message.split())}\n")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """A whole number in ``[lo, hi]`` (``hi`` None: no upper bound)."""

    def parse(text: str) -> int:
        x = _int(text)
        if x < lo or (hi is not None and x > hi):
            raise argparse.ArgumentTypeError(
                f"{x} is out of range (at least {lo}" + (f", at most {hi})" if hi is not None
                                                         else ")"))
        return x
    return parse


def float_in(lo: float, hi: float = math.inf, lo_open: bool = False) -> Callable[[str], float]:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(x) or x < lo or (lo_open and x == lo) or x > hi:
            raise argparse.ArgumentTypeError(
                f"{text} is not a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}]")
        return x
    return parse


def int_list(lo: int, hi: int | None = None) -> Callable[[str], list[int]]:
    """Comma-separated whole numbers in ``[lo, hi]``, at least one."""
    one = int_in(lo, hi)

    def parse(text: str) -> list[int]:
        xs = [one(x.strip()) for x in text.split(",") if x.strip()]
        if not xs:
            raise argparse.ArgumentTypeError("names no value (comma-separated whole numbers)")
        return xs
    return parse


def out_path(text: str) -> Path:
    """A file the bench will write: not empty, not a directory or other non-regular file, in
    a folder that exists or can be made (checked again when written)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path with a NUL byte")
    path = Path(text)
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a regular file")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: {parent} is not a folder this user can "
                                         f"write")
    return path


def in_path(text: str) -> Path:
    """A file the bench will read: exists and is a regular file."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError("an empty path or one with a NUL byte")
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: " + ("not a regular file" if path.exists()
                                                        else "no such file"))
    return path


def read_json(path: Path, flag: str, what: str, bad: Callable[[str], NoReturn]) -> Any:
    """The JSON in the file ``path`` given as ``flag``; a missing or non-regular file, or one
    that is not JSON, is one line through ``bad`` (exit 2): ``FLAG PATH: no such file`` /
    ``not a regular file`` / ``not WHAT (the error's class)``. Checks of the JSON's shape are
    the caller's (``calibrate.read_raw``, ``peers_compare.read_results``)."""
    if not path.is_file():
        bad(f"{flag} {path}: " + ("not a regular file" if path.exists() else "no such file"))
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        bad(f"{flag} {path}: not {what} ({e.__class__.__name__})")


def bad(prog: str, message: str) -> NoReturn:
    """One line on stderr, exit status 2 (for checks after parsing)."""
    print(f"{prog}: {message}", file=sys.stderr)
    raise SystemExit(2)
