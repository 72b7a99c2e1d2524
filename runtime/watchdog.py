"""Whatever a run starts dies with it, ``kill -9`` of the run included.

A run process cannot clean up after a SIGKILL (nothing in it runs), and what it started -- vLLM's
``VLLM::EngineCore``, a local Ray cluster's ``gcs_server``, ``raylet``, dashboard and runtime-env
agents, workers -- is reparented to init and runs on for good. So ``train`` starts this small
watchdog first (``Watchdog.start``), in a session of its own (a Ctrl-C to the terminal's process
group does not reach it), holding no file of the run (not its directory's lock). ``start``
returns once the watchdog has said ``ready``: it holds the run's pidfd and has scanned once, so
a run that dies the moment ``start`` returns is cleaned up all the same. The watchdog

* holds a pidfd on the run process (``os.pidfd_open``; the run's start time, given on its
  command line, is checked after the open: never a later process that reuses the pid), and
  every ``SCAN_S`` seconds records the run's descendants by pid *and start time*
  (``/proc/PID/stat``), so a pid reused after one of them ended is never taken for it;
* on ``rescan`` (the run asks once an engine's start-up returned: ``Watchdog.rescan``, called
  by ``cli.off_loop``) records them at once and answers, so a process forked without exec
  (vLLM's EngineCore on CPU), which carries no marker, is recorded before the run goes on;
* marks the run: ``RESERVE_OCCUPY_RUN=TOKEN`` is set in the run's environment before anything
  is started, so every program the run (or anything it started) executes carries it, also one
  that left the process tree (a daemon) or started between two scans. A process forked
  without exec does not (``/proc/PID/environ`` is the environment at exec): it is found only
  through the recorded descendants;
* when the run process dies without having said ``stop`` (SIGKILL, the OOM killer, a crash in
  native code), sends SIGTERM to every recorded descendant still alive, every process carrying
  the marker, and their descendants; SIGKILL to what is left after ``GRACE_S`` seconds; then it
  looks again (a dying raylet may have started a worker), at most ``ROUNDS`` times, and exits;
* on ``stop`` (the run ends by itself: done, failed, Ctrl-C) exits at once: the run has closed
  its engines, and ``reap_children`` ends any child of it still running.

Linux only (``/proc``); elsewhere ``Watchdog.start`` returns None and nothing is watched.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

MARKER = "RESERVE_OCCUPY_RUN"
SCAN_S = 0.5  # how often the run's descendants are recorded
GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
ROUNDS = 3  # look again this many times after killing (a dying process may start another)

Identity = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time, state) of a live process, else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # after "pid (comm) "
    try:
        return int(fields[1]), int(fields[19]), fields[0].decode()
    except (IndexError, ValueError):
        return None


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every live (not zombie) process."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[2] not in ("Z", "X"):
                table[int(name)] = (st[0], st[1])
    return table


def descendants(table: dict[int, tuple[int, int]], roots: Iterable[int],
                exclude: Iterable[Identity] = ()) -> set[Identity]:
    """The descendants of ``roots`` in ``table``, not those in ``exclude`` nor theirs."""
    skip = set(exclude)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[Identity] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if (child, table[child][1]) not in found | skip:
                found.add((child, table[child][1]))
                todo.append(child)
    return found


def scan(recorded: set[Identity], table: dict[int, tuple[int, int]], run_pid: int,
         me: int, exclude: Iterable[Identity] = ()) -> set[Identity]:
    """One look: the run's descendants now (not ``me``, the watchdog, nor the children in
    ``exclude``, which the run had before it started the watchdog, nor theirs) and, of those
    recorded before, the ones still alive with the same start time (a process that ended is
    dropped, so the set stays as large as what is alive, however many short-lived processes
    come)."""
    kept = {i for i in recorded if i[0] in table and table[i[0]][1] == i[1]}
    return kept | {i for i in descendants(table, [run_pid], exclude) if i[0] != me}


def _marked(table: dict[int, tuple[int, int]], token: str) -> set[Identity]:
    """The processes whose environment carries ``MARKER=token``."""
    needle = f"{MARKER}={token}".encode()
    found = set()
    for pid, (_, start) in table.items():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or another user's
            continue
        if needle in env.split(b"\0"):
            found.add((pid, start))
    return found


def _alive(ident: Identity) -> bool:
    st = _stat(ident[0])
    return st is not None and st[1] == ident[1] and st[2] not in ("Z", "X")


def send_signal(idents: Iterable[Identity], sig: int) -> None:
    for ident in idents:
        if _alive(ident):  # never a newer process that reuses the pid
            try:
                os.kill(ident[0], sig)
            except OSError:
                pass


def terminate(idents: set[Identity], grace_s: float = GRACE_S) -> set[Identity]:
    """SIGTERM ``idents``, SIGKILL those still alive after ``grace_s``; returns the ones that
    had to be killed."""
    send_signal(idents, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = {i for i in idents if _alive(i)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {i for i in left if _alive(i)}
    send_signal(left, signal.SIGKILL)
    return left


def reap(recorded: set[Identity], token: str | None, me: int,
         exclude: Iterable[Identity] = ()) -> int:
    """End what a dead run started: the recorded descendants still alive, the processes with
    its marker, and their descendants. Returns how many processes were signalled."""
    seen: set[Identity] = set()
    for _ in range(ROUNDS):
        table = process_table()
        targets = {i for i in recorded if _alive(i)}
        if token is not None:
            targets |= _marked(table, token)
        targets |= descendants(table, [pid for pid, _ in targets], exclude)
        targets = {i for i in targets if i[0] != me} - seen - set(exclude)
        if not targets:
            break
        seen |= targets
        terminate(targets)
    return len(seen)


def new_children(before: set[Identity], spare: Iterable[int] = ()) -> set[Identity]:
    """This process's children that were not there in ``before`` (``children()`` taken when
    the run began: a process it did not start is never touched), are not in ``spare`` (pids)
    and are not multiprocessing's resource tracker or fork server (``_mp_helper``)."""
    me, keep = os.getpid(), set(spare)
    return {(pid, start) for pid, (ppid, start) in process_table().items()
            if ppid == me and (pid, start) not in before and pid not in keep
            and not _mp_helper(pid)}


