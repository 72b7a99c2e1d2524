"""The sharded GRPO trainer: ``trainer.world_size`` rank processes training one FSDP2 model,
behind the same ``Trainer`` and ``StreamingTrainer`` interface as ``GRPOTrainer`` (the driver
cannot tell the difference).

``ShardedTrainer`` lives in the driver's process and holds no model. It starts the ranks
(``runtime.trainer.rank``, spawned processes on this machine), hosts their rendezvous (a
``TCPStore`` on 127.0.0.1, on a port the system picks), and sends every rank each command over
its own pipe: every rank gets the whole batch and takes its share (what each does is in
``runtime.trainer.rank``). The torch work therefore runs outside the driver's interpreter: its
GIL is the driver's and the engines' alone.

Failures: a rank process that exits (killed, out of memory) is seen at once through its
process sentinel while the driver waits for the answers, and the call raises ``RankLost``
naming the rank and how it ended; the remaining ranks are stopped and the trainer refuses every
later call (a step some ranks took and others did not has no consistent weights; nothing of
it is exported). A rank that hangs in a collective is caught by the process group's timeout
(``trainer.collective_timeout_s``): the ranks waiting on it raise, and the call raises
``RankLost`` with the first rank's error. A bad batch (``ValueError``, raised by every rank
before any collective) is raised as it is and leaves the trainer usable. A rank that raises
alone in the middle of a command (a fault in its forward pass; any error after the command's
first collective that the ranks do not raise together, ``rank.raised_alike``) answers at
once, and the call stops the other ranks, which may be waiting in a collective it will not
join, and raises ``RankLost`` naming it, without waiting for the collective timeout. A rank
that cannot write the output (a full disk: an ``OSError`` with an output errno, torch's
``CheckpointException`` unwrapped to it by the rank, ``rank.rank_error``) stops the ranks and
raises that ``OSError`` (the CLI's exit 74). A failed checkpoint save or export leaves no
temporary directory (``write_on_ranks``).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
import weakref
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from .base import INPUT_ERRORS, OUTPUT_ERRNOS, TrainBatch

if TYPE_CHECKING:  # the type of the trainer section; the trainer reads its fields
    from ..config.schema import TrainerConfig

_INPUT_ERRORS = INPUT_ERRORS  # what a rank raises for its input (runtime.trainer.base)
_STOP_S = 10.0  # how long ``close`` waits for the ranks to leave before killing them


class RankLost(RuntimeError):
    """A trainer rank died or failed inside a collective: the sharded trainer is unusable."""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + " ..."


def _alike(answer: tuple) -> bool:
    """Whether a rank's error answer was raised alike on every rank (``rank.raised_alike``:
    before the command's first collective, or at a point every rank reaches together)."""
    return len(answer) <= 5 or bool(answer[5])


def fatal_answer(rank: int, answer: tuple, startup: bool, silent: list[int]) -> str | None:
    """Why a rank's answer stops the trainer at once, or None: an error answer (``("error",
    kind, text, traceback, errno, alike)``) while starting, of a kind other than the input
    errors (a collective timed out, or worse: the others may never answer), or an input error
    the rank raised alone in the middle of a command (not ``alike``: a fault in its forward
    pass, a ``ValueError`` after the step's first collective), which would leave the others
    waiting in a collective until ``collective_timeout_s``. One line naming the rank, its
    error and the ranks (``silent``) that had not answered yet."""
    if answer[0] != "error" or not startup and answer[1] in _INPUT_ERRORS and _alike(answer):
        return None
    return f"trainer rank {rank}: {answer[1]}: {_first_line(answer[2])}" + (
        f" (rank(s) {', '.join(map(str, silent))} had not answered)" if silent else "")




def output_error(answer: tuple) -> OSError | None:
    """A rank's error answer that says the output cannot be written (a full disk while rank 0
    writes the weights or a checkpoint), as an ``OSError`` with its errno; else None."""
    code = answer[4] if answer[0] == "error" and len(answer) > 4 else None
    return OSError(code, os.strerror(code)) if code in OUTPUT_ERRNOS else None


def answer_values(answers: list[tuple], fail: Callable[..., NoReturn]) -> list[Any]:
    """The values of every rank's answer (``("ok", value)``), in rank order. If some are
    errors: when every rank raised the same input error alike (a bad batch, found before any
    collective; ``NonFiniteStep`` after the shared check: ``rank.raised_alike``), that error
    is raised here, as one process raises it, and the trainer stays usable; else ``fail`` is
    called with one line naming the first rank that raised alone in the middle of the command
    (the one at fault), or else the first rank that failed (it stops the trainer and raises
    ``RankLost``)."""
    errors = [(r, a) for r, a in enumerate(answers) if a[0] == "error"]
    if errors:
        r, first = next(((r, a) for r, a in errors if not _alike(a)), errors[0])
        kind, text = first[1], first[2]
        if all(a[1] == kind and _alike(a) for _, a in errors) \
                and len(errors) == len(answers) and kind in _INPUT_ERRORS:
            raise _INPUT_ERRORS[kind](text)
        reason = f"trainer rank {r}: {kind}: {_first_line(text)}"
        fail(reason, output_error(first))
        raise RankLost(reason)  # ``fail`` raises it; this only if it returned
    return [a[1] for a in answers]


