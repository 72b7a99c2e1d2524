"""The rules for a run directory (docs/recovery.md, "Run directories"): what counts as holding
a run, moving a run aside instead of overwriting it, and checking, before any engine starts,
that a run directory can be resumed.

``train`` calls these before it loads a model or starts an engine, so that a run is never
silently reused, half-overwritten or resumed from state that recovery would refuse later:

* ``run_files``: the names in a directory that belong to a run (an empty list: a new run may
  start there);
* ``discard_unstarted``: remove what a new run that never trained a step wrote, so that the
  same command can start it again;
* ``move_aside``: rename the whole directory to ``DIR.replaced-N`` (never deletes anything;
  never the current directory or one of its parents: ``check_movable``);
* ``check_resumable``: the event log is read in full and replayed against the run's staleness
  settings, the newest checkpoint is not ahead of the log, every trajectory file parses and
  names a prompt that exists, and every batch recovery must retrain has data on disk;
* ``lock_run_dir``: one owner per run directory. An exclusive ``flock`` on ``DIR/.lock``, taken
  before anything of the run is written and held until the run's last write; a second process
  gets ``RunDirInUse`` ("DIR is in use by pid N"). The kernel releases the lock when its
  process dies however it dies, so there is no stale marker to clean up: the file left behind
  is only the place the lock lives (and holds the last owner's pid, for the message).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from reserve_occupy import Config
from reserve_occupy.trace import loads_bounded

from ..atomic_io import TEMP_MARK, is_temp
from .durable import LOG_NAME
from .journal import EmptyLog, LogCorrupt, read_log, rebuild
from .store import Checkpoints, unit_filename, unit_from_filename

# Everything a run writes into its directory (run_training, RunStore, the trainer).
RUN_FILES = (LOG_NAME, "config.json", "metrics.jsonl", "summary.json", "driver_notes.jsonl",
             "recovery.jsonl", "lengths.jsonl", "curves.png", "trajectories", "checkpoints",
             "checkpoint", "weights", "tensorboard", "eval_before.json")


LOCK_NAME = ".lock"


class RunDirError(ValueError):
    """The run directory cannot be used as asked; the message says why and what to do."""


class RunDirInUse(RunDirError):
    """Another live process holds the run directory's lock."""


@dataclass
class RunDirLock:
    """A held lock on a run directory (``lock_run_dir``); ``release`` is idempotent."""

    path: Path
    fd: int
    holders: int = 1
    _key: str = field(default="", repr=False)

    def release(self) -> None:
        self.holders -= 1
        if self.holders > 0 or self.fd < 0:
            return
        _HELD.pop(self._key, None)
        os.close(self.fd)  # closing the descriptor drops the flock
        self.fd = -1

    def __enter__(self) -> RunDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# Locks this process holds, by directory: a nested lock (``train`` holds it, then its
# ``run_training`` asks again) shares the one descriptor. A second open() of the same file
# would be a second flock owner and be refused, by this very process.
_HELD: dict[str, RunDirLock] = {}


def _holder(lock_path: Path) -> str:
    try:
        pid = lock_path.read_text(encoding="ascii").partition("\n")[0]
    except (OSError, UnicodeDecodeError):
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def lock_run_dir(path: Path) -> RunDirLock:
    """Take the run directory's exclusive lock (creating the directory), or raise
    ``RunDirInUse`` naming the pid that holds it. Held until ``release`` or the process ends."""
    key = os.path.realpath(path)
    held = _HELD.get(key)
    if held is not None:
        held.holders += 1
        return held
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                     0o644)  # never through a link to a file elsewhere
    except OSError as exc:
        raise RunDirError(f"run directory {path}: cannot create its lock file "
                          f"({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunDirInUse(f"{path} is in use by {_holder(path / LOCK_NAME)}: one process "
                          f"at a time writes a run directory; wait for it to end, or use "
                          f"another directory") from None
    # The pid line first, then cut what a longer pid of an earlier holder left after it: a
    # reader (``_holder`` takes the first line) never finds the file empty.
    line = f"{os.getpid()}\n".encode("ascii")
    os.pwrite(fd, line, 0)
    os.ftruncate(fd, len(line))
    lock = RunDirLock(path, fd, _key=key)
    _HELD[key] = lock
    return lock


