"""Every error a sharded trainer's rank can raise ends a command with the documented exit code
(issue 36, class 8), and a failed checkpoint save leaves no temporary directory.

torch's ``CheckpointException`` (``torch.distributed.checkpoint``) derives from
``BaseException``: it passed the rank's ``except Exception``, the rank died with a traceback,
and a full disk while 2 ranks saved was "the run failed: trainer rank 1 exited with status 1
while in 'save'" (exit 1) instead of "cannot write the output" (exit 74), an empty
``.tmp-step-N`` left behind. DCP also wrote tensors with ``torch.save``, which reports a
failed write as ``RuntimeError('... unexpected pos ...')``: the errno was lost on the way.

The full disk is a file-size limit (``RLIMIT_FSIZE``, as in test_run_outputs: writes past it
fail with EFBIG, exit 74 as for ENOSPC), set between the size of the exported weights and
that of a rank's DCP shard file, so the export passes and the checkpoint's shards do not.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch

from runtime import atomic_io
from runtime.config import TrainerConfig
from runtime.trainer.rank import RankTrainer
from runtime.trainer.sharded import OUTPUT_ERRNOS, RankLost, ShardedTrainer, answer_values

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
         "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
         "--set", "run.plot=false", "--set", "trainer.world_size=2",
         "--set", "recovery.commit_every=1"]


def _failure(exc: BaseException) -> tuple:
    """A rank's failure as torch's ``CheckpointException`` holds it: (exception, stack)."""
    return exc, traceback.StackSummary.from_list([])


def _checkpoint_exception(failures: dict[int, BaseException]):
    from torch.distributed.checkpoint.api import CheckpointException

    return CheckpointException("write", {r: _failure(e) for r, e in failures.items()})


def _temps(root: Path) -> list[Path]:
    """Every temporary file or directory under ``root``: ``.tmp-step-N`` (a checkpoint
    being saved) and ``atomic_io``'s ``.NAME.tmp-PID``."""
    return [p for p in root.rglob("*") if ".tmp-" in p.name]


# ------------------------------------------------------------- the mapping, per class ------

def test_checkpoint_exception_is_a_base_exception_that_passes_except_exception():
    # Why the rest matters: torch's class is not an Exception (a torch upgrade that made it
    # one would make this test fail, not the others).
    exc = _checkpoint_exception({0: OSError(errno.ENOSPC, "No space left on device")})
    assert isinstance(exc, BaseException) and not isinstance(exc, Exception)


@pytest.mark.parametrize("code", OUTPUT_ERRNOS)
def test_a_checkpoint_exception_is_the_output_error_of_any_rank(code):
    from runtime.trainer.dcp import checkpoint_error

    disk = OSError(code, os.strerror(code))
    # rank 1's full disk wins over rank 0's other error: it says what the user must fix
    exc = _checkpoint_exception({0: RuntimeError("unexpected pos 704 vs 598"), 1: disk})
    assert checkpoint_error(exc) is disk
    # nested (a CheckpointException among the failures) unwraps the same way
    assert checkpoint_error(_checkpoint_exception({1: exc})) is disk


def test_a_checkpoint_exception_without_an_output_error_is_the_lowest_rank_s_error():
    from runtime.trainer.dcp import checkpoint_error

    denied = PermissionError(errno.EACCES, "Permission denied")
    other = RuntimeError("a collective timed out")
    assert checkpoint_error(_checkpoint_exception({1: other, 0: denied})) is denied
    assert checkpoint_error(_checkpoint_exception({1: other})) is other
    empty = checkpoint_error(_checkpoint_exception({}))
    assert isinstance(empty, RuntimeError) and "write" in str(empty)
    plain = ValueError("not a checkpoint")
    assert checkpoint_error(plain) is plain


class _Conn:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, obj: tuple) -> None:
        self.sent.append(obj)