def reap_children(before: set[Identity], spare: Iterable[int] = ()) -> int:
    """In the run's own process, as it ends: SIGTERM (then SIGKILL) its ``new_children``
    (and theirs), so nothing it started is left running once it has exited. Returns how many
    there were."""
    mine = new_children(before, spare)
    found = mine | descendants(process_table(), [pid for pid, _ in mine])
    if found:
        terminate(found)
    return len(found)


def _mp_helper(pid: int) -> bool:
    """multiprocessing's resource tracker (or fork server): it ignores SIGTERM and ends by
    itself once this process has exited, after cleaning up what its children left."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    # only these two: a child started with spawn (``from multiprocessing.spawn import
    # spawn_main``: vLLM's EngineCore under CUDA or Ray) is the run's, and is ended
    return any(helper in cmdline for helper in (
        b"from multiprocessing.resource_tracker import main",
        b"from multiprocessing.forkserver import main"))


def children() -> set[Identity]:
    """This process's children now (``reap_children`` spares them)."""
    table = process_table()
    me = os.getpid()
    return {(pid, start) for pid, (ppid, start) in table.items() if ppid == me}


READY_S = 60.0  # how long ``Watchdog.start`` waits for the watchdog's first scan


class WatchdogError(RuntimeError):
    """The watchdog did not start (no ``ready`` from it within ``READY_S``)."""


def _read_line(fd: int, timeout_s: float) -> bytes | None:
    """One line from the pipe ``fd`` (read a byte at a time: nothing after it is consumed);
    None at its end or after ``timeout_s``."""
    line = b""
    deadline = time.monotonic() + timeout_s
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        byte = os.read(fd, 1)
        if not byte:
            return None
        line += byte
    return line