def release_all(locks: list[RunDirLock]) -> None:
    for lock in reversed(locks):
        lock.release()


def check_not_in_use(path: Path) -> None:
    """Raise ``RunDirInUse`` if a live process holds ``path``'s lock; creates nothing
    (``train --check``)."""
    lock_path = path / LOCK_NAME
    if os.path.realpath(path) in _HELD:
        return
    if os.path.lexists(lock_path) and (lock_path.is_symlink() or not lock_path.is_file()):
        # the run would fail to take its lock there (before: --check said OK, the run exit 2)
        kind = ("a symbolic link" if lock_path.is_symlink() else
                "a directory" if lock_path.is_dir() else "a special file")
        raise RunDirError(f"run directory {path}: {LOCK_NAME} is not a regular file ({kind}); "
                          f"it is where the run's lock lives: remove it")
    if not lock_path.is_file():
        return
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunDirInUse(f"{path} is in use by {_holder(lock_path)}") from None
    finally:
        os.close(fd)



def check_reports(path: Path) -> None:
    """Before a resume starts anything: the run's ``metrics.jsonl`` and ``lengths.jsonl``
    read under the torn-last-line rule (docs/recovery.md); a bad line elsewhere raises
    ``FileInputError`` (``PATH:LINE: why``, exit 2) with the run directory unchanged."""
    from ..accounting import LENGTHS_NAME, LengthLog
    from ..metrics import read_rows

    if (path / "metrics.jsonl").is_file():
        read_rows(path / "metrics.jsonl")
    if (path / LENGTHS_NAME).is_file():
        LengthLog.check(path / LENGTHS_NAME)

def run_files(path: Path) -> list[str]:
    """The names in ``path`` that a run wrote (empty: no run there, or no directory)."""
    if not path.is_dir():
        return []
    return [name for name in RUN_FILES if (path / name).exists()]


def discard_unstarted(path: Path) -> list[str]:
    """Remove what a new run that never trained a step wrote into ``path`` (the names of
    ``RUN_FILES`` there, and temporary files of interrupted writes), so that the same command
    can start it again without ``--overwrite``; returns the names removed. Only for a run that
    found ``path`` holding no run (``run_files`` empty) when it started: everything of
    ``RUN_FILES`` there is its own. The directory and its lock stay."""
    removed = []
    for name in run_files(path) + sorted(p.name for p in path.glob(".*") if is_temp(p.name)):
        _remove(path / name)
        removed.append(name)
    return removed


def _remove(target: Path) -> None:
    """Remove a file, a link (not what it points to) or a directory tree, whichever is there."""
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)


# the folders of a run directory whose files are written through ``atomic_io`` (the run's own
# files are in the directory itself): the exported weights (``weights/vN``) and the saved
# models (``checkpoint-N``) are written beside their final name as ``.NAME.tmp-PID``
TEMP_FOLDERS = (".", "weights")


def remove_interrupted(path: Path) -> list[str]:
    """Remove what writes an earlier process of this run left half-done in ``path`` (a kill
    -9, a machine crash): the temporary files and directories of ``atomic_io``
    (``.NAME.tmp-PID``) in the run directory and in ``weights/`` (``.vN.tmp-PID``, an
    exported version; ``.checkpoint-N.tmp-PID``, a saved model), each as large as the model.
    Only for a process that holds ``path``'s lock (a resume): no other process writes there,
    so every such name is a dead writer's; this process's own (its PID) are left. Returns
    the names removed, relative to ``path``."""
    mine = f"{TEMP_MARK}{os.getpid()}"
    removed = []
    for folder in TEMP_FOLDERS:
        where = path / folder
        if not where.is_dir() or where.is_symlink():
            continue
        for p in sorted(where.glob(".*")):
            if not is_temp(p.name) or p.name.endswith(mine):
                continue
            _remove(p)
            removed.append(str(p.relative_to(path)))
    return removed