def _answer(exc: BaseException) -> tuple:
    """What a rank sends the driver when a command raised ``exc``."""
    from runtime.trainer.rank import _send_error

    conn = _Conn()
    try:
        raise exc  # with a traceback, as in the rank's loop
    except BaseException as raised:  # noqa: BLE001
        _send_error(conn, raised)
    (answer,) = conn.sent
    return answer


def _trainers():
    """``answer_values`` as each of the two sharded trainers calls it (the local one and the
    Ray one), on a trainer whose ``_stop`` only records that it was called."""
    from runtime.ray_backend.ranks import RayShardedTrainer
    from runtime.trainer.sharded import ShardedTrainer

    stopped: list[str] = []

    def local(answers):
        tr = ShardedTrainer.__new__(ShardedTrainer)
        tr._broken, tr._stop = None, lambda: stopped.append(tr._broken)
        return answer_values(answers, tr._fail)

    def ray_side(answers):
        tr = RayShardedTrainer.__new__(RayShardedTrainer)
        tr._broken, tr._stop = None, lambda: stopped.append(tr._broken)
        return tr._unwrap(answers)

    return stopped, (local, ray_side)


@pytest.mark.parametrize("code", OUTPUT_ERRNOS)
def test_a_full_disk_inside_torch_s_checkpoint_reaches_the_driver_as_the_os_error(code,
                                                                                  capsys):
    """Before: the rank sent ``CheckpointException`` with no errno (when it sent anything:
    its loop let the exception through) and the driver raised ``RankLost`` (exit 1)."""
    from runtime.cli import EXIT_IO, guarded

    exc = _checkpoint_exception({1: OSError(code, os.strerror(code))})
    answer = _answer(exc)
    assert answer[1] == "OSError" and answer[4] == code and "\n" not in answer[2]
    stopped, readers = _trainers()
    for read in readers:
        stopped.clear()
        with pytest.raises(OSError) as info:
            read([answer, answer])  # every rank raised it (torch raises it on every rank)
        assert info.value.errno == code and isinstance(info.value.__cause__, RankLost)
        assert len(stopped) == 1  # the ranks were stopped

        def body(error=info.value):
            raise error
        assert guarded(body, "prog") == EXIT_IO  # the CLI's 74, one line
        assert capsys.readouterr().err == f"prog: cannot write the output: {os.strerror(code)}\n"


@pytest.mark.parametrize("exc, kind, raised, usable", [
    # an input error every rank raised: raised as it is, as one process raises it
    (ValueError("a sample of 9 tokens, budget 8"), "ValueError", ValueError, True),
    (FileNotFoundError("no checkpoint"), "FileNotFoundError", FileNotFoundError, True),
    # torch's checkpoint failure around an input error: that error
    (None, "FileNotFoundError", FileNotFoundError, True),
    # torch's checkpoint failure around anything else: a lost rank (train: exit 1)
    (RuntimeError("unexpected pos 704 vs 598"), "RuntimeError", RankLost, False),
    # not an output errno: a lost rank, not 74 (as before)
    (PermissionError(errno.EACCES, "Permission denied"), "PermissionError", RankLost, False),
    # BaseExceptions a rank's command could raise: one line naming them, never a dead rank
    (SystemExit(3), "SystemExit", RankLost, False),
    (KeyboardInterrupt(), "KeyboardInterrupt", RankLost, False),
], ids=["value", "not-found", "checkpoint-not-found", "checkpoint-runtime", "permission",
        "system-exit", "keyboard-interrupt"])
def test_every_rank_error_is_its_input_error_or_a_lost_rank(exc, kind, raised, usable):
    if exc is None:
        exc = _checkpoint_exception({0: FileNotFoundError("sharded/.metadata")})
    elif isinstance(exc, RuntimeError):
        exc = _checkpoint_exception({0: exc})
    answer = _answer(exc)
    assert answer[0] == "error" and answer[1] == kind
    assert answer[2] and "CheckpointException" not in answer[2]
    stopped, readers = _trainers()
    for read in readers:
        stopped.clear()
        with pytest.raises(raised) as info:
            read([answer, answer])
        assert "\n" not in str(info.value)
        if raised is RankLost:
            assert str(info.value).startswith(f"trainer rank 0: {kind}: ")
        assert bool(stopped) is not usable


