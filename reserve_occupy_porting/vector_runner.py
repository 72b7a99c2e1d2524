"""Feed conformance vectors to a port through an adapter, and judge what comes back.

An adapter is a few lines around the port's controller (``Adapter`` below). For each vector the
runner calls ``start(config)``, then one method per recorded operation, turns each return value
into a trace record and compares it with the reference's -- exactly as ``check-trace`` compares
a logged event (``compare``). Strict mode stops a vector at its first difference. Lenient mode
lets the port decide differently: it skips operations that no longer apply to the port's own
state (occupying a unit the port never admitted, publishing with nothing training) and checks the
safety invariants on the port's outcomes (``safety``).

A port in another language runs as a subprocess speaking JSON Lines (``SubprocessAdapter``): it
reads a header line, then one request per line (``{"op": "reserve", "unit": "u3"}``), and
answers each with one line -- the trace record it would log (``{"refused": true}`` for a
refusal). A header line starts a fresh controller (one process serves every vector); it gets
any one-line answer. An adapter process that cannot be started, exits, or stays silent for
``answer_timeout_s`` raises ``AdapterError`` (the command line: one line, exit status 2): that
is not a verdict on any vector. The process runs in a session of its own; ``close`` ends its
whole process group, whatever it started there included, at the end of every run.

An in-process adapter is untrusted code too: ``run(..., call_timeout_s=T)`` calls every method
under a ``CallGuard``, so one that does not return within ``T`` seconds is interrupted (and
``AdapterError``), and a ``KeyboardInterrupt`` (or ``SystemExit``) the adapter raises is its
error, never taken for the user's Ctrl-C.
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from reserve_occupy import Config, StalenessController
from reserve_occupy.trace import (
    TraceEntry,
    TraceFormatError,
    dumps,
    header,
    loads_bounded,
    parse_config,
    parse_record,
)

from .compare import Difference, differences, rule_for
from .safety import FINISHED, IN_FLIGHT, SafetyTracker, Violation

UNIT_OPS = ("reserve", "occupy", "abort", "filter")


class Adapter(Protocol):
    """What a port implements. Return values may be short (see ``outcome_record``):

    * ``reserve(unit)``: None/False = must wait; True = admitted; ``b`` or ``(b, i)`` = where.
    * ``occupy(unit)``: None = placed (nothing more to say); ``b`` or ``(b, i)``; or a dict.
    * ``abort(unit)``, ``filter(unit)``: None, or a dict with ``aborted``/``slot``/``moves``.
    * ``consume()``: None = nothing READY; a list of unit ids; or a dict ``{"version", "units"}``.
    * ``publish()``: anything.
    * ``release_stuck()``: the list of units it aborted (empty = nothing to release).
    * ``stream()`` (only for vectors whose config has ``streaming``): the units it handed to
      the trainer, as ids or ``BatchUnit``s (empty = nothing new to hand).

    Any method may instead return a full trace record (a dict, as the port would log it), and
    the core's own result objects (``Reservation``, ``Placement``, ``Batch`` ...) are accepted.
    A reservation aborted by a buffer's closing (oversampling) must be reported in ``aborted``.
    """

    def start(self, config: Config) -> None: ...
    def reserve(self, unit_id: Any) -> Any: ...
    def occupy(self, unit_id: Any) -> Any: ...
    def abort(self, unit_id: Any) -> Any: ...
    def filter(self, unit_id: Any) -> Any: ...
    def consume(self) -> Any: ...
    def publish(self) -> Any: ...
    def release_stuck(self) -> Any: ...
    def stream(self) -> Any: ...


class ReferenceAdapter:
    """The reference controller as an adapter (the test suite runs the corpus through it)."""

    def __init__(self, factory: Any = StalenessController) -> None:
        self.factory = factory

    def start(self, config: Config) -> None:
        self.c = self.factory(config)

    def reserve(self, unit_id: Any) -> Any:
        return self.c.reserve(unit_id)

    def occupy(self, unit_id: Any) -> Any:
        return self.c.occupy(unit_id)

    def abort(self, unit_id: Any) -> Any:
        return self.c.abort(unit_id)

    def filter(self, unit_id: Any) -> Any:
        return self.c.filter(unit_id)

    def consume(self) -> Any:
        return self.c.consume()

    def publish(self) -> Any:
        return self.c.publish()

    def release_stuck(self) -> Any:
        return self.c.release_stuck()

    def stream(self) -> Any:
        return self.c.stream()


class AdapterError(Exception):
    """The adapter process cannot be started or stopped answering: no verdict is possible."""


class AdapterTimeout(BaseException):
    """Raised in the main thread, by ``CallGuard``'s SIGALRM handler, inside an adapter call
    that has run past its timeout. A ``BaseException``, so that an adapter's ``except
    Exception`` does not swallow it; ``CallGuard.call`` turns it into ``AdapterError``."""


STUCK_GRACE_S = 5.0  # after the interruption, how long a call may take to give up


class CallGuard:
    """Calls into an in-process adapter (untrusted code) with a timeout, and tells the user's
    Ctrl-C from the adapter's own ``KeyboardInterrupt``.

    How a hung call is ended: a daemon thread watches the call in progress; once it has run
    ``timeout_s`` seconds it sends SIGALRM to the main thread, whose handler (installed by
    ``__enter__``, the previous one restored by ``__exit__``) raises ``AdapterTimeout`` in the
    call -- a real signal, so a call blocked in ``sleep``, ``select`` or a lock wait is woken
    too -- and ``call`` raises ``AdapterError``. A call that does not give up within
    ``STUCK_GRACE_S`` more seconds (it catches ``BaseException``, or sits in native code that
    does not return to the interpreter) is reported to ``on_stuck(what)``: the command line
    prints one line and exits the process with status 2 (``os._exit``: the adapter's thread
    cannot be stopped any other way); without ``on_stuck`` the signal is sent again every
    ``STUCK_GRACE_S``. Signals reach only the main thread: elsewhere no timeout is enforced
    (the command line always runs in the main thread).

    A ``KeyboardInterrupt`` (or ``runtime.cli.Terminated``) raised in a call is the user's
    only if a SIGINT or SIGTERM came while the guard was on (the handlers in place are wrapped
    to note it, and otherwise act as before); else the adapter raised it, and ``call`` raises
    ``AdapterError`` naming the call."""

    def __init__(self, timeout_s: float | None = None, on_stuck: Any = None) -> None:
        self.timeout_s = timeout_s
        self.on_stuck = on_stuck
        self.signalled = False  # a SIGINT or SIGTERM came: a KeyboardInterrupt is the user's
        self._serial = 0
        self._active: int | None = None  # the serial of the call in progress
        self._what = ""
        self._started = 0.0
        self._fired: int | None = None  # the call interrupted
        self._previous: dict[int, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CallGuard:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if callable(handler):
                self._previous[sig] = handler
                signal.signal(sig, self._noting(handler))
        if self.timeout_s is not None:
            self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_alarm)
            self._thread = threading.Thread(target=self._watch, name="adapter-call-guard",
                                            args=(threading.main_thread().ident,), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _noting(self, handler: Any) -> Any:
        def noted(signum: int, frame: Any) -> Any:
            self.signalled = True
            return handler(signum, frame)
        return noted

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self._active is not None and self._active == self._fired:
            raise AdapterTimeout(self._what)

    def _watch(self, main_ident: int) -> None:
        assert self.timeout_s is not None
        poll = max(0.01, min(0.5, self.timeout_s / 4))
        while not self._stop.wait(poll):
            active = self._active
            if active is None or time.monotonic() - self._started < self.timeout_s:
                continue
            self._fired = active
            while self._active == active and not self._stop.is_set():
                signal.pthread_kill(main_ident, signal.SIGALRM)
                if self._stop.wait(STUCK_GRACE_S) or self._active != active:
                    break
                if self.on_stuck is not None:
                    self.on_stuck(self._what)
                    return

    def call(self, what: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, an adapter's code, named ``what`` in messages."""
        self._serial += 1
        self._what, self._started = what, time.monotonic()
        try:
            try:
                self._active = self._serial
                return fn(*args)
            finally:
                self._active = None
        except AdapterTimeout:
            raise AdapterError(f"the adapter did not return from {what} within "
                               f"{self.timeout_s:g} s (--adapter-timeout): interrupted") from None
        except KeyboardInterrupt as exc:
            if self.signalled:
                raise  # the user's Ctrl-C (or a SIGTERM)
            raise AdapterError(f"the adapter raised {type(exc).__name__} in {what}: an "
                               f"adapter must return or raise an exception (a "
                               f"KeyboardInterrupt it raises is not the user's Ctrl-C)") from None