def check_movable(path: Path) -> None:
    """Raise ``RunDirError`` if ``move_aside(path)`` could not work: ``path`` is the current
    directory or one of its ancestors (``--output-dir . --overwrite``), which a rename would
    take away from under this process. Creates nothing (``--check`` calls it)."""
    real, cwd = os.path.realpath(path), os.path.realpath(os.getcwd())
    if real == cwd or cwd.startswith(real.rstrip(os.sep) + os.sep):
        raise RunDirError(f"cannot move {path} aside: it is the current directory"
                          f"{'' if real == cwd else ' or one of its parents'}; run from "
                          f"another directory or choose another output directory")


def move_aside(path: Path) -> Path:
    """Rename ``path`` to the first free ``path.replaced-N`` and return the new name. One
    ``rename``: the old run stays whole, under its new name, and can still be resumed there.
    If this process holds ``path``'s lock, it holds the lock of a new, empty ``path`` after.
    Refuses (``RunDirError``) the current directory or an ancestor of it (``check_movable``)."""
    check_movable(path)
    path = Path(os.path.abspath(path))
    k = 1
    while True:
        target = path.with_name(f"{path.name}.replaced-{k}")
        if not target.exists():
            break
        k += 1
    key = os.path.realpath(path)
    try:
        os.rename(path, target)
    except OSError as exc:
        raise RunDirError(f"cannot move the run in {path} aside to {target}: "
                          f"{exc.strerror or exc}") from None
    held = _HELD.pop(key, None)
    if held is not None:  # the lock moved with the directory: hold the new one instead
        fresh = lock_run_dir(path)
        old_fd, held.fd = held.fd, fresh.fd
        _HELD[key] = held
        os.close(old_fd)
    return target


def check_output_dir(path: Path) -> None:
    """``path`` is a directory, or one that can be created (its nearest existing ancestor is
    a writable directory). ``os.access`` alone is not enough: it trusts permissions and root,
    ``/proc`` and read-only mounts do not (``--check`` said OK, then the run refused); so a
    file is made there, unnamed, which leaves the directory as it was (``_probe``:
    ``--check`` leaves no trace)."""
    if path.exists():
        if not path.is_dir():
            raise RunDirError(f"run.output_dir {path}: exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise RunDirError(f"run.output_dir {path}: the directory is not writable")
        why = _probe(path, directory=False)
        if why:
            raise RunDirError(f"run.output_dir {path}: the directory is not writable ({why})")
        return
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise RunDirError(f"run.output_dir {path}: cannot be created ({parent} is not a "
                          f"directory)")
    why = "" if os.access(parent, os.W_OK | os.X_OK) else "not writable"
    why = why or _probe(parent, directory=True)
    if why:
        raise RunDirError(f"run.output_dir {path}: cannot be created ({parent}: {why})")


# what open(O_TMPFILE) says where the filesystem (or the kernel) makes no unnamed files
_NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)


