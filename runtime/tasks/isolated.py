"""A user's reward in a worker process of its own: a hang cannot freeze the run.

A ``package.module:attribute`` reward is code the run did not write. In the driver's process it
runs on the event loop's only thread, so a reward that blocks (``time.sleep(3600)``, a lost
network call) stops everything: the unit timeout, the trainer, and the signal handlers, which
only run when the loop gets control back. ``IsolatedReward`` imports and calls it in a child
process instead (``python -m runtime.tasks.isolated``):

* **A process, not a thread.** A thread stuck in a reward cannot be stopped (Python has no way
  to end a thread from outside) and would keep the process alive at exit; a process can be
  killed. The driver waits for the worker's answer on the event loop (``loop.add_reader``), so
  timers and Ctrl-C/SIGTERM work while the reward runs.
* **One round trip per group.** The driver sends a group's committed completions in one
  message and the worker answers each in turn: the cost of isolation is one pipe round trip
  and the pickling of the texts per group (measured on this project's 2-core machine with a
  trivial reward: about 50 µs for a group of 1, 85 µs for 16), next to the group's generation.
* **A timeout per call.** Each answer must come within ``reward.timeout_s`` of the previous one
  (or of the request); starting a worker (Python, the import, the reward's construction) may
  take ``START_S`` (or ``reward.timeout_s`` if longer). A later answer raises
  ``RewardTimeout``: the worker is killed and a fresh one is started for the next request. The
  driver treats it as the group's failure (``runtime.driver``: dropped, ``reward_timeout``);
  the unit timeout (``timeouts.unit_s``) also cancels a group's scoring, which kills the worker
  too.
* **Every answer checked.** The worker converts what the reward returned with
  ``tasks.base.reward_value`` and sends either the float or the value's ``repr``: NaN, an
  infinity or a number beyond ``REWARD_LIMIT`` becomes ``RewardNotFinite`` (the group is
  dropped, as when the reward raises); a string, a bool or another type ``RewardValueError``
  naming the reward, the prompt and the value (the run stops, exit 2).
* **Import errors are input errors.** An ``ImportError``, any exception, or ``SystemExit`` while
  importing or building the reward is one ``RewardError`` naming the module (exit 2), as is a
  worker that dies (``os._exit``, a crash in native code): ``RewardCrashed``.
* **The worker's own streams.** The protocol runs on copies of the pipes' descriptors; the
  worker's stdout is pointed at its stderr and its stdin at ``/dev/null``, so a reward that
  prints or reads cannot corrupt the messages. It ignores SIGINT (a Ctrl-C reaches the whole
  process group; the driver ends the worker as it shuts down) and ends itself when its parent
  is gone (``PR_SET_PDEATHSIG`` on Linux, and a thread watching ``os.getppid()``), so even a
  ``kill -9`` of the run leaves no worker behind.
* **What the reward object offers is kept**: ``needs_answer``, ``check_answer`` (all answers in
  one message: ``first_bad_answer``) and ``metrics()``, whose counters come back with every
  answer; a killed worker's counters are kept and added to its successor's, so the per-step
  increases ``metrics.jsonl`` reports never go backwards.

Messages are length-prefixed pickles (the prompts are ``Prompt`` dataclasses). The built-in
rewards are not isolated (``open_reward``): they are this project's code, quick,
and the math reward's verifier times itself out with ``signal.alarm`` in the main thread.
"""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .base import (
    BUILTIN,
    Prompt,
    RewardAborted,
    RewardCrashed,
    RewardError,
    RewardFn,
    RewardNotFinite,
    RewardRaised,
    RewardTimeout,
    bad_value,
    build_reward,
    load_reward,
    not_finite,
    one_line,
    reward_target,
    reward_value,
)

HEADER = struct.Struct(">I")
# How long a worker may take to start, import the reward's module and build it: a Python
# start-up and an import (torch's alone takes seconds on a busy machine), not a call, so not
# bounded by a short reward.timeout_s; a longer reward.timeout_s raises it.
START_S = 120.0