def stop_and_raise(trainer: Any, reason: str, cause: OSError | None = None) -> NoReturn:
    """How both sharded trainers (this one and ``ray_backend.ranks.RayShardedTrainer``) fail:
    mark ``trainer`` stopped (``_broken``), stop its ranks (``_stop``) and raise
    ``RankLost(reason)``; or, when a rank could not write the output (``output_error``), that
    ``OSError`` from the ``RankLost``, so a full disk is the CLI's exit 74 as in one process."""
    trainer._broken = reason
    trainer._stop()
    if cause is not None:
        raise cause from RankLost(reason)
    raise RankLost(reason)


def remove_rank_temps(path: Path) -> list[Path]:
    """Remove what a failed write of the directory ``path`` by the ranks left (a checkpoint,
    or the weights): rank 0 writes it (and every rank its checkpoint shards) into
    ``atomic_io.atomic_dir(path)``'s temporary directory beside it, ``.NAME.tmp-PID``, which
    rank 0 removes itself when the write raises there, but not when the driver stops it first
    (another rank failed or died while rank 0 wrote or waited in a collective). Called by the
    driver once every rank is stopped; returns what it removed."""
    import glob
    import shutil

    from .. import atomic_io

    removed = []
    for temp in Path(path).parent.glob(f".{glob.escape(Path(path).name)}{atomic_io.TEMP_MARK}*"):
        shutil.rmtree(temp, ignore_errors=True)
        removed.append(temp)
    return removed


def write_on_ranks(trainer: Any, path: Path, run: Callable[[], Any]) -> Any:
    """``run()`` (the ``save`` or ``export`` command to every rank of ``trainer``, which writes
    the directory ``path``) and its answer; when it raises and has stopped the ranks, first
    remove what they left (``remove_rank_temps``), so a failed write leaves no temporary
    directory. Both sharded trainers save and export through here."""
    try:
        return run()
    except Exception:
        if trainer._broken is not None:  # the ranks are stopped: nothing writes there now
            remove_rank_temps(path)
        raise


def _rank_process(rank: int, world: int, port: int, conn: Any, spec: dict[str, Any]) -> None:
    """A spawned rank process: ``rank.main``, with SIGINT ignored. Ctrl-C in a terminal
    sends SIGINT to the whole foreground process group, the ranks included; it is the
    driver's to handle (it stops the ranks: ``close``, or its exit). A rank that took it would
    raise KeyboardInterrupt wherever it was, print a traceback and leave mid-step. SIGTERM
    and SIGKILL still end a rank. (Ray's rank actors run ``rank.main`` in a thread of the
    actor's process, not through here.)"""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from . import rank as rank_module

    rank_module.main(rank, world, port, conn, spec)


def _kill_all(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=_STOP_S)


