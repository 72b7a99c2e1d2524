"""An in-process adapter (``conformance --adapter``) is untrusted code, and an external port
(``--adapter-cmd``) untrusted processes: a call that hangs is interrupted after
``--adapter-timeout`` (one line, exit 2), one that ignores the interruption ends the command
(one line, exit 2), a ``KeyboardInterrupt`` the adapter raises is its error (exit 2), not the
user's Ctrl-C (130, which still is), an import that hangs or fails is one line, and whatever a
port leaves running -- a daemon in a session of its own included -- ends with a normal run.

The hanging cases run the command in a subprocess: on the old code it hangs, and the
subprocess's limit (far above the adapter timeout) turns that into a failure, not a hung
suite."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from runtime.cli import main

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 300  # a safety net for the old code, which hangs: never reached by the new
ME = "tests.porting.untrusted_ports"
TIMEOUT = "5"  # --adapter-timeout of the hang cases: far above a tiny module's import


def _conformance(*argv: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runtime", "conformance", "--family", "scenarios", *argv],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the command hung on the adapter")
    return proc.returncode, out, err


def _one_line_exit_2(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2, (code, out[-2000:], err[-2000:])
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def test_a_hung_adapter_call_is_interrupted_after_the_timeout():
    code, out, err = _finish(_conformance("--adapter", f"{ME}:HangsInPublish",
                                          "--adapter-timeout", TIMEOUT))
    _one_line_exit_2(code, out, err, "did not return from publish() within 5 s",
                     "--adapter-timeout")


def test_a_hung_adapter_that_swallows_the_interruption_ends_the_command():
    code, out, err = _finish(_conformance("--adapter", f"{ME}:SwallowsTheInterruption",
                                          "--adapter-timeout", TIMEOUT))
    _one_line_exit_2(code, out, err, "did not return from publish() within 5 s",
                     "ending the command")


def test_a_hung_adapter_constructor_or_import_is_interrupted(tmp_path):
    code, out, err = _finish(_conformance("--adapter", f"{ME}:HangsInTheConstructor",
                                          "--adapter-timeout", TIMEOUT))
    _one_line_exit_2(code, out, err, "HangsInTheConstructor()", "within 5 s")
    (tmp_path / "slow_port.py").write_text("import time\ntime.sleep(3600)\n")
    code, out, err = _finish(_conformance(
        "--adapter", "slow_port:Adapter", "--adapter-timeout", TIMEOUT,
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}))
    _one_line_exit_2(code, out, err, "import slow_port", "within 5 s")


def test_an_adapter_module_that_fails_to_import_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken_port.py").write_text("def f(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # before: exit 70, "internal error ... SyntaxError"
    assert main(["conformance", "--adapter", "broken_port:Adapter"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SyntaxError" in err and "broken_port" in err, err


def test_a_keyboard_interrupt_the_adapter_raises_is_its_error_the_users_ctrl_c_130(
        tmp_path, capsys):
    # before: "reserve-occupy: interrupted", exit 130, as if the user had pressed Ctrl-C
    rc = main(["conformance", "--family", "scenarios", "--adapter", f"{ME}:InterruptsInPublish"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, (rc, err)
    assert len(err.splitlines()) == 1 and "raised KeyboardInterrupt in publish()" in err, err
    # and the user's Ctrl-C (a real SIGINT) during an adapter's call is still 130
    waiting = tmp_path / "waiting"
    proc = _conformance("--adapter", f"{ME}:WaitsInPublish", "--adapter-timeout", "3600",
                        env={"WAITING_FILE": str(waiting)}, start_new_session=True)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not waiting.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        code, _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130 and "interrupted" in err, (code, err)


# A port that starts a daemon (fork, setsid, fork: a session of its own, reparented to init,
# its standard streams on /dev/null) and a plain background child, writes their pids, then
# answers every request wrongly, so the run ends normally (exit 1: vectors fail).
PORT = """
import os, sys, time
pids = sys.argv[1]

def detach():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        detach()
        with open(pids + ".daemon", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
os.waitpid(child, 0)
if os.fork() == 0:
    detach()
    with open(pids + ".child", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
    os._exit(0)
while not (os.path.exists(pids + ".daemon") and os.path.exists(pids + ".child")):
    time.sleep(0.01)
for line in sys.stdin:
    print('{"refused": true}', flush=True)
"""


def test_a_port_that_daemonizes_does_not_outlive_a_normal_run(tmp_path):
    port, pids = tmp_path / "port.py", tmp_path / "pid"
    port.write_text(PORT)
    command = " ".join(shlex.quote(x) for x in (sys.executable, str(port), str(pids)))
    code, out, err = _finish(_conformance("--adapter-cmd", command, "--stride", "50"))
    assert code == 1 and "vectors pass" in out, (code, out[-2000:], err[-2000:])
    left = []
    for kind in ("daemon", "child"):
        pid = int(Path(f"{pids}.{kind}").read_text())
        try:
            left.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    try:
        _, alive = psutil.wait_procs(left, timeout=60)
        # before: both still running (the daemon reparented to init) after exit 1
        assert not alive, f"still running after the run ended: {alive}"
    finally:
        for p in left:
            if p.is_running():
                p.kill()