MAX_ANSWER_BYTES = 64 << 20  # one answer line; a longer one is a runaway port, not a record


class SubprocessAdapter:
    """A port in any language, run as ``command`` and spoken to in JSON Lines (module doc)."""

    def __init__(self, command: str, answer_timeout_s: float = 60.0) -> None:
        self.command = command
        self.answer_timeout_s = answer_timeout_s
        self.proc: subprocess.Popen | None = None
        self._pending = b""  # bytes read past the last answer line

    def _gone(self, what: str, exiting: bool = False) -> AdapterError:
        """``exiting``: the port closed its output or input, so it is ending; give it up to
        5 s (a loaded machine) to say how, rather than guess it is still running."""
        code = None
        if self.proc is not None:
            try:  # a port that closed its output is usually exiting: report how
                code = self.proc.wait(timeout=5.0 if exiting else 0.5)
            except subprocess.TimeoutExpired:
                pass
        status = f"exit status {code}" if code is not None else "still running"
        return AdapterError(f"adapter command {self.command!r} {what} ({status})")

    def _readline(self) -> bytes:
        """One answer line, waiting at most ``answer_timeout_s`` (a silent port must not hang
        the runner). Linear in the answer's length: each chunk is searched once for the
        newline; an answer longer than ``MAX_ANSWER_BYTES`` is refused as soon as it is."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.answer_timeout_s
        pending = bytearray(self._pending)
        end = pending.find(b"\n")
        while end < 0 or end > MAX_ANSWER_BYTES:
            if len(pending) > MAX_ANSWER_BYTES:
                self._pending = b""
                raise AdapterError(f"adapter command {self.command!r} sent an answer line longer "
                                   f"than {MAX_ANSWER_BYTES >> 20} MiB: too long for one "
                                   f"trace record")
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                raise self._gone(f"gave no answer within {self.answer_timeout_s:g} s")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise self._gone("closed its output", exiting=True)
            found = chunk.find(b"\n")
            if found >= 0:
                end = len(pending) + found
            pending += chunk
        line, self._pending = bytes(pending[:end]), bytes(pending[end + 1:])
        return line

    def _send(self, request: dict[str, Any]) -> bytes:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:  # BrokenPipeError: it exited before reading
            raise self._gone("exited before reading its input", exiting=True) from None
        return self._readline()

    def _ask(self, request: dict[str, Any]) -> Any:
        answer = self._send(request)
        try:
            return loads_bounded(answer)
        except ValueError as exc:  # not JSON, nested too deep, a key twice, not UTF-8
            raise RuntimeError(f"adapter answered {answer.strip()[:200]!r}, not JSON "
                               f"({getattr(exc, 'msg', exc)})") from None

    def start(self, config: Config) -> None:
        # One process for the whole run: each header line starts a fresh controller.
        if self.proc is None:
            try:
                argv = shlex.split(self.command)
            except ValueError as exc:
                raise AdapterError(f"adapter command {self.command!r}: {exc}") from None
            if not argv:
                raise AdapterError("the adapter command is empty")
            try:
                # a session of its own: ``close`` ends its whole process group
                self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, bufsize=0,
                                             start_new_session=True)
            except OSError as exc:
                raise AdapterError(f"adapter command {self.command!r} cannot be started: "
                                   f"{exc.strerror or exc}") from None
        self._send(header(config))  # any one-line answer acknowledges the header

    def close(self) -> None:
        """End the port and its whole process group (what it started and left running, a
        daemon that did not leave the group): its input is closed, it has 2 s to exit, then
        the group gets SIGTERM and, ``STUCK_GRACE_S`` later, SIGKILL. The port is reaped only
        after, so its pid (the group's id) is not free for another process meanwhile. A
        daemon that left the group (``setsid``) is ended by the command's watchdog marker
        (``conformance._run_watched``)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        _wait_unreaped(proc.pid, 2.0)
        _end_group(proc.pid)
        proc.wait()

    def __getattr__(self, op: str) -> Any:
        if op not in UNIT_OPS and op not in ("consume", "publish", "release_stuck", "stream"):
            raise AttributeError(op)
        if op in UNIT_OPS:
            return lambda unit_id: self._ask({"op": op, "unit": unit_id})
        return lambda: self._ask({"op": op})


def _wait_unreaped(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for child ``pid`` to exit, without reaping it (its pid stays
    taken). True if it exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    """A process of group ``pgid`` other than a zombie (Linux: /proc; elsewhere: assume so)."""
    if not os.path.isdir("/proc/self"):
        return True
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2:].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _end_group(pgid: int, grace_s: float = STUCK_GRACE_S) -> None:
    """SIGTERM process group ``pgid``, SIGKILL it if anything of it is alive ``grace_s``
    later. Its leader must not be reaped yet (so the id cannot be another group's)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except OSError:  # ESRCH: nothing left in it; EPERM: not ours
        return
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


# ----------------------------------------------------------------- outcomes -> records ------

def _slot(value: Any) -> Any:
    if hasattr(value, "buffer") and hasattr(value, "index"):
        return value.buffer if value.index is None else [value.buffer, value.index]
    if isinstance(value, tuple):
        return list(value)
    return value


def _from_object(op: str, value: Any) -> dict[str, Any]:
    """A core result object (Reservation, Placement, Removal, Batch) as record fields."""
    out: dict[str, Any] = {}
    if hasattr(value, "slot"):
        out["slot"] = _slot(value.slot)
    if hasattr(value, "v_traj") and op in ("reserve", "occupy"):
        out["v_traj"] = value.v_traj
    if hasattr(value, "moves"):
        out["moves"] = [{"unit": m.unit_id, "from": _slot(m.src), "to": _slot(m.dst),
                         "reason": getattr(m.reason, "value", m.reason)} for m in value.moves]
    if hasattr(value, "aborted"):
        out["aborted"] = list(value.aborted)
    if hasattr(value, "units") and op == "consume":
        out["batch"] = {"version": value.version,
                        "units": [{"unit": u.unit_id, "v_traj": u.v_traj} for u in value.units]}
        if getattr(value, "streamed", ()):
            out["batch"]["streamed"] = list(value.streamed)
    return out


def outcome_record(op: str, unit_id: Any, value: Any, batches: int) -> dict[str, Any]:
    """Turn an adapter's return value into a trace record (``batches``: consumes so far, the
    version of a batch returned as a bare list)."""
    record: dict[str, Any] = {"op": op}
    if op in UNIT_OPS:
        record["unit"] = unit_id
    if isinstance(value, dict):
        fields = {k: v for k, v in value.items() if k not in ("op", "unit")}
        record.update(fields)
        if op == "consume" and "units" in fields:  # a bare batch {"version", "units"}
            record = {"op": op, "batch": {"version": fields.get("version", batches),
                                          "units": fields["units"]}}
        return record
    refused = value is None or value is False or (
        op in ("release_stuck", "stream") and not value)
    if op in ("reserve", "consume", "release_stuck", "stream") and refused:
        record["refused"] = True
    elif op == "stream":  # the units handed, for the head buffer (= batches consumed so far)
        record["batch"] = {"version": batches, "units": [
            {"unit": u.unit_id, "v_traj": u.v_traj} if hasattr(u, "unit_id") else {"unit": u}
            for u in value]}
    elif op in ("reserve", "occupy") and value is not None and value is not True:
        # Result objects are NamedTuples, so look for their fields before treating a tuple
        # as a bare (buffer, index).
        record.update(_from_object(op, value) if hasattr(value, "slot")
                      else {"slot": _slot(value)})
    elif op in ("abort", "filter") and value is not None:
        record.update(_from_object(op, value))
    elif op == "consume":
        if hasattr(value, "units"):
            record.update(_from_object(op, value))
        else:
            record["batch"] = {"version": batches, "units": [{"unit": u} for u in value]}
    elif op == "release_stuck":
        record.update(_from_object(op, value) if hasattr(value, "aborted")
                      else {"aborted": list(value)})
    return record


# ----------------------------------------------------------------- running ------------------

@dataclass
class Failure:
    vector: str
    step: int  # 0-based index into the vector's events
    request: str
    detail: str
    outcomes: list[dict[str, Any]]  # the port's records up to and including the failing one


@dataclass
class Result:
    mode: str
    vectors: int = 0
    steps: int = 0
    skipped: int = 0  # lenient: operations that no longer applied to the port's state
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _request(op: str, unit_id: Any) -> str:
    return f"{op} {unit_id!r}" if op in UNIT_OPS else op


def _call(adapter: Any, op: str, unit_id: Any, guard: CallGuard | None = None) -> Any:
    method = getattr(adapter, op)
    args = (unit_id,) if op in UNIT_OPS else ()
    if guard is None:
        return method(*args)
    return guard.call(f"{op}({unit_id!r})" if op in UNIT_OPS else f"{op}()", method, *args)


def _applies(tracker: SafetyTracker, op: str, unit_id: Any) -> bool:
    """Lenient mode: does this recorded operation still make sense for the port's state?"""
    state = tracker.state(unit_id) if op in UNIT_OPS else None
    if op == "reserve":
        return state is None
    if op in ("occupy", "abort"):
        return state == IN_FLIGHT
    if op == "filter":
        return state == FINISHED
    if op == "publish":
        return tracker.training
    return not tracker.training  # consume, release_stuck, stream