class ShardedTrainer:
    def __init__(self, model_path: str | Path, settings: TrainerConfig, out_dir: str | Path,
                 temperature: float = 1.0, seed: int = 0, keep_weights: int = 2,
                 total_steps: int | None = None, world_size: int | None = None,
                 timeout_s: float | None = None,
                 rank_class: str = "runtime.trainer.rank:RankTrainer") -> None:
        """The same arguments as ``GRPOTrainer``; ``world_size`` and ``timeout_s`` default to
        ``settings.world_size`` and ``settings.collective_timeout_s``; ``rank_class``: the
        ``RankTrainer`` each rank runs, as ``module:name`` (tests run variants of it). Returns once every rank
        has loaded and sharded the model; raises ``RankLost`` if one fails to."""
        import torch.distributed as dist

        self.world = int(world_size or settings.world_size)
        if self.world < 1:
            raise ValueError(f"trainer.world_size must be >= 1 (got {self.world})")
        self.timeout_s = float(timeout_s or settings.collective_timeout_s)
        self.out_dir = Path(out_dir)
        self.steps = 0
        self._broken: str | None = None
        self._lock = threading.Lock()  # one command at a time
        # The rendezvous: the driver hosts the store, so the port is the system's pick and no
        # other process can take it between choosing and binding.
        self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        spec = {"model_path": str(model_path), "settings": settings, "out_dir": str(out_dir),
                "temperature": temperature, "seed": seed, "keep_weights": keep_weights,
                "total_steps": total_steps, "timeout_s": self.timeout_s,
                "rank_class": rank_class}
        ctx = mp.get_context("spawn")
        self._conns, self.procs = [], []
        for r in range(self.world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_rank_process, args=(r, self.world, self._store.port,
                                                           child, spec),
                               name=f"ro-trainer-rank{r}", daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self.procs.append(proc)
        self._finalizer = weakref.finalize(self, _kill_all, list(self.procs))
        try:
            self.pids = self._gather(None, startup=True)
        except BaseException:
            self._stop()
            raise

    # ------------------------------------------------------------------ the channel ---------

    def _gather(self, message: tuple[str, tuple] | None, startup: bool = False) -> list[Any]:
        """Send ``message`` to every rank (None: only wait) and return their answers, in rank
        order; a rank that dies while the others work raises ``RankLost`` at once."""
        if self._broken is not None:
            raise RankLost(f"the sharded trainer is stopped: {self._broken}")
        with self._lock:
            if message is not None:
                for r, conn in enumerate(self._conns):
                    try:
                        conn.send(message)
                    except OSError:
                        pass  # its sentinel reports it below
            answers: dict[int, tuple] = {}
            by_conn = {c: r for r, c in enumerate(self._conns)}
            by_sentinel = {p.sentinel: r for r, p in enumerate(self.procs)}
            while len(answers) < self.world:
                pending = [c for c, r in by_conn.items() if r not in answers]
                ready = wait(pending + list(by_sentinel))
                for obj in ready:
                    if obj in by_conn:
                        try:
                            answer = answers[by_conn[obj]] = obj.recv()
                        except (EOFError, OSError):
                            continue  # the process is ending; its sentinel follows
                        reason = fatal_answer(by_conn[obj], answer, startup, [
                            r for r in range(self.world) if r not in answers])
                        if reason is not None:
                            self._fail(reason, output_error(answer))
                for obj in ready:
                    r = by_sentinel.get(obj)  # type: ignore[call-overload]
                    if r is not None and r not in answers:
                        self.procs[r].join(timeout=_STOP_S)
                        what = "starting" if startup else f"in '{message[0]}'" \
                            if message else "waiting"
                        self._fail(f"trainer rank {r} (pid {self.procs[r].pid}) "
                                   f"{_describe_exit(self.procs[r].exitcode)} while {what}")
            # while starting, any error answer failed above
            return answer_values([answers[r] for r in range(self.world)], self._fail)

    def _fail(self, reason: str, cause: OSError | None = None) -> NoReturn:
        """Stop every rank and raise ``RankLost(reason)``, or the rank's output error
        (``stop_and_raise``). Either way the trainer is stopped."""
        stop_and_raise(self, reason, cause)

    def _stop(self) -> None:
        _kill_all(self.procs)
        for c in self._conns:
            c.close()
        # The rendezvous is not needed once the ranks are gone. torch's TCPStore has no
        # close(): dropping the last reference stops its server and closes the listening
        # socket (a driver making and closing many trainers would otherwise keep one each).
        self._store = None

    def _run(self, cmd: str, *args: Any) -> Any:
        return self._gather((cmd, args))[0]

    def close(self) -> None:
        """Stop the ranks (they finish the command they are in first, up to ``_STOP_S``)."""
        if self._broken is None:
            self._broken = "closed"
            for c in self._conns:
                with contextlib.suppress(OSError):
                    c.send(("close", ()))
            deadline = time.monotonic() + _STOP_S
            for p in self.procs:
                p.join(timeout=max(0.0, deadline - time.monotonic()))
        self._stop()
        self._finalizer.detach()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------------ the Trainer --------

    def _train(self, batch: TrainBatch) -> dict[str, float]:
        metrics, self.steps = self._run("train", batch)
        return metrics

    def _accumulate(self, chunk: TrainBatch) -> None:
        self._run("accumulate", chunk)

    def _finish_step(self, batch: TrainBatch) -> dict[str, float]:
        metrics, self.steps = self._run("finish", batch)
        return metrics

    def _discard(self) -> None:
        self._run("discard")

    def _export(self, version: int) -> Path:
        return Path(write_on_ranks(self, self.out_dir / "weights" / f"v{version}",
                                   lambda: self._run("export", version)))

    def memory(self) -> list[dict[str, int]]:
        """Per rank, in rank order: its pid, its resident-set high-water mark (``peak_rss``)
        and the bytes of the parameters, gradients and optimiser state it holds (its shards:
        ``rank.state_bytes``); on a GPU also ``cuda_peak``, the rank's
        ``torch.cuda.max_memory_allocated`` on its device since it started."""
        return self._gather(("memory", ()))

    def _save(self, path: Path) -> None:
        self.steps = write_on_ranks(self, path, lambda: self._run("save", str(path)))

    def _load(self, path: Path) -> None:
        self.steps = self._run("load", str(path))

    async def train_step(self, batch: TrainBatch) -> dict[str, float]:
        return await asyncio.to_thread(self._train, batch)

    async def accumulate(self, chunk: TrainBatch) -> None:
        await asyncio.to_thread(self._accumulate, chunk)

    async def finish_step(self, batch: TrainBatch) -> dict[str, float]:
        return await asyncio.to_thread(self._finish_step, batch)

    async def export_weights(self, version: int) -> Path:
        return await asyncio.to_thread(self._export, version)

    async def save_checkpoint(self, path: Path) -> None:
        await asyncio.to_thread(self._save, Path(path))

    async def load_checkpoint(self, path: Path) -> None:
        await asyncio.to_thread(self._load, Path(path))
