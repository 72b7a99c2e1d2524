"""Writing a command's output files so that an interrupted command (Ctrl-C, SIGTERM, a full
disk) leaves each file either complete or absent, never cut short: the bytes go to a temporary
file beside the target (``.NAME.tmp-PID``), which replaces it with one ``rename``.
``reserve-occupy`` commands and the ``python -m runtime.*`` mains write through these
(docs/cli.md, "Signals, pipes and exit status")."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """``with atomic(path) as f: f.write(...)``: ``path`` appears only once the block ends
    without an exception; on any exception the temporary file is removed."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic(path) as f:
        f.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic(path, "wb") as f:
        f.write(data)


def savefig(fig: Any, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """``fig.savefig(path, **kwargs)``, atomically (the format comes from ``path``'s suffix)."""
    target = Path(path)
    fmt = kwargs.pop("format", target.suffix.lstrip(".") or None)
    with atomic(target, "wb") as f:
        fig.savefig(f, format=fmt, **kwargs)