def open_reward(name: str, options: dict[str, Any], timeout_s: float) -> RewardFn:
    """The reward a run uses: a built-in one in this process (this project's code, quick, and
    the math reward's verifier times itself out with ``signal.alarm`` in the main thread); a
    ``package.module:attribute`` one imported and run in a worker process (``IsolatedReward``),
    each call limited to ``timeout_s``. ``RewardError`` if it cannot be built."""
    if name in BUILTIN:
        return load_reward(name, **options)
    return IsolatedReward(name, reward_target(name), options, timeout_s)  # type: ignore


class _Dead(Exception):
    """The worker's pipe closed: it exited."""


class IsolatedReward:
    """A ``package.module:attribute`` reward running in a worker process (module docstring).

    ``await score(prompt, completions)``: the rewards of one group; ``first_bad_answer``,
    ``metrics()``, ``needs_answer`` as the reward object has them; ``close()`` ends the worker
    (also at exit). Raises ``RewardError`` at construction when the reward cannot be built."""

    def __init__(self, name: str, target: str, options: dict[str, Any],
                 timeout_s: float) -> None:
        self.name, self.target, self.options = name, target, dict(options)
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = bytearray()
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._base: dict[str, float] = {}  # counters of workers that were killed
        self._last: dict[str, float] = {}  # the current worker's counters
        self.restarts = 0
        info = self._start()
        self.needs_answer = bool(info.get("needs_answer"))
        self._has_check = bool(info.get("check_answer"))
        self._has_metrics = bool(info.get("metrics"))
        import atexit

        atexit.register(self.close)

    def __repr__(self) -> str:
        return f"IsolatedReward({self.name!r})"

    # ------------------------------------------------------------------ the worker -----------

    def _start(self) -> dict[str, Any]:
        self._spawn()
        try:
            reply = self._read_sync(self._start_s)
        except (TimeoutError, _Dead) as exc:
            raise self._not_ready(exc) from None
        return self._ready(reply)

    async def _start_async(self) -> None:
        """A fresh worker after one was ended, waited for on the event loop (an import that
        hangs must not hold the run's signals)."""
        self.restarts += 1
        self._spawn()
        try:
            reply = await self._read_async(self._start_s)
        except (TimeoutError, asyncio.TimeoutError, _Dead) as exc:
            raise self._not_ready(exc) from None
        self._ready(reply)

    def _spawn(self) -> None:
        self._buf = bytearray()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.tasks.isolated"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, close_fds=True)
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        try:
            self._send(("init", self.target, self.options, list(sys.path), os.getpid()))
        except _Dead:
            pass  # read next: the exit status says why

    def _not_ready(self, exc: BaseException) -> RewardError:
        status = self._kill()
        if isinstance(exc, _Dead):
            return RewardError(f"reward {self.name!r}: its worker process exited "
                               f"({_status(status)}) while importing {self.target}")
        return RewardError(f"reward {self.name!r}: importing and building it took longer "
                           f"than {self._start_s:g} s")

    @property
    def _start_s(self) -> float:
        return max(self.timeout_s, START_S)

    def _ready(self, reply: Any) -> dict[str, Any]:
        if reply[0] != "ready":
            self._kill()
            raise RewardError(f"reward {self.name!r}: {reply[1]}")
        return reply[1]

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        status = proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self._base = {k: self._base.get(k, 0.0) + self._last.get(k, 0.0)
                      for k in {*self._base, *self._last}}
        self._last = {}
        return status

    def close(self) -> None:
        """End the worker (idempotent)."""
        if self._proc is not None:
            self._kill()

    def _ensure(self) -> None:
        if self._proc is None:
            self.restarts += 1
            self._start()

    # ------------------------------------------------------------------ framing --------------

    def _send(self, message: Any) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._proc.stdin.write(HEADER.pack(len(data)) + data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _Dead() from None

    def _take(self) -> Any | None:
        if len(self._buf) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buf)
        if len(self._buf) < HEADER.size + size:
            return None
        data = bytes(self._buf[HEADER.size:HEADER.size + size])
        del self._buf[:HEADER.size + size]
        return pickle.loads(data)

    def _fill(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            chunk = os.read(self._proc.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            raise _Dead()
        self._buf += chunk

    def _read_sync(self, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._take()
            if message is not None:
                return message
            assert self._proc is not None and self._proc.stdout is not None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            ready, _, _ = select.select([self._proc.stdout.fileno()], [], [], left)
            if ready:
                self._fill()

    async def _read_async(self, timeout_s: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            message = self._take()
            if message is not None:
                return message
            assert self._proc is not None and self._proc.stdout is not None
            fd = self._proc.stdout.fileno()
            readable = loop.create_future()
            loop.add_reader(fd, lambda: readable.done() or readable.set_result(None))
            try:
                await asyncio.wait_for(readable, max(0.0, deadline - loop.time()))
            finally:
                loop.remove_reader(fd)
            self._fill()

    # ------------------------------------------------------------------ the reward's calls ---

    async def score(self, prompt: Prompt, completions: Sequence[str]) -> list[float]:
        """The rewards of ``completions`` of ``prompt``, in one round trip. Raises
        ``RewardRaised`` (the reward raised: the caller drops the group), ``RewardTimeout``,
        ``RewardValueError``, ``RewardCrashed``, ``RewardAborted``. A cancellation while the
        worker holds the request kills it (its late answer must not reach the next request)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:  # a lock serves one loop
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            done = False
            try:
                if self._proc is None:
                    await self._start_async()
                replies = await self._score(prompt, completions)
                done = True  # every answer read: the worker is idle, whatever they say
            finally:
                if not done:
                    self._kill()
        return [self._answer(reply, prompt) for reply in replies]

    async def _score(self, prompt: Prompt, completions: Sequence[str]) -> list[Any]:
        try:
            self._send(("score", prompt, list(completions)))
        except _Dead:
            raise self._crashed(prompt) from None
        replies = []
        for _ in completions:  # every answer is read, so the worker is idle after a raise
            replies.append(await self._read_reply(prompt))
        counters = await self._read_reply(prompt)
        if counters[0] == "metrics" and counters[1] is not None:
            self._last = dict(counters[1])
        return replies

    async def _read_reply(self, prompt: Prompt) -> Any:
        try:
            return await self._read_async(self.timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            raise RewardTimeout(
                f"reward {self.name!r} did not return within reward.timeout_s = "
                f"{self.timeout_s:g} s scoring a completion of {_where(prompt)}; its worker "
                f"process was ended") from None
        except _Dead:
            raise self._crashed(prompt) from None

    def _answer(self, reply: Any, prompt: Prompt) -> float:
        kind = reply[0]
        if kind == "ok":
            return reward_value(reply[1], self.name, prompt)  # checked again: a float
        if kind == "bad":
            raise bad_value(self.name, prompt, reply[1])
        if kind == "not_finite":  # NaN, an infinity, beyond REWARD_LIMIT: the group is dropped
            raise not_finite(self.name, prompt, reply[1])
        if kind == "raised":
            raise RewardRaised(reply[1])
        if kind == "aborted":
            raise RewardAborted(f"the reward raised {reply[1]}")
        raise RewardCrashed(f"reward {self.name!r}: its worker answered {one_line(repr(kind))}")

    def _crashed(self, prompt: Prompt) -> RewardCrashed:
        status = self._kill()
        return RewardCrashed(f"reward {self.name!r}: its worker process exited "
                             f"({_status(status)}) while scoring {_where(prompt)}")

    def __call__(self, prompt: Prompt, completion: str) -> float:
        """One completion, outside an event loop (the ``RewardFn`` interface)."""
        self._ensure()
        done = False
        try:
            self._send(("score", prompt, [completion]))
            replies = [self._read_sync(self.timeout_s) for _ in range(2)]
            done = True
        except TimeoutError:
            raise RewardTimeout(f"reward {self.name!r} did not return within reward.timeout_s "
                                f"= {self.timeout_s:g} s scoring a completion of "
                                f"{_where(prompt)}; its worker process was ended") from None
        except _Dead:
            raise self._crashed(prompt) from None
        finally:
            if not done:
                self._kill()
        if replies[1][0] == "metrics" and replies[1][1] is not None:
            self._last = dict(replies[1][1])
        return self._answer(replies[0], prompt)

    def first_bad_answer(self, answers: Sequence[str]) -> tuple[int, str] | None:
        """(position, the reward's message) of the first answer its ``check_answer`` refuses
        (with ``ValueError``), or None. All answers in one round trip, before the run."""
        if not self._has_check:
            return None
        self._ensure()
        try:
            self._send(("check", list(answers)))
            reply = self._read_sync(self.timeout_s * max(1, len(answers)))
        except TimeoutError:
            self._kill()
            raise RewardError(f"reward {self.name!r}: its check_answer did not return within "
                              f"reward.timeout_s = {self.timeout_s:g} s per answer") from None
        except _Dead:
            status = self._kill()
            raise RewardError(f"reward {self.name!r}: its worker process exited "
                              f"({_status(status)}) in check_answer") from None
        if reply[0] == "error":
            raise RewardError(f"reward {self.name!r}: {reply[1]}")
        return reply[1]

    def metrics(self) -> dict[str, float]:
        """The reward's counters (its ``metrics()``), those of ended workers included; {} for a
        reward without them."""
        if not self._has_metrics:
            return {}
        return {k: self._base.get(k, 0.0) + self._last.get(k, 0.0)
                for k in {*self._base, *self._last}}


def _where(prompt: Prompt) -> str:
    return prompt.source or f"prompt {prompt.index}"


def _status(status: int | None) -> str:
    if status is None:
        return "status unknown"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"status {status}"


# ---------------------------------------------------------------------- the worker side ------


def _worker() -> int:
    """The worker's loop: protocol on copies of fds 0 and 1; the reward's prints go to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def read() -> Any:
        head = _read_exact(inp, HEADER.size)
        if head is None:
            return None
        data = _read_exact(inp, HEADER.unpack(head)[0])
        return None if data is None else pickle.loads(data)

    def write(message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(HEADER.pack(len(data)) + data)

    first = read()
    if first is None or first[0] != "init":
        return 1
    _, target, options, path, parent = first
    _watch_parent(parent)
    sys.path[:] = path
    try:
        reward = build_reward(target, target, options)
    except RewardError as exc:
        write(("error", _strip(str(exc), target)))
        return 0
    metrics = getattr(reward, "metrics", None)
    write(("ready", {"needs_answer": bool(getattr(reward, "needs_answer", False)),
                     "check_answer": callable(getattr(reward, "check_answer", None)),
                     "metrics": callable(metrics)}))
    while True:
        message = read()
        if message is None:
            return 0
        if message[0] == "score":
            _, prompt, completions = message
            for completion in completions:
                write(_score_one(reward, prompt, completion))
            write(("metrics", _counters(metrics)))
        elif message[0] == "check":
            write(_check(reward, message[1]))


def _strip(message: str, target: str) -> str:
    prefix = f"reward {target!r}: "
    return message[len(prefix):] if message.startswith(prefix) else message


def _score_one(reward: Any, prompt: Prompt, completion: str) -> tuple[str, Any]:
    try:
        value = reward(prompt, completion)
    except Exception as exc:
        return ("raised", one_line(repr(exc)))
    except BaseException as exc:  # SystemExit, ...: the reward tried to end the process
        return ("aborted", one_line(repr(exc)))
    try:
        return ("ok", reward_value(value, "", prompt))
    except RewardNotFinite:
        return ("not_finite", _value_repr(value))
    except RewardError:
        return ("bad", _value_repr(value))


def _value_repr(value: Any) -> str:
    try:
        return one_line(repr(value))
    except Exception as exc:  # a __repr__ that raises
        return f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"


def _check(reward: Any, answers: list[str]) -> tuple[str, Any]:
    check = reward.check_answer
    for i, answer in enumerate(answers):
        try:
            check(answer)
        except ValueError as exc:
            return ("checked", (i, one_line(str(exc))))
        except BaseException as exc:
            return ("error", f"its check_answer raised {one_line(repr(exc))}")
    return ("checked", None)


def _counters(metrics: Any) -> dict[str, float] | None:
    if not callable(metrics):
        return None
    try:
        counters = metrics()
        return {str(k): float(v) for k, v in dict(counters).items()
                if isinstance(v, (int, float)) and math.isfinite(float(v))}
    except Exception:
        return None


def _read_exact(f: Any, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _watch_parent(parent: int) -> None:
    """End this worker when the run process is gone, also while the reward blocks."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: S110 - best effort; the thread below also watches
            pass

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
    if os.getppid() != parent:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(_worker())
