"""The run's watchdog (runtime/watchdog.py; docs/cli.md, "Orphans") without vLLM: a stand-in
run starts it, then a child, a grandchild, and a daemon that left the process tree (its
environment carries the run's marker). After ``kill -9`` of the run all of them end; a run
that stops its watchdog leaves its processes alone. The real engine: kill -9 in
tests/resilience/test_kill_resume.py (vLLM), Ctrl-C in test_orphans.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from runtime.watchdog import MARKER

ROOT = Path(__file__).resolve().parents[2]
RUN = """
import os, subprocess, sys, time
from runtime.watchdog import Watchdog, children

sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
earlier = subprocess.Popen(sleep)  # the process's own, from before the run: never touched
dog = Watchdog.start(children())
child = subprocess.Popen([sys.executable, "-c",  # a child with a child of its own
                          "import subprocess, sys, time; "
                          "p = subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True); "
                          "time.sleep(600)", *sleep], stdout=subprocess.PIPE, text=True)
grandchild = int(child.stdout.readline())
daemon = subprocess.Popen([sys.executable, "-c",  # double fork: reparented to init at once
                           "import os, subprocess, sys; "
                           "p = subprocess.Popen(sys.argv[1:], start_new_session=True); "
                           "print(p.pid, flush=True); os._exit(0)", *sleep],
                          stdout=subprocess.PIPE, text=True)
orphan = int(daemon.stdout.readline())
daemon.wait()
# forked without exec (no marker, as vLLM's EngineCore on CPU): a child that forks a process,
# then exits once the watchdog has recorded both, so the process leaves the tree unmarked
go_r, go_w = os.pipe()
pid_r, pid_w = os.pipe()
middle = os.fork()
if middle == 0:
    inner = os.fork()
    if inner == 0:
        time.sleep(600)
        os._exit(0)
    os.write(pid_w, f"{inner}\\n".encode())
    os.read(go_r, 1)
    os._exit(0)
forked = int(os.fdopen(pid_r).readline())
dog.rescan()  # returns once the watchdog has recorded them
os.write(go_w, b"x")
os.waitpid(middle, 0)  # forked is out of the run's tree now
print(dog.proc.pid, child.pid, grandchild, orphan, earlier.pid, forked, flush=True)
if sys.argv[1] == "stop":
    t0 = time.monotonic()
    dog.stop()
    print("stopped", dog.proc.returncode, time.monotonic() - t0, flush=True)
time.sleep(600)
"""


@pytest.fixture
def start():
    started: list[psutil.Process] = []

    def run(mode: str) -> tuple[subprocess.Popen, list[int]]:
        proc = subprocess.Popen([sys.executable, "-c", RUN, mode], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        started.append(psutil.Process(proc.pid))
        assert proc.stdout is not None
        pids = [int(x) for x in proc.stdout.readline().split()]
        started.extend(psutil.Process(pid) for pid in pids[1:])  # not the watchdog: it may
        return proc, pids                                        # have ended already

    yield run
    for p in started:  # a failed test leaves nothing running either
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def test_kill_9_of_the_run_ends_what_it_started_in_and_out_of_its_tree(start):
    proc, pids = start("watch")
    dog, child, grandchild, orphan, earlier, forked = (psutil.Process(pid) for pid in pids)
    tree = psutil.Process(proc.pid).children(True)
    assert orphan.ppid() != proc.pid and orphan not in tree and forked not in tree
    assert f"{MARKER}=".encode() not in Path(f"/proc/{forked.pid}/environ").read_bytes()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # forked carries no marker and left the tree: only its record (the rescan) finds it
    _, alive = psutil.wait_procs([dog, child, grandchild, orphan, forked], timeout=120)
    assert not alive, alive
    # Before: every descendant was recorded, also a child the process had before the run
    # (a notebook's, pytest's); the watchdog has exited, so it is left alone for good.
    assert earlier.is_running() and earlier.status() != psutil.STATUS_ZOMBIE


def test_a_stopped_watchdog_touches_nothing(start):
    proc, pids = start("stop")
    assert proc.stdout is not None
    said, code, took = proc.stdout.readline().split()
    # stop() kills a watchdog that has not exited after 30 s: one that ignored "stop" shows
    # as a return code other than 0, or as a stop that took that long
    assert said == "stopped" and code == "0" and float(took) < 20, (said, code, took)
    assert not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).ppid() != proc.pid
    grandchild, orphan = psutil.Process(pids[2]), psutil.Process(pids[3])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
               for p in (grandchild, orphan))


def test_only_the_resource_tracker_is_a_multiprocessing_helper_not_a_spawned_child():
    # Before: any "from multiprocessing." command line was a helper, so a child started with
    # spawn (vLLM's EngineCore under CUDA or Ray) was never reaped on a normal exit.
    import multiprocessing
    import time
    from multiprocessing import resource_tracker

    from runtime.watchdog import _mp_helper

    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(600,))
    child.start()
    try:
        deadline = time.monotonic() + 60
        while b"multiprocessing.spawn" not in Path(f"/proc/{child.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline  # forked, not yet exec'd
            time.sleep(0.01)
        assert not _mp_helper(child.pid)
        resource_tracker.ensure_running()
        assert _mp_helper(resource_tracker._resource_tracker._pid)
    finally:
        child.kill()
        child.join()


DIES_AT_ONCE = """
import os, signal, subprocess, sys
from runtime.watchdog import Watchdog

