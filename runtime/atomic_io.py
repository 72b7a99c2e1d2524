"""The one way the runtime writes a file or a directory: so that an interruption (a crash,
``kill -9``, Ctrl-C, SIGTERM, a full disk) leaves it either complete or absent (or, when it
replaced an older one, the older one), never cut short.

* A file (``atomic``, ``write_text``, ``write_bytes``, ``savefig``): the bytes go to a temporary
  file beside the target, ``.NAME.tmp-PID``, which replaces the target with one ``rename``.
* A directory (``atomic_dir``): it is written as ``.NAME.tmp-PID`` beside the target and renamed
  into place once complete. Weights and checkpoints are written this way, so a full disk never
  leaves a ``weights/vN/`` without its ``model.safetensors``.

``fsync=True`` also flushes the data (and the directory entry of the rename) to the disk before
returning, so that a power loss cannot lose a write the caller already reported: the run
directory's durable files (``recovery.fsync``) use it; command outputs do not.

Every file and directory written here gets the mode any ``open`` gives: ``0666 & ~umask``
(``0777 & ~umask`` for directories), whatever the library that wrote it chose (safetensors
writes ``0600``), so that another account (a separate ``vllm serve``) can read weights and
checkpoints as it can read every other file of a run.

Append-only logs (``events.jsonl`` of a run with recovery, ``metrics.jsonl``, ``lengths.jsonl``)
are not replaced but grow line by line; their readers drop a torn last line. When such a log is
rewritten as a whole (a resumed run cutting it back), that rewrite goes through here.

Only what this module may replace is replaced: a file's target must be absent or a regular
file, a directory's absent or a directory (not a link to one). A device, a fifo, a socket or a
symbolic link at the name raises ``NotReplaceable`` (an ``OSError``, ``EEXIST``: exit 74,
"cannot write the output") before anything is written, so ``/dev/null`` behind a link is never
turned into a file and a fifo never blocks the writer. The commands refuse such a path before
any work (``runtime.inputs.output_file``, exit 2); this is the last guard.

A library that reports a failed write as its own exception type (safetensors'
``SafetensorError: ... (os error 28)``) is turned back into the ``OSError`` it was
(``reraise_os_error``), so a full disk is exit 74 (docs/cli.md) wherever it happens.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

TEMP_MARK = ".tmp-"  # in every temporary name this module makes: .NAME.tmp-PID


def temp_path(path: str | os.PathLike[str]) -> Path:
    """Where ``path`` is written before it is renamed into place (the same directory, so the
    rename is atomic)."""
    target = Path(path)
    return target.with_name(f".{target.name}{TEMP_MARK}{os.getpid()}")


def is_temp(name: str) -> bool:
    """Whether ``name`` is a temporary file or directory of this module (one an interrupted
    write left behind)."""
    return name.startswith(".") and TEMP_MARK in name


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc``), else by
    setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


class NotReplaceable(OSError):
    """The name a file or directory is to be written at holds something this module must not
    replace (a device, a fifo, a socket, a symbolic link, or a file where a directory goes)."""


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a fifo"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return kind
    return "not a regular file"


def check_replaceable(path: str | os.PathLike[str], directory: bool = False) -> None:
    """``path`` is absent, or what a write may replace: a regular file (``directory``: a real
    directory). Anything else raises ``NotReplaceable`` naming it; a link is not followed."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there: the write says why not
        return
    if stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode):
        return
    want = "a directory" if directory else "a regular file"
    raise NotReplaceable(errno.EEXIST, f"exists and is {_kind(mode)}, not {want}: not "
                                       f"replaced", str(path))


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (a rename into it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic(path: str | os.PathLike[str], mode: str = "w", fsync: bool = False
           ) -> Iterator[IO[Any]]:
    """``with atomic(path) as f: f.write(...)``: ``path`` appears (or is replaced) only once
    the block ends without an exception; on any exception the temporary file is removed."""
    target = Path(path)
    check_replaceable(target)  # before any byte is written
    tmp = temp_path(target)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        check_replaceable(target)  # again: the name may have changed while it was written
        os.replace(tmp, target)
        if fsync:
            fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: str | os.PathLike[str], text: str, fsync: bool = False) -> None:
    with atomic(path, "w", fsync) as f:
        f.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes, fsync: bool = False) -> None:
    with atomic(path, "wb", fsync) as f:
        f.write(data)


def savefig(fig: Any, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """``fig.savefig(path, **kwargs)``, atomically (the format comes from ``path``'s suffix)."""
    target = Path(path)
    fmt = kwargs.pop("format", target.suffix.lstrip(".") or None)
    with atomic(target, "wb") as f:
        fig.savefig(f, format=fmt, **kwargs)


def settle(path: str | os.PathLike[str], fsync: bool = False) -> None:
    """Give every file under the directory ``path`` mode ``0666 & ~umask`` and every directory
    ``0777 & ~umask`` (the directory itself too); with ``fsync``, flush them all to the disk."""
    mask = umask()
    root = Path(path)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                continue
            os.chmod(p, 0o666 & ~mask)
            if fsync:
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
        for name in dirnames:
            p = Path(dirpath) / name
            if not p.is_symlink():
                os.chmod(p, 0o777 & ~mask)
        if fsync:
            fsync_dir(dirpath)
    os.chmod(root, 0o777 & ~mask)


def replace_dir(tmp: Path, target: Path) -> None:
    """Rename the complete directory ``tmp`` to ``target``. An existing ``target`` (the same
    version written by an earlier, crashed process) is moved aside first and removed after, so
    the name never holds a partial directory."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, target)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str], fsync: bool = False) -> Iterator[Path]:
    """``with atomic_dir(path) as tmp: write into tmp``: ``path`` appears (or is replaced),
    complete and with the usual modes (``settle``), only once the block ends without an
    exception; on any exception the temporary directory is removed."""
    target = Path(path)
    check_replaceable(target, directory=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(target)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        settle(tmp, fsync)
        replace_dir(tmp, target)
        if fsync:
            fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class KeepWriteError(io.RawIOBase):
    """A writable stream over ``file`` that keeps the first ``OSError`` a write raised
    (``.error``): ``torch.save`` reports a full disk as ``RuntimeError('... unexpected pos
    ...')``, and this is how the ``OSError`` behind it is found again."""

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__()
        self.file = file
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def reraise_os_error(exc: BaseException, path: str | os.PathLike[str]) -> None:
    """Raise the ``OSError`` a library's own exception reports (``(os error N)`` in its text,
    as safetensors writes it), from ``exc``; return when it reports none."""
    m = _OS_ERROR.search(str(exc))
    if m is None:
        return
    code = int(m.group(1))
    raise OSError(code, os.strerror(code) if code in errno.errorcode else str(exc),
                  str(path)) from exc


__all__ = ["KeepWriteError", "NotReplaceable", "atomic", "atomic_dir", "check_replaceable",
           "fsync_dir", "is_temp", "replace_dir", "reraise_os_error", "savefig",
           "settle", "temp_path", "umask", "write_bytes", "write_text"]