def run_vector(adapter: Any, vector: dict[str, Any], mode: str, result: Result,
               guard: CallGuard | None = None) -> None:
    from .vectors import CorpusError

    try:
        config = parse_config({"op": "config", "schema_version": 1, "config": vector["config"]})
    except TraceFormatError as exc:  # the corpus, not the port, is wrong
        raise CorpusError(f"vector {vector.get('id')!r}: {exc}") from None
    try:
        if guard is None:
            adapter.start(config)
        else:
            guard.call("start(config)", adapter.start, config)
    except AdapterError:
        raise
    except (SystemExit, GeneratorExit) as exc:
        raise _exited(exc, "start(config)") from None
    except Exception as exc:  # noqa: BLE001 -- the port raised: that is its answer
        result.failures.append(Failure(vector["id"], 0, "start(config)",
                                       f"the adapter raised {type(exc).__name__}: {exc}", []))
        return
    tracker = SafetyTracker(config)
    outcomes: list[dict[str, Any]] = []
    coarse = vector.get("granularity") == "buffer"
    for k, expected in enumerate(vector["events"]):
        op, unit_id = expected["op"], expected.get("unit")
        if mode == "lenient" and not _applies(tracker, op, unit_id):
            result.skipped += 1
            continue
        result.steps += 1
        failure = None
        try:
            value = _call(adapter, op, unit_id, guard)
            record = outcome_record(op, unit_id, value, tracker.batches)
            outcomes.append(record)
            entry = parse_record(record, k + 2)
        except TraceFormatError as exc:
            failure = (f"the adapter's answer is not a valid record: {exc.reason} "
                       f"(field {exc.field})")
        except AdapterError:
            raise  # no answer at all: not a verdict on this vector
        except (SystemExit, GeneratorExit) as exc:  # the port tried to end: no verdict either
            raise _exited(exc, f"{op}()" if op not in UNIT_OPS else f"{op}({unit_id!r})") \
                from None
        except Exception as exc:  # noqa: BLE001 -- the port raised: that is its answer
            failure = f"the adapter raised {type(exc).__name__}: {exc}"
            if mode == "strict" and not expected.get("refused"):
                failure += f" (reference: {_describe(expected)})"
        if failure is None:
            problems = _judge(expected, entry, mode, tracker, k, coarse)
            if problems:
                failure = problems
        if failure is not None:
            result.failures.append(Failure(vector["id"], k, _request(op, unit_id), failure,
                                           outcomes))
            return