def test_a_base_exception_without_a_message_is_named_by_its_repr():
    # str(SystemExit(3)) is "3": the line would read "trainer rank 0: SystemExit: 3"
    assert _answer(SystemExit(3))[2] == "SystemExit(3)"
    assert _answer(KeyboardInterrupt())[2] == "KeyboardInterrupt()"


# ------------------------------------------------------- torch's writer keeps the errno ----

@pytest.fixture
def file_size_limit():
    """Lower this process's file-size limit for the test (restored after): writes past it
    fail with EFBIG (Python ignores SIGXFSZ)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def set_to(nbytes: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))

    yield set_to
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 256)).sum().backward()
    opt.step()
    return model, opt


def test_a_full_disk_inside_torch_s_checkpoint_writer_is_the_os_error(tmp_path,
                                                                     file_size_limit):
    """DCP writes each tensor with ``torch.save``: a refused write came out as
    ``CheckpointException`` around ``RuntimeError('... unexpected pos ...')``, no errno.
    One process, no process group (DCP's own single-process mode)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from runtime.trainer.dcp import save_dcp

    model, opt = _model_and_optimizer()
    model_sd, optim_sd = get_state_dict(model, opt)
    nbytes = 3 * 256 * 257 * 4  # the weights and AdamW's two moments, float32
    file_size_limit(nbytes // 4)  # the shard file cannot be written whole
    with pytest.raises(OSError) as info:
        save_dcp({"model": model_sd, "optim": optim_sd}, tmp_path / "sharded")
    assert info.value.errno == errno.EFBIG


def test_a_cut_shard_file_loads_as_an_exception_not_a_checkpoint_exception(tmp_path):
    """``load_dcp`` (both trainers' resume of a sharded checkpoint) let torch's
    ``CheckpointException`` through: past every ``except Exception``, the CLI included (a
    traceback and exit 1, not one line and 70)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from runtime.trainer.dcp import SHARDED_DIR, load_dcp

    model, opt = _model_and_optimizer()
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp_path / SHARDED_DIR)
    (shard,) = (tmp_path / SHARDED_DIR).glob("*.distcp")
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    try:
        load_dcp(model, opt, tmp_path)
    except Exception:  # noqa: BLE001 - what the CLI and the rank's loop can report
        pass
    else:
        raise AssertionError("a cut shard file loaded")


# --------------------------------------------------- what a failed save leaves on disk -----

def test_a_failed_checkpoint_save_removes_its_temporary_directory(tmp_path):
    """``Checkpoints.commit``: an error from the trainer's save (a full disk, a lost rank)
    removes ``.tmp-step-N`` before it propagates. Before: it stayed until a resume. An
    interrupt (a BaseException: Ctrl-C, or the harness's simulated kill -9) may leave the
    trainer still writing there: it is left to the resume, which removes it."""
    import asyncio

    from runtime.recovery.store import Checkpoints

    cps = Checkpoints(tmp_path / "c", keep=2, fsync=False)

    async def full(path):
        (path / "sharded").mkdir()
        raise OSError(errno.ENOSPC, "No space left on device")

    async def killed(path):
        raise KeyboardInterrupt

    with pytest.raises(OSError):
        asyncio.run(cps.commit(1, full, {}))
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == []
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(cps.commit(1, killed, {}))
    assert [p.name for p in (tmp_path / "c").iterdir()] == [".tmp-step-000001"]
    # what a kill -9 of the sharded trainer's rank 0 leaves: its atomic_dir beside it
    (atomic_io.temp_path(tmp_path / "c" / ".tmp-step-000002") / "sharded").mkdir(parents=True)
    assert cps.remove_partial() == 2
    assert list((tmp_path / "c").iterdir()) == []


def test_remove_rank_temps_removes_only_the_temporary_directories_of_that_path(tmp_path):
    from runtime.trainer.sharded import remove_rank_temps

    target = tmp_path / "checkpoint-1"
    mine = atomic_io.temp_path(target)
    (mine / "sharded").mkdir(parents=True)
    others = [tmp_path / "checkpoint-10", atomic_io.temp_path(tmp_path / "checkpoint-10"),
              tmp_path / "checkpoint-1"]
    for p in others:
        p.mkdir()
    assert remove_rank_temps(target) == [mine]
    assert sorted(tmp_path.iterdir()) == sorted(others)


# --------------------------------------------------------- 2 rank processes (slow) ---------

def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2:].split()[0] != b"Z"


class FailsInSave(RankTrainer):
    """Rank 1 fails in the middle of a checkpoint save: after every rank wrote its shards into
    rank 0's temporary directory, while rank 0 writes the consolidated weights there (waiting
    for rank 1 in each gather, until the driver stops it). Rank 1 raises and lives on, so its
    answer is the first the driver gets (a rank that died could be reported by rank 0's gloo
    error first: a race the test would depend on)."""

    def _save(self, path):
        self.saving = True
        try:
            super()._save(path)
        finally:
            self.saving = False

    def _write_full(self, path):
        if getattr(self, "saving", False) and path is None:
            raise RuntimeError("rank 1 failed while saving")
        super()._write_full(path)


@pytest.mark.slow
def test_a_save_that_fails_on_one_rank_leaves_no_temporary_directory(tiny_model, tmp_path):
    """Rank 0 cannot remove its temporary directory when the driver stops it (rank 1 failed
    meanwhile; a rank that dies ends in the same ``sharded.write_on_ranks``): the driver
    removes it once every rank is gone. Before: the ``.checkpoint.tmp-PID`` directory, with
    the ranks' shards, stayed (a resume would not remove one inside ``checkpoints/`` either:
    it matched no ``.tmp-step-*``)."""
    tr = ShardedTrainer(tiny_model, TrainerConfig(), tmp_path / "run", seed=0, world_size=2,
                        rank_class=f"{__name__}:FailsInSave")
    try:
        with pytest.raises(RankLost) as info:
            tr._save(tmp_path / "run" / "checkpoint")
        assert str(info.value) == ("trainer rank 1: RuntimeError: rank 1 failed while saving "
                                   "(rank(s) 0 had not answered)")
        assert all(p.exitcode is not None for p in tr.procs)
        assert not _temps(tmp_path) and not (tmp_path / "run" / "checkpoint").exists()
    finally:
        tr.close()


class _Stop(BaseException):
    """Neither an Exception nor KeyboardInterrupt/SystemExit: what a library may raise (torch's
    CheckpointException is one)."""


class BaseExceptionInExport(RankTrainer):
    def _export(self, version):
        if self.rank == 1:
            raise _Stop("stop")
        return super()._export(version)


@pytest.mark.slow
def test_a_base_exception_in_a_rank_s_command_is_one_line_not_a_dead_rank(tiny_model, tmp_path,
                                                                          capfd):
    """Before: the rank's loop caught ``Exception`` only; rank 1 died with a traceback on
    stderr and the driver said "trainer rank 1 (pid N) exited with status 1 while in
    'export'". Now its answer names the error, and nothing is printed. Rank 0, stopped while
    it waited for rank 1 in a gather, cannot remove its ``weights/.v1.tmp-PID``: the driver
    does (before: it stayed, and no resume removes it)."""
    tr = ShardedTrainer(tiny_model, TrainerConfig(), tmp_path / "run", seed=0, world_size=2,
                        rank_class=f"{__name__}:BaseExceptionInExport")
    try:
        capfd.readouterr()
        with pytest.raises(RankLost) as info:
            tr._export(1)
        assert re.match(r"^trainer rank 1: _Stop: _Stop\('stop'\)", str(info.value)), \
            str(info.value)
        assert all(p.exitcode is not None for p in tr.procs)
        assert "Traceback" not in capfd.readouterr().err
        assert not _temps(tmp_path)
    finally:
        tr.close()


@pytest.mark.slow
def test_a_full_disk_while_two_ranks_save_is_one_line_exit_74_and_leaves_nothing(
        tmp_path, tiny_model):
    """Two steps at 2 ranks, a checkpoint after each; then ``--resume`` to 4 steps with a
    file-size limit above the exported weights and below a rank's shard file: the third
    step's checkpoint fails on both ranks. Before: exit 1, both ranks' tracebacks,
    "trainer rank 0 (pid N) exited with status 1 while in 'save'", and an empty
    ``checkpoints/.tmp-step-000003``. The checkpoints are those before the resume, so the
    next ``--resume`` (after freeing space) continues from step 2."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}

    def train(*args: str, limit: int | None = None) -> subprocess.CompletedProcess:
        def set_limit() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return subprocess.run([sys.executable, "-m", "runtime", "train", *args], env=env,
                              cwd=ROOT, text=True, capture_output=True, timeout=600,
                              preexec_fn=set_limit if limit else None)

    first = train(*TRAIN, "--steps", "2", "--output-dir", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    weights = (Path(tiny_model) / "model.safetensors").stat().st_size
    shards = [p.stat().st_size for p in (out / "checkpoints").glob("step-*/sharded/*.distcp")]
    limit = weights + weights // 4
    # the export (the weights, whole) fits under the limit; each rank's shard does not
    assert len(shards) == 4 and min(shards) > limit
    before = sorted(p.name for p in (out / "checkpoints").iterdir())

    proc = train("--resume", str(out), "--no-progress", "--steps", "4", limit=limit)
    assert proc.returncode == 74, proc.stderr[-3000:]
    for noise in ("Traceback", "CheckpointException", "RANK", "unexpected pos"):
        assert noise not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "reserve-occupy: cannot write the output: File too large")
    assert not _temps(out), _temps(out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before
    pids = [int(x) for x in re.search(r"trainer ranks ready: pids (\d+), (\d+)",
                                      proc.stdout).groups()]
    assert not [pid for pid in pids if _alive(pid)]  # every rank gone with the run


@pytest.mark.ray
@pytest.mark.slow
def test_on_ray_a_save_that_fails_on_one_rank_leaves_no_temporary_directory(tiny_model,
                                                                           tmp_path):
    """The Ray ranks fail through the same ``sharded.write_on_ranks``. ``ray.kill`` returns
    before rank 0's actor process has ended: the driver waits for it (``ranks._wait_gone``)
    before it removes the directory, which the actor could otherwise write into again."""
    ray = pytest.importorskip("ray")
    from runtime.ray_backend import loopback
    from runtime.ray_backend.backend import _env
    from runtime.ray_backend.ranks import RayShardedTrainer

    loopback.pin()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": _env()})
    try:
        tr = RayShardedTrainer(tiny_model, TrainerConfig(world_size=2), tmp_path / "run", 1.0,
                               0, 2, None, resources={"num_cpus": 1},
                               rank_class=f"{__name__}:FailsInSave")
        try:
            with pytest.raises(RankLost, match=r"^trainer rank 1: RuntimeError: rank 1 failed "
                                               r"while saving"):
                tr._set_steps("save", tmp_path / "run" / "checkpoint")
            assert not _temps(tmp_path) and not (tmp_path / "run" / "checkpoint").exists()
            with pytest.raises(RankLost, match="is stopped"):
                tr._set_steps("save", tmp_path / "run" / "checkpoint")
        finally:
            tr.close()
    finally:
        ray.shutdown()