def _probe(where: Path, directory: bool) -> str:
    """Why a file (``directory``: a directory) cannot be made in ``where``; "" if it can.

    An unnamed file (``O_TMPFILE``): the kernel checks what creating a file checks (write
    and search permission, a read-only mount, a filesystem that takes no new files) but
    links nothing into ``where``, so its entries, mtime and ctime stay as they were, and it
    is gone when closed (before, a named ``.check-*`` file or directory made and removed
    there moved ``where``'s mtime on every ``train --check``). For ``directory`` (``where``
    the nearest existing ancestor of a new run directory) a file stands for the directory:
    both need the same permission and a writable filesystem. Where the filesystem makes no
    unnamed files (``/proc``, overlayfs before Linux 6.6, some FUSE), a named one is made and
    removed as before and ``where``'s atime and mtime are put back (``os.utime``; its ctime
    moves, which nothing can set back)."""
    tmpfile = getattr(os, "O_TMPFILE", None)
    if tmpfile is not None:
        try:
            os.close(os.open(where, tmpfile | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        except OSError as exc:
            if exc.errno not in _NO_TMPFILE:
                return exc.strerror or str(exc)
        else:
            return ""
    try:
        before = os.stat(where)
        if directory:
            os.rmdir(tempfile.mkdtemp(prefix=".check-", dir=where))
        else:
            fd, name = tempfile.mkstemp(prefix=".check-", dir=where)
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        os.utime(where, ns=(before.st_atime_ns, before.st_mtime_ns))
    except OSError:  # (not its owner: the times stay moved; the probe itself succeeded)
        pass
    return ""


@dataclass(frozen=True)
class Resumable:
    """What ``check_resumable`` found: enough to say what the resume will do."""

    events: int
    version: int  # batches published (trained steps) according to the log
    checkpoint: int | None
    torn: str | None


def check_resumable(run_dir: Path, config: Config, n_prompts: int) -> Resumable:
    """Everything recovery will rely on, checked without a model or an engine. ``config``:
    the staleness settings the resume runs with; ``n_prompts``: its training prompts."""
    fix = (f"fix or restore it, or start a new run with --output-dir {run_dir} --overwrite "
           f"(which moves this one aside)")
    log_path = run_dir / LOG_NAME
    try:
        contents = read_log(log_path)
    except EmptyLog as exc:
        raise RunDirError(f"{exc}: there is nothing to resume; {fix}") from None
    except LogCorrupt as exc:
        raise RunDirError(f"{exc}; {fix}") from None
    try:
        controller = rebuild(contents, config)
    except LogCorrupt as exc:
        raise RunDirError(f"{log_path}: {exc}") from None
    consumed = [e.batch for e in contents.events if e.op == "consume"]
    checkpoints_root = run_dir / "checkpoints"
    checkpoint = None
    if checkpoints_root.is_dir():
        latest = Checkpoints(checkpoints_root).latest()
        if latest is not None:
            checkpoint = latest[0]
            if checkpoint > len(consumed):
                raise RunDirError(
                    f"{latest[1]}: checkpoint step {checkpoint} is ahead of the event log, "
                    f"which consumed only {len(consumed)} batches; {fix}")
            from ..inputs import FileInputError

            try:  # recovery loads it first: a damaged one stops the resume here, not there
                check_checkpoint(latest[1], "the run's newest checkpoint")
            except FileInputError as exc:
                raise RunDirError(f"{exc}; {fix}") from None
    for seq, meta in contents.metas.items():
        position = meta.get("prompt")
        if isinstance(position, int) and not 0 <= position < n_prompts:
            raise RunDirError(f"{log_path}: event {seq} is for prompt {position}, but the data "
                              f"has {n_prompts} training prompts: resume with the run's own "
                              f"data (data.path, data.limit, run.eval_holdout)")
    stored = _check_trajectories(run_dir / "trajectories", n_prompts, fix)
    for k in range(checkpoint or 0, len(consumed)):
        batch = consumed[k]
        if not any(u.unit_id in stored for u in batch.units):  # type: ignore[union-attr]
            raise RunDirError(f"{run_dir / 'trajectories'}: batch {k} must be retrained but "
                              f"none of its units' trajectory files is there; {fix}")
    return Resumable(len(contents.events), controller.version, checkpoint, contents.torn)


def _check_trajectories(root: Path, n_prompts: int, fix: str) -> set[object]:
    """The units with a stored trajectory; a file that does not parse, or names a prompt the
    data lacks, is refused here rather than crashing recovery."""
    units: set[object] = set()
    if not root.is_dir():
        return units
    for path in sorted(root.iterdir()):
        unit = unit_from_filename(path.name)
        if unit is None or unit_filename(unit) != path.name:
            continue  # temporary files of interrupted writes: recovery deletes them
        try:
            record = loads_bounded(path.read_text(encoding="utf-8"))
            ok = (isinstance(record, dict) and isinstance(record.get("samples"), list)
                  and isinstance(record.get("prompt"), int))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            ok = False
        if not ok:
            raise RunDirError(f"{path}: not a readable trajectory record; {fix}")
        if not 0 <= record["prompt"] < n_prompts:
            raise RunDirError(f"{path}: names prompt {record['prompt']}, but the data has "
                              f"{n_prompts} training prompts: resume with the run's own data")
        units.add(unit)
    return units


# ------------------------------------------------------- what a resume may change -------------

# Settings a resume may give other values than the run began with (docs/recovery.md, "What a
# resume may change"): how long the run goes on, where and on what hardware it runs, how much
# memory a step uses, how often it saves, what it reports and how long it waits. None of them
# changes the algorithm (the staleness rule and its bounds, the batch shape), the model, the
# data, the reward, the sampling, the optimiser or the evaluation the run's figures compare.
# A name ending in "." is a whole section. Every other setting must be the one config.json
# recorded: a setting added later is refused until it is listed here.
RESUME_MAY_CHANGE = (
    "run.steps",  # extend a finished run, or stop earlier
    "run.output_dir",  # the same directory, however it is spelt (train checks that)
    "run.backend", "run.progress", "run.plot", "run.tensorboard", "run.trace",
    "run.keep_weights", "run.save_model_every", "run.check_invariants",
    "timeouts.",  # liveness: when a stuck unit or trainer wait is given up
    "trainer.device", "trainer.threads", "trainer.world_size", "trainer.strategy",
    "trainer.collective_timeout_s", "trainer.micro_batch", "trainer.max_tokens_per_micro_batch",
    "trainer.packing", "trainer.gradient_checkpointing",  # memory and speed, the same update
    "rollout.engines", "rollout.max_num_seqs", "rollout.kv_cache_gib",
    "rollout.gpu_memory_utilization", "rollout.engine_args", "rollout.fake_token_s",
    "recovery.commit_every", "recovery.keep_checkpoints", "recovery.fsync",
    "ray.",  # the cluster it runs on
)


def may_change_on_resume(key: str) -> bool:
    """Whether the dotted setting ``key`` (or a key inside it) may change on a resume."""
    return any(key.startswith(k) if k.endswith(".") else key == k or key.startswith(k + ".")
               for k in RESUME_MAY_CHANGE)


def _flatten(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict) and (not prefix or prefix.count(".") < 1):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}" if not prefix else f"{prefix}.{k}"))
        return out
    return {prefix: value}


def _loosely_equal(a: object, b: object) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_loosely_equal(x, y) for x, y in zip(a, b))
    return a == b or (a is not None and b is not None and str(a) == str(b))