def _exited(exc: SystemExit | GeneratorExit, call: str) -> AdapterError:
    """An adapter that raises ``SystemExit`` would end the conformance run with the port's own
    exit status (0: a silent pass), one that raises ``GeneratorExit`` (a ``BaseException``,
    as ``SystemExit`` is) with a traceback: either is reported as an adapter that stopped
    answering. A ``KeyboardInterrupt`` goes through, to ``CallGuard.call``, which tells the
    user's Ctrl-C from one the adapter raised. An in-process adapter
    that calls ``os._exit`` cannot be caught by anything in the process: run such a port with
    ``--adapter-cmd``, whose exit is seen."""
    what = (f"SystemExit({exc.code!r})" if isinstance(exc, SystemExit) else
            f"GeneratorExit({str(exc)!r})")
    return AdapterError(f"the adapter raised {what} in {call}: an adapter "
                        f"must return or raise an exception, not exit")


def _describe(record: dict[str, Any]) -> str:
    return dumps(record)


def _judge(expected: dict[str, Any], entry: TraceEntry, mode: str, tracker: SafetyTracker,
           k: int, coarse: bool) -> str | None:
    violation: Violation | None = tracker.step(entry)
    diffs: list[Difference] = []
    if mode == "strict":
        want = parse_record(expected, k + 2)
        if want.refused != entry.refused:
            diffs = [Difference("decision", "refused" if want.refused else _describe(expected),
                                "refused" if entry.refused else "performed",
                                rule_for(entry.op, "decision"))]
        elif not want.refused:
            diffs = differences(want.event, entry, coarse)
    lines = [f"{d.field}: reference {d.expected}, port {d.actual} ({d.rule})" for d in diffs]
    if violation:
        lines.append(f"violates '{violation.invariant}': {violation.detail}")
    return "; ".join(lines) or None


def run(adapter: Any, vectors: Iterable[dict[str, Any]], mode: str = "strict",
        progress: Any = None, call_timeout_s: float | None = None,
        on_stuck: Any = None) -> Result:
    """Run every vector; ``progress(n_done)`` is called now and then for long runs. Every call
    into the adapter runs under a ``CallGuard``: with ``call_timeout_s``, one that does not
    return in time is ``AdapterError`` (``on_stuck``: see ``CallGuard``); a
    ``KeyboardInterrupt`` the adapter raises is ``AdapterError``, the user's goes through."""
    result = Result(mode)
    with CallGuard(call_timeout_s, on_stuck) as guard:
        try:
            for n, vector in enumerate(vectors, 1):
                result.vectors += 1
                try:
                    run_vector(adapter, vector, mode, result, guard)
                except AdapterError as exc:
                    raise AdapterError(f"vector {vector['id']}: {exc}") from None
                if progress is not None and n % 500 == 0:
                    progress(n)
        finally:
            try:  # looked up after start: some adapters delegate every lookup to their port
                close = getattr(adapter, "close", None)
            except Exception:  # noqa: BLE001 -- no port to delegate to (start failed)
                close = None
            if close is not None:
                guard.call("close()", close)
    return result
