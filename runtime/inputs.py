"""Checks every command runs on its options and files before it starts any work.

A command line is untrusted input: a number out of range, a file that cannot be read or is not
UTF-8 text, an output path that is a file or cannot be created. Each check here raises
``InputError`` with one line that names the option or the file, and the command turns it into
exit status 2 *before* it runs anything (so a long run never fails at its end for a typo).
docs/cli.md lists, per command, what is checked and the limits.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


# The simulator's option limits, shared by ``simulate`` and every ``python -m
# runtime.sim.studies.*`` command: what a simulation can hold in memory and finish in
# reasonable time. option -> (lowest, highest).
SIM_LIMITS: dict[str, tuple[int, int]] = {
    "batches": (1, 100_000),
    "batch_size": (1, 100_000),
    "groups": (1, 1_000_000),
    "instances": (1, 10_000),
    "concurrency": (1, 100_000),
    "seeds": (1, 1_000),
    "seed": (0, 2**63 - 1),
    "capacity": (1, 100_000),
    "candidates": (1, 4_096),
    "lookahead": (0, 100_000),
    "chunk_groups": (0, 100_000),
}


def sim_limit(option: str, value: int) -> int:
    """``value`` within ``SIM_LIMITS`` for ``--option`` (``--batch-size`` -> batch_size)."""
    lo, hi = SIM_LIMITS[option.lstrip("-").replace("-", "_")]
    int_in(option, value, lo, hi)
    return value


def seed_list(option: str, text: str) -> list[int]:
    """``--seeds 0,1,2``: at most ``SIM_LIMITS['seeds']`` seeds, each a valid seed."""
    values = int_list(option, text)
    lo, hi = SIM_LIMITS["seeds"]
    if len(values) > hi:
        raise InputError(f"{option} lists {len(values):,} seeds; at most {hi:,}")
    for v in values:
        int_in(option, v, *SIM_LIMITS["seed"])
    return values


class InputError(ValueError):
    """An option or file a command was given is unusable; the message names it."""


def int_in(option: str, value: int | None, lo: int, hi: int) -> None:
    """``lo <= value <= hi`` (None: the option was not given)."""
    if value is not None and not lo <= value <= hi:
        raise InputError(f"{option} must be in [{lo:,}, {hi:,}], got {value:,}")


def int_list(option: str, text: str, lo: int = 0) -> list[int]:
    """A non-empty comma-separated list of integers, each ``>= lo`` (``--eta 1,2,3``)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option} must be a comma-separated list of integers, "
                         f"got {text!r}") from None
    if not values or any(v < lo for v in values):
        raise InputError(f"{option} must list integers >= {lo}, got {text!r}")
    return values


def one_int(option: str, text: str, lo: int = 0) -> int:
    """Exactly one integer ``>= lo`` (``--batches 40``): a list is refused, not cut to its
    first value."""
    values = int_list(option, text, lo)
    if len(values) != 1:
        raise InputError(f"{option} takes one integer, got {text!r}")
    return values[0]


def number(option: str, text: str, lo: float, hi: float, open_low: bool = False) -> float:
    """A number given as text, checked as ``number_in`` checks it."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{option} must be a number, got {text!r}") from None
    number_in(option, value, lo, hi, open_low=open_low)
    return value


def number_in(option: str, value: float | None, lo: float, hi: float,
              open_low: bool = False) -> None:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``); None: not given."""
    if value is None:
        return
    low_ok = value > lo if open_low else value >= lo
    if not (math.isfinite(value) and low_ok and value <= hi):
        bracket = "(" if open_low else "["
        raise InputError(f"{option} must be a number in {bracket}{lo:g}, {hi:g}], got {value}")


def text_file(path: str | os.PathLike[str], what: str) -> str:
    """The whole of a UTF-8 text file (a leading BOM is dropped)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{what} {path}: can't read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def readable_file(path: str | os.PathLike[str], what: str) -> None:
    """The file exists, is a file, and can be opened for reading."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} {path}: is a directory, not a file")
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"{what} {path}: can't read: {exc.strerror or exc}") from None


def output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """Create the output directory now (parents too) and make sure files can be written in it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{option} {path}: exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {path}: can't create the directory: "
                         f"{exc.strerror or exc}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: the directory is not writable")
    return p


def output_file(path: str | os.PathLike[str], option: str) -> Path:
    """The file can be written: not a directory, and its directory exists and is writable.
    Nothing is created (a run that fails before its end leaves no empty file behind)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {path}: is a directory, not a file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise InputError(f"{option} {path}: {parent} {why}")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"{option} {path}: not writable")
    if p.exists():  # os.access trusts permissions; root, /proc and read-only mounts do not
        try:
            with open(p, "ab"):
                pass
        except OSError as exc:
            raise InputError(f"{option} {path}: not writable: {exc.strerror or exc}") from None
    return p