class Watchdog:
    """The run side: start it before the run starts anything, ``stop`` it when the run ends."""

    current: Watchdog | None = None  # the one this process started (``rescan`` asks it)

    def __init__(self, proc: subprocess.Popen, token: str, previous: str | None) -> None:
        self.proc, self.token, self._previous = proc, token, previous

    @classmethod
    def start(cls, before: Iterable[Identity] = ()) -> Watchdog | None:
        """Start the watchdog and return once it watches: it has opened its pidfd on this
        process (checked by start time: not a later process with this pid) and recorded its
        descendants once, so a run that dies the moment this returns is still cleaned up.
        ``before``: this process's children (``children()``) it did not start for the run,
        which the watchdog never touches (nor their descendants).
        ``WatchdogError`` if it does not say so within ``READY_S`` seconds."""
        if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self"):
            return None
        me = _stat(os.getpid())
        assert me is not None
        token = f"{os.getpid()}-{secrets.token_hex(8)}"
        previous = os.environ.get(MARKER)
        os.environ[MARKER] = token  # before any engine, cluster or worker is started
        proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.watchdog", str(os.getpid()), str(me[1]), token,
             ",".join(f"{pid}:{start}" for pid, start in sorted(before))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            start_new_session=True, env={**os.environ, MARKER: ""},
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        dog = cls(proc, token, previous)
        assert proc.stdout is not None
        if _read_line(proc.stdout.fileno(), READY_S) != b"ready\n":
            dog.stop()
            raise WatchdogError(f"the run's watchdog (pid {proc.pid}) did not start within "
                                f"{READY_S:g} s")
        Watchdog.current = dog
        return dog

    def rescan(self) -> None:
        """Have the watchdog record the run's descendants now, and return once it has: a
        process forked without exec (vLLM's EngineCore on CPU) carries no marker, and is
        recorded from then on even if it leaves the process tree. ``WatchdogError`` if the
        watchdog does not answer within ``READY_S`` seconds."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(b"rescan\n")
            self.proc.stdin.flush()
        except OSError:
            raise WatchdogError(f"the run's watchdog (pid {self.proc.pid}) is gone") from None
        if _read_line(self.proc.stdout.fileno(), READY_S) != b"scanned\n":
            raise WatchdogError(f"the run's watchdog (pid {self.proc.pid}) did not answer "
                                f"within {READY_S:g} s")

    def stop(self) -> None:
        """The run ends by itself: the watchdog exits without touching anything."""
        if Watchdog.current is self:
            Watchdog.current = None
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.close()
        except OSError:  # it is gone already
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._previous is None:
            os.environ.pop(MARKER, None)
        else:
            os.environ[MARKER] = self._previous


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel: poll the pid and its start time
        return None


def watch(run_pid: int, run_start: int, token: str, exclude: Iterable[Identity] = ()) -> int:
    """The watchdog process (``python -m runtime.watchdog RUN_PID RUN_START TOKEN
    [PID:START,...]``, the run's children it never touches): writes ``ready`` on its stdout
    once it holds the run's pidfd and has scanned once; exit 1 if the run (that pid with that
    start time) is not there."""
    exclude = set(exclude)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the run's death or "stop" end it
    me = os.getpid()
    run = (run_pid, run_start)
    pidfd = _open_pidfd(run_pid)
    if not _alive(run):  # gone, or the pid is another process's now (checked after the open)
        return 1
    recorded: set[Identity] = set()
    stdin: int | None = sys.stdin.fileno()
    pending = b""
    ready = False
    while True:
        recorded = scan(recorded, process_table(), run_pid, me, exclude)
        if not ready:
            ready = True
            try:
                os.write(sys.stdout.fileno(), b"ready\n")
            except OSError:  # the run is gone: its pidfd says so below
                pass
        waiting = [fd for fd in (pidfd, stdin) if fd is not None]
        readable: list[int] = []
        if waiting:
            readable = select.select(waiting, [], [], SCAN_S)[0]
        else:
            time.sleep(SCAN_S)
        if stdin is not None and stdin in readable:
            data = os.read(stdin, 64)
            if not data:  # the run closed its end (or died): its pidfd or pid says which
                stdin = None
            pending += data
            lines = pending.split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line == b"stop":
                    return 0
                if line == b"rescan":  # answered once recorded: the run goes on after it
                    recorded = scan(recorded, process_table(), run_pid, me, exclude)
                    try:
                        os.write(sys.stdout.fileno(), b"scanned\n")
                    except OSError:
                        pass
        if (pidfd is not None and pidfd in readable) or not _alive(run):
            break
    n = reap(recorded, token, me, exclude)
    if n:
        try:
            print(f"reserve-occupy: the run (pid {run_pid}) died; ended {n} process(es) it had "
                  f"started", file=sys.stderr, flush=True)
        except OSError:
            pass
    return 0


def _identities(text: str) -> list[Identity]:
    """``PID:START,...`` (``Watchdog.start``'s ``before``) as identities."""
    return [(int(pid), int(start)) for pid, start in
            (item.split(":") for item in text.split(",") if item)]


if __name__ == "__main__":
    raise SystemExit(watch(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                           _identities(sys.argv[4] if len(sys.argv) > 4 else "")))
