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
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from reserve_occupy.trace import MAX_JSON_DEPTH, JSONDepthError, loads_bounded  # noqa: F401

# The simulator's option limits, shared by ``simulate`` and every ``python -m
# reserve_occupy_sim.studies.*`` command: what a simulation can hold in memory and finish in
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


def text_file(path: str | os.PathLike[str], what: str, limit: int | None = None) -> str:
    """The whole of a UTF-8 text file (a leading BOM is dropped), refused if it is larger than
    ``limit`` bytes (default ``SMALL_JSON_BYTES``): at most ``limit + 1`` bytes are ever read,
    so a file of gigabytes is one error, not all of memory (``/dev/zero``, not a regular file,
    is refused before any read: ``open_read``)."""
    data = read_bounded(path, SMALL_JSON_BYTES if limit is None else limit, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def open_read(path: str | os.PathLike[str], what: str = "") -> IO[bytes]:
    """``open(path, "rb")`` of a regular file, never blocking: the open is non-blocking (a fifo
    with no writer would wait for one forever), then anything that is not a regular file (a
    fifo, a device, a socket) is refused, ``FileInputError`` ``not a regular file``, before a
    byte is read -- the rule data.py applies to prompts. ``OSError`` propagates."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileInputError(path, 0, "not a regular file", what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# The longest path and path component Linux takes (PATH_MAX, NAME_MAX, in bytes): a longer one
# is refused here, with one line naming the option, instead of the ``ENAMETOOLONG`` a later
# ``open`` raises (exit 70 where it was not caught). A filesystem with shorter limits still
# answers ``ENAMETOOLONG``, which the checks below report the same way.
MAX_PATH_BYTES = 4095
MAX_NAME_BYTES = 255


def _shown(path: str) -> str:
    """A path as an error message shows it: ``repr``, cut to 80 characters."""
    text = repr(path)
    return text if len(text) <= 80 else text[:60] + "..." + text[-16:]


def path_text(path: str | os.PathLike[str], option: str) -> str:
    """The text of a path a user gave (an option, a setting, a file's field), checked before
    it is used: not empty (``''`` would silently mean the current directory, or nothing), no
    NUL byte (``open`` raises ``ValueError``), encodable to the filesystem's bytes, at most
    ``MAX_PATH_BYTES`` bytes with no component longer than ``MAX_NAME_BYTES``. ``option``
    names it in the message ('': the message starts with the path)."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    where = f"{option} {_shown(text)}".strip()
    if not text.strip():
        raise InputError(f"{option + ': ' if option else ''}the path is empty"
                         f"{' (blank)' if text else ''}; name a file or directory ('.' for "
                         f"the current directory)")
    if "\0" in text:
        raise InputError(f"{where}: the path contains a NUL byte")
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: the path cannot be encoded for the filesystem "
                         f"({exc.reason})") from None
    if len(raw) > MAX_PATH_BYTES:
        raise InputError(f"{where}: the path is {len(raw):,} bytes long; at most "
                         f"{MAX_PATH_BYTES:,}")
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > MAX_NAME_BYTES:
        raise InputError(f"{where}: a name in the path is {len(longest):,} bytes long; at "
                         f"most {MAX_NAME_BYTES}")
    return text


def path_arg(text: str) -> Path:
    """``type=path_arg`` of an argparse option that takes a path: ``path_text``'s checks, as
    argparse's one-line error (exit 2). (``type=Path`` turned ``''`` into ``.``.)"""
    import argparse

    try:
        return Path(path_text(text, ""))
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def name_text(value: str, option: str) -> str:
    """A name a user gave (a field, a module, a rule): not empty or blank, no NUL byte."""
    if not value.strip():
        raise InputError(f"{option}: empty{' (blank)' if value else ''}; a name is needed")
    if "\0" in value:
        raise InputError(f"{option} {_shown(value)}: contains a NUL byte")
    return value


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a fifo"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISREG, "a regular file"))


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` itself is (a symbolic link is not followed): ``"a regular file"``,
    ``"a directory"``, ``"a symbolic link"``, ``"a fifo"``, ... ; None if nothing is there."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # absent, or a parent is not a directory or not searchable: the caller's
        return None  # next checks say which
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def readable_file(path: str | os.PathLike[str], what: str) -> None:
    """The file exists, is a file, and can be opened for reading."""
    path_text(path, what)
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} {path}: is a directory, not a file")
    try:
        with open_read(p, what):
            pass
    except OSError as exc:
        raise InputError(f"{what} {path}: can't read: {exc.strerror or exc}") from None


def output_dir(path: str | os.PathLike[str], option: str, files: tuple[str, ...] = ()) -> Path:
    """Create the output directory now (parents too) and make sure files can be written in it.
    A symbolic link to a directory is taken (the files go inside it; the link stays); anything
    else that is not a directory is refused. ``files``: names the command writes in it, each
    checked as ``output_file`` checks a file (a fifo or a link there is refused now, not once
    the work is done)."""
    path_text(path, option)
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{option} {path}: exists and is not a directory")
    if not p.exists() and p.is_symlink():
        raise InputError(f"{option} {path}: is a symbolic link to nothing (a directory that "
                         f"does not exist): refusing to create through it")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {path}: can't create the directory: "
                         f"{exc.strerror or exc}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: the directory is not writable")
    for name in files:
        _replaceable(p / name, f"{option} {path}: {name}")
    return p


def own_entries(directory: str | os.PathLike[str], option: str, files: tuple[str, ...],
                dirs: tuple[str, ...] = ()) -> None:
    """In the output directory ``directory``, each of ``files`` is absent or a regular file and
    each of ``dirs`` absent or a directory (not a link to one): what a run there appends to or
    replaces (a fifo ``metrics.jsonl`` would block the run, a link would be written through
    to wherever it points)."""
    d = Path(directory)
    if not d.is_dir():
        return
    for name in files:
        _replaceable(d / name, f"{option} {directory}: {name}")
    for name in dirs:
        kind = file_kind(d / name)
        if kind not in (None, "a directory"):
            raise InputError(f"{option} {directory}: {name} exists and is {kind}, not a "
                             f"directory: refusing to write into it")


def _replaceable(p: Path, where: str) -> None:
    """``p`` is absent or a regular file: what the writers (``atomic_io``) may replace."""
    kind = file_kind(p)
    if kind is None or kind == "a regular file":
        return
    if kind == "a directory":
        raise InputError(f"{where}: is a directory, not a file")
    hint = ""
    if kind == "a symbolic link":
        target = os.readlink(p)
        kind += f" (to {_shown(target)})"
        hint = "; name the file it points to, or another path"
    raise InputError(f"{where}: exists and is {kind}, not a regular file: refusing to "
                     f"replace it{hint}")


def output_file(path: str | os.PathLike[str], option: str) -> Path:
    """The file can be written: absent or a regular file (a device, a fifo, a socket or a
    symbolic link is refused: the write renames a new file over the name, which would replace
    it -- docs/cli.md, "Output paths"), and its directory exists and is writable. Nothing is
    created (a run that fails before its end leaves no empty file behind)."""
    path_text(path, option)
    p = Path(path)
    _replaceable(p, f"{option} {path}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise InputError(f"{option} {path}: {parent} {why}")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"{option} {path}: not writable")
    if p.exists():  # os.access trusts permissions; root, /proc and read-only mounts do not
        try:  # a regular file (checked above): this open cannot block
            with open(p, "ab"):
                pass
        except OSError as exc:
            raise InputError(f"{option} {path}: not writable: {exc.strerror or exc}") from None
    return p


# ----------------------------------------------------------------- bounded JSON readers ------
#
# Every file of JSON this project reads comes through these readers, so that no file can take
# unbounded memory or time, or crash the decoder: a line is read with a bounded ``readline``
# (a line longer than the limit is refused after ``limit`` bytes, never read whole first), a
# whole file only up to its limit, and every document is decoded by ``loads_bounded`` (at
# most ``MAX_JSON_DEPTH`` levels of nesting). docs/cli.md, "Limits on input files", lists them.

TRACE_LINE_BYTES = 64 << 20  # a trace / event-log line, a conformance vector, a port's answer
DATA_LINE_BYTES = 4 << 20  # a prompt record of train's data.path, a simulate --workload line
COST_FILE_BYTES = 1 << 20  # a simulate --cost file
SMALL_JSON_BYTES = 16 << 20  # config.json, trainer_state.json, MANIFEST.json and the like
MAX_PROMPT_CHARS = 1_048_576  # one prompt (a string, or a conversation's contents together)


class FileInputError(InputError):
    """A file, or one line of it (``line`` 1-based; 0: the file as a whole), is unusable:
    ``reason`` says why, and the message is ``PATH:LINE: reason`` (``WHAT PATH: reason``)."""

    def __init__(self, path: str | os.PathLike[str], line: int, reason: str,
                 what: str = "") -> None:
        self.path, self.line, self.reason = str(path), line, reason
        where = f"{path}:{line}" if line else f"{what} {path}".strip()
        super().__init__(f"{where}: {reason}")


class LineTooLong(FileInputError):
    """A line of a JSON Lines file is longer than its reader's limit."""


def _mib(limit: int) -> str:
    return f"{limit / (1 << 20):g} MiB" if limit >= 1 << 20 else f"{limit:,} bytes"


def raw_lines(stream: IO[bytes], limit: int, name: str) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` for each line of a binary stream, the newline removed. A line longer
    than ``limit`` bytes raises ``LineTooLong`` naming ``name`` and the line once ``limit + 1``
    bytes of it have been read: memory and time stay bounded whatever the stream holds."""
    number = 0
    while True:
        data = stream.readline(limit + 1)
        if not data:
            return
        number += 1
        if data.endswith(b"\n"):
            data = data[:-1]
        elif len(data) > limit:
            raise LineTooLong(name, number, f"the line is longer than {_mib(limit)}")
        yield number, data


def file_lines(path: str | os.PathLike[str], limit: int) -> Iterator[tuple[int, bytes, bool]]:
    """``(number, line, last)`` for each line of the file ``path`` as ``raw_lines`` reads them;
    ``last``: no line follows (the one a crash can have torn). ``OSError`` propagates."""
    with open(path, "rb") as stream:
        previous = None
        for item in raw_lines(stream, limit, str(path)):
            if previous is not None:
                yield (*previous, False)
            previous = item
        if previous is not None:
            yield (*previous, True)


def text_lines(path: str | os.PathLike[str], limit: int, what: str
               ) -> Iterator[tuple[int, str]]:
    """``(number, text)`` for each line of the UTF-8 file ``path`` (a BOM on line 1 dropped),
    read with ``raw_lines``. Raises ``InputError`` naming ``what``, the file and the line."""
    path_text(path, what or "file")
    p = Path(path)
    if p.is_dir():
        raise FileInputError(path, 0, "is a directory, not a file", what)
    try:
        stream = open_read(p, what)  # closed by the `with` below
    except OSError as exc:
        raise FileInputError(path, 0, f"can't read: {exc.strerror or exc}", what) from None
    with stream:
        try:
            for number, data in raw_lines(stream, limit, str(path)):
                try:
                    yield number, data.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise FileInputError(path, number, f"not a UTF-8 text file (byte "
                                                       f"{exc.start} of the line)") from None
        except OSError as exc:
            raise FileInputError(path, 0, f"read failed: {exc.strerror or exc}", what) from None


def read_bounded(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The whole of the file ``path``, refused (``InputError``) if it is larger than ``limit``
    bytes; at most ``limit + 1`` bytes are ever read."""
    path_text(path, what or "file")
    p = Path(path)
    if p.is_dir():
        raise FileInputError(path, 0, "is a directory, not a file", what)
    try:
        with open_read(p, what) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise FileInputError(path, 0, f"can't read: {exc.strerror or exc}", what) from None
    if len(data) > limit:
        raise FileInputError(path, 0, f"larger than {_mib(limit)}", what)
    return data


def json_reason(exc: ValueError) -> str:
    """Why ``loads_bounded`` refused a document, in words (``not valid JSON (...)``)."""
    if isinstance(exc, JSONDepthError):
        return f"not valid JSON: {exc.msg}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    return f"not valid JSON ({getattr(exc, 'msg', exc)})"


def json_line(text: str | bytes, path: str | os.PathLike[str], line: int) -> Any:
    """One JSON Lines record, decoded by ``loads_bounded``; ``FileInputError`` naming the file
    and the line otherwise."""
    try:
        return loads_bounded(text)
    except ValueError as exc:  # json.JSONDecodeError (JSONDepthError), UnicodeDecodeError
        raise FileInputError(path, line, json_reason(exc)) from None


def json_file(path: str | os.PathLike[str], what: str, limit: int = SMALL_JSON_BYTES) -> Any:
    """A whole JSON file: at most ``limit`` bytes, UTF-8, decoded with a depth limit;
    ``FileInputError`` naming ``what`` and the file otherwise."""
    data = read_bounded(path, limit, what)
    try:
        return loads_bounded(data)
    except ValueError as exc:
        raise FileInputError(path, 0, json_reason(exc), what) from None


# ------------------------------------------------------------- weights and checkpoints ------

MAX_SAFETENSORS_HEADER = 100 << 20  # the safetensors library's own limit on a header


def safetensors_file(path: str | os.PathLike[str], what: str) -> None:
    """A complete safetensors file: an 8-byte header length, a JSON header of that length,
    and exactly as many bytes of data as the header's offsets end at. Reads only the header,
    so a truncated (or over-long) file is found without loading its tensors."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or n > min(size - 8, MAX_SAFETENSORS_HEADER):
                raise FileInputError(p, 0, "not a complete safetensors file (its header is "
                                           "cut short or missing)", what)
            raw = f.read(n)
    except OSError as exc:
        raise FileInputError(p, 0, f"can't read: {exc.strerror or exc}", what) from None
    try:
        header = loads_bounded(raw)
    except ValueError as exc:
        raise FileInputError(p, 0, f"not a safetensors file (header {json_reason(exc)})",
                             what) from None
    ends = [t.get("data_offsets", [0, 0])[1] if isinstance(t, dict) else None
            for k, t in (header.items() if isinstance(header, dict) else [(None, None)])
            if k != "__metadata__"]
    if not all(isinstance(e, int) and not isinstance(e, bool) for e in ends):
        raise FileInputError(p, 0, "not a safetensors file (a tensor without data_offsets)",
                             what)
    for name, tensor in header.items():
        if name != "__metadata__":
            problem = _tensor_entry_problem(tensor)
            if problem:
                raise FileInputError(p, 0, f"not a safetensors file we can load (tensor "
                                           f"{str(name)[:80]!r}: {problem})", what)
    expected = 8 + n + max(ends, default=0)
    if expected != size:
        state = "truncated" if size < expected else "longer than its header says"
        raise FileInputError(p, 0, f"{state}: its header describes {expected:,} bytes, the "
                                   f"file has {size:,}", what)


# Bytes per element of each dtype name the safetensors format defines (the format's README,
# huggingface/safetensors; what safetensors 0.8's torch loader maps); the sub-byte float
# types have no whole byte count and are checked by name only.
SAFETENSORS_DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E4M3FNUZ": 1, "F8_E5M2": 1,
    "F8_E5M2FNUZ": 1, "F8_E8M0": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4,
    "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8,
    "F4": None, "F6_E2M3": None, "F6_E3M2": None,
}


def _tensor_entry_problem(tensor: Any) -> str | None:
    """What is wrong with one tensor's header entry (dtype, shape, data_offsets), or None.
    A file whose header names a dtype no loader knows, or whose byte range does not hold
    ``prod(shape)`` elements, passed ``--check`` and failed later inside the engine."""
    dtype, shape, offsets = tensor.get("dtype"), tensor.get("shape"), tensor.get("data_offsets")
    if dtype not in SAFETENSORS_DTYPES:
        return f"unknown dtype {str(dtype)[:40]!r}"
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                            and d >= 0 for d in shape)):
        return "its shape is not a list of whole numbers >= 0"
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        return "its data_offsets are not [begin, end] with 0 <= begin <= end"
    size = SAFETENSORS_DTYPES[dtype]
    if size is not None:
        count = math.prod(shape)
        if offsets[1] - offsets[0] != count * size:
            return (f"{dtype} of shape {shape} is {count * size:,} bytes, its data_offsets "
                    f"span {offsets[1] - offsets[0]:,}")
    return None


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "*.safetensors",
                "pytorch_model.bin", "pytorch_model.bin.index.json")


def model_weights(directory: str | os.PathLike[str], what: str) -> None:
    """A Hugging Face model directory holds weights a loader will find: a sharded index whose
    shards are all there, or safetensors files (each complete), or a PyTorch ``.bin``."""
    d = Path(directory)
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (d / index).is_file():
            data = json_file(d / index, what)
            shards = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(shards, dict) or not shards or not all(
                    isinstance(v, str) for v in shards.values()):
                raise FileInputError(d / index, 0, "has no weight_map of tensor -> file", what)
            for shard in sorted(set(shards.values())):
                if not (d / shard).is_file():
                    raise FileInputError(d, 0, f"{index} names {shard}, which is missing", what)
                if shard.endswith(".safetensors"):
                    safetensors_file(d / shard, what)
            return
    tensors = sorted(d.glob("*.safetensors"))
    for path in tensors:
        safetensors_file(path, what)
    if tensors or (d / "pytorch_model.bin").is_file():
        return
    raise FileInputError(d, 0, "holds no weights (no model.safetensors, "
                               "model.safetensors.index.json or pytorch_model.bin)", what)


def trainer_checkpoint(directory: str | os.PathLike[str], what: str) -> int:
    """A trainer checkpoint (``train --resume CHECKPOINT``) that loads: ``trainer_state.json``
    is JSON with a whole ``steps`` >= 0, ``model.safetensors`` is complete, ``optimizer.pt``
    is a whole torch archive (the sharded trainer's: ``sharded/.metadata``, the
    ``torch.distributed.checkpoint`` index, instead). Returns the steps it records."""
    import zipfile

    d = Path(directory)
    state = json_file(d / "trainer_state.json", what)
    steps = state.get("steps") if isinstance(state, dict) else None
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise FileInputError(d / "trainer_state.json", 0, f"must be an object with a whole "
                                                          f"number of steps >= 0, got "
                                                          f"{str(state)[:80]}", what)
    if not (d / "model.safetensors").is_file():
        raise FileInputError(d, 0, "has no model.safetensors", what)
    safetensors_file(d / "model.safetensors", what)
    if (d / "sharded").is_dir():  # runtime.trainer.rank: model and optimizer in shards
        if not (d / "sharded" / ".metadata").is_file():
            raise FileInputError(d / "sharded", 0, "has no .metadata (an incomplete "
                                                   "torch.distributed checkpoint)", what)
        return steps
    optimizer = d / "optimizer.pt"
    try:
        with zipfile.ZipFile(optimizer):  # reads the archive's directory, kept at its end
            pass
    except FileNotFoundError:
        raise FileInputError(d, 0, "has no optimizer.pt", what) from None
    except (OSError, zipfile.BadZipFile) as exc:
        raise FileInputError(optimizer, 0, f"not a whole torch archive (truncated?): {exc}",
                             what) from None
    return steps
