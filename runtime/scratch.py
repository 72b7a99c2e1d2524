"""Scratch folders that never outlive their process for good: ``/dev/shm/ro-engine-PID-*``
(an engine actor's weights) and the fault harness's temporary run directories.

The owner's pid is in the folder's name. A folder is removed by its owner when it is done
(``close``), at interpreter exit (``atexit``, which covers Ctrl-C and SIGTERM through the
command wrapper), and -- for an owner killed too hard for either (SIGKILL, ``ray.kill``, a
machine out of memory) -- by the next ``scratch_dir`` of the same kind, which sweeps every
folder whose pid is no longer a live process.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path


def default_root() -> Path:
    """``/dev/shm`` when the machine has it (weights are read back at once), else the
    temporary directory."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep(kind: str, root: Path | None = None) -> list[Path]:
    """Remove the ``KIND-PID-*`` folders under ``root`` whose process is gone; returns them."""
    root = default_root() if root is None else root
    pattern = re.compile(rf"^{re.escape(kind)}-(\d+)-")
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        m = pattern.match(path.name)
        if m and path.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


_LIVE: set[Path] = set()  # this process's scratch folders, removed at exit


@atexit.register
def _remove_all() -> None:
    for path in list(_LIVE):
        remove(path)


def scratch_dir(kind: str, root: Path | None = None) -> Path:
    """A new ``root/KIND-PID-XXXXXXXX`` folder, removed at exit (or by ``remove``); dead
    owners' folders of the same kind are swept first."""
    root = default_root() if root is None else root
    sweep(kind, root)
    path = Path(tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}-", dir=root))
    _LIVE.add(path)
    return path


def remove(path: Path) -> None:
    """The owner is done with ``path``."""
    _LIVE.discard(path)
    shutil.rmtree(path, ignore_errors=True)