def _refuse_changes(run_dir: Path, changed: list[tuple[str, object, object]]) -> None:
    if not changed:
        return
    what = "; ".join(f"{key} (the run's {old!r}, asked {new!r})" for key, old, new in changed)
    raise RunDirError(f"--resume {run_dir}: a resume cannot change {what}: it changes what the "
                      f"run is (docs/recovery.md, \"What a resume may change\"); leave it as "
                      f"the run began, or start a new run (--overwrite or another --output-dir)")


def check_same_run(run_dir: Path, recorded: dict[str, object], asked: dict[str, object]) -> None:
    """``asked`` (the resume's settings, ``TrainConfig.model_dump()``) against ``recorded``
    (the run's own ``config.json``, loaded the same way): ``RunDirError`` naming each setting
    a resume may not change (``RESUME_MAY_CHANGE``) that differs."""
    old, new = _flatten(recorded), _flatten(asked)
    changed = [(key, old.get(key), new.get(key)) for key in sorted(set(old) | set(new))
               if not may_change_on_resume(key) and not _loosely_equal(old.get(key),
                                                                       new.get(key))]
    _refuse_changes(run_dir, changed)


def check_overrides_keep_run(run_dir: Path, recorded: dict[str, object],
                             overrides: dict[str, object]) -> None:
    """``--set`` overrides of a resume against the run's recorded settings, before they are
    validated together (a peer's rule on a Reserve–Occupy run fails validation with a message
    about recovery, not about the resume): ``RunDirError`` naming each that may not change."""
    from ..config import RENAMED_KEYS

    changed = []
    for key, value in overrides.items():
        key = RENAMED_KEYS.get(key, key)
        for sub, v in _leaves(value, key).items():
            node: object = recorded
            for part in sub.split("."):
                node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
            if (node is not _MISSING and not may_change_on_resume(sub)
                    and not _loosely_equal(node, v)):
                changed.append((sub, node, v))
    _refuse_changes(run_dir, changed)


_MISSING = object()