dog = Watchdog.start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(dog.proc.pid, child.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the moment the watchdog is started
"""


def test_a_run_killed_as_soon_as_its_watchdog_started_is_still_cleaned_up():
    # Before: Watchdog.start returned before the watchdog had even started Python; a run that
    # died first left the watchdog nothing to watch (it exited at once) and its child ran on.
    # Now start returns once the watchdog holds the run's pidfd and has scanned once.
    proc = subprocess.Popen([sys.executable, "-c", DIES_AT_ONCE], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    dog, child = (psutil.Process(int(pid)) for pid in proc.stdout.readline().split())
    try:
        assert proc.wait(timeout=120) == -signal.SIGKILL
        _, alive = psutil.wait_procs([dog, child], timeout=120)
        assert not alive, alive
    finally:
        for p in (dog, child):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def test_the_watchdog_refuses_a_pid_with_another_start_time(monkeypatch):
    # A pid reused by another process is not the run: the watchdog exits 1 without "ready",
    # and Watchdog.start says so (at once: the pipe ends, no timeout is waited for).
    from runtime import watchdog

    real = watchdog._stat
    monkeypatch.setattr(watchdog, "_stat", lambda pid: (lambda st: st and (
        st[0], st[1] + 1, st[2]))(real(pid)) if pid == os.getpid() else real(pid))
    previous = os.environ.get(watchdog.MARKER)
    with pytest.raises(watchdog.WatchdogError, match="did not start"):
        watchdog.Watchdog.start()
    assert os.environ.get(watchdog.MARKER) == previous


def test_a_scan_keeps_only_recorded_processes_still_alive_with_their_start_time():
    # Before: what was recorded was never dropped; a reward forking per completion grew the
    # set on every scan for the whole run.
    from runtime.watchdog import scan

    table = {100: (1, 5000), 200: (100, 5001), 300: (1, 7000), 400: (1, 8000)}
    recorded = {(200, 5001), (300, 6999), (400, 8000), (500, 9000)}  # 300: a reused pid
    assert scan(recorded, table, 100, me=999) == {(200, 5001), (400, 8000)}
    assert scan(set(), table, 100, me=200) == set()  # the watchdog is never its own target


def test_new_children_are_the_runs_and_not_the_resource_tracker():
    # Before: off_loop SIGKILLed every child started since it began, multiprocessing's
    # resource tracker included (its cleanup of semaphores and shared memory was then lost).
    from multiprocessing import resource_tracker

    from runtime.watchdog import children, new_children

    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    resource_tracker.ensure_running()  # as if started after ``before`` (an engine's start-up)
    tracker = resource_tracker._resource_tracker._pid
    earlier = subprocess.Popen(sleep)
    try:
        before = {i for i in children() if i[0] != tracker}
        later = subprocess.Popen(sleep)
        try:
            found = {pid for pid, _ in new_children(before)}
            assert later.pid in found and earlier.pid not in found and tracker not in found
            assert later.pid not in {pid for pid, _ in new_children(before, spare=[later.pid])}
        finally:
            later.kill()
            later.wait()
    finally:
        earlier.kill()
        earlier.wait()