def _leaves(value: object, key: str) -> dict[str, object]:
    """``{key: value}`` with a mapping value spread into its dotted leaves."""
    if not isinstance(value, dict) or not value:
        return {key: value}
    out: dict[str, object] = {}
    for k, v in value.items():
        out.update(_leaves(v, f"{key}.{k}"))
    return out


def check_recoverable_settings(run_dir: Path, recorded: dict[str, object]) -> None:
    """A run that began with ``recovery.enabled=false`` (every peer's rule does) kept no
    checkpoints and no trajectories: its ``events.jsonl`` is a trace, not something a resume
    can continue. ``RunDirError`` naming the setting (and the rule)."""
    flat = _flatten(recorded)
    if flat.get("recovery.enabled") is False:
        policy = flat.get("staleness.policy")
        rule = (f" (staleness.policy={policy}: a peer's rule runs without crash recovery)"
                if policy not in (None, "reserve_occupy") else "")
        raise RunDirError(f"--resume {run_dir}: the run began with recovery.enabled=false"
                          f"{rule}, so it kept no checkpoints or trajectories to continue from "
                          f"and cannot be resumed; start a new run (--overwrite moves it aside)")


# ------------------------------------------------------- checkpoints a run will load ---------

def check_checkpoint(path: Path, what: str) -> None:
    """A trainer checkpoint loads (``inputs.trainer_checkpoint``: its state, a complete
    ``model.safetensors``, a whole ``optimizer.pt``) and, for the sharded trainer's layout,
    every shard file its ``sharded/.metadata`` names is there and holds the bytes the metadata
    says it does (before: a truncated ``__1_0.distcp`` passed ``--check`` and the run failed
    with "trainer rank 0 exited with status 1 while in 'load'"). Raises ``FileInputError``."""
    from .. import inputs

    inputs.trainer_checkpoint(path, what)
    sharded = path / "sharded"
    if not sharded.is_dir():
        return
    try:
        from torch.distributed.checkpoint import FileSystemReader

        storage = FileSystemReader(str(sharded)).read_metadata().storage_data
    except Exception as exc:  # a damaged pickle raises whatever unpickling met
        raise inputs.FileInputError(sharded / ".metadata", 0, f"not a readable "
                                    f"torch.distributed checkpoint index ({type(exc).__name__})",
                                    what) from None
    ends: dict[str, int] = {}
    for info in storage.values():
        name = str(getattr(info, "relative_path", ""))
        end = int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0))
        ends[name] = max(ends.get(name, 0), end)
    for name, end in sorted(ends.items()):
        shard = sharded / name
        if os.sep in name or not shard.is_file():
            raise inputs.FileInputError(sharded, 0, f".metadata names shard {name}, which is "
                                                    f"missing", what)
        size = shard.stat().st_size
        if size < end:
            raise inputs.FileInputError(shard, 0, f"truncated: the checkpoint's index needs "
                                                  f"{end:,} bytes, the file has {size:,}", what)


# The model config keys that fix the shapes of a checkpoint's tensors.
SHAPE_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size",
              "num_hidden_layers", "num_attention_heads", "num_key_value_heads")


def check_checkpoint_model(path: Path, expected: dict[str, object], model: str,
                           what: str) -> None:
    """The checkpoint in ``path`` was trained from the run's model: its ``config.json`` agrees
    with ``expected`` (the run's model config) on every key of ``SHAPE_KEYS`` both give.
    Before: a checkpoint of another shape passed ``--check`` and the run failed loading it
    ("size mismatch for lm_head.weight"). Raises ``FileInputError`` naming the keys."""
    from .. import inputs

    if not (path / "config.json").is_file():
        return  # nothing says its shape: the safetensors header checks stand
    found = inputs.json_file(path / "config.json", what)
    if not isinstance(found, dict):
        raise inputs.FileInputError(path / "config.json", 0, "not a JSON object", what)
    differ = [f"{k} {found[k]!r} (the run's model: {expected[k]!r})" for k in SHAPE_KEYS
              if k in found and k in expected and found[k] != expected[k]]
    if differ:
        raise inputs.FileInputError(path, 0, f"a checkpoint of another model than {model}: "
                                              f"{', '.join(differ)}", what)
