"""The ``reserve-occupy`` command line (also ``python -m runtime``).

Each subcommand lives in its own module, imported only when that subcommand runs, so
``check-trace`` starts fast and works without torch or vLLM installed. A subcommand module
provides ``add_arguments(parser)`` and ``run(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# name -> (module, one-line help). The tools (simulator, porting kit, fault harness) live
# beside runtime/, in the reserve_occupy_* packages; they are named here, never imported.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("runtime.train", "run async GRPO with vLLM rollout (default: the embedded demo)"),
    "simulate": ("reserve_occupy_sim.cli",
                 "simulate the protocol against the baselines on a trace"),
    "check-trace": ("reserve_occupy_porting.check_trace",
                    "check another implementation's trace"),
    "conformance": ("reserve_occupy_porting.conformance",
                    "run or regenerate the conformance vectors"),
    "faults": ("reserve_occupy_faults.cli",
               "run seeded fault-injection schedules (crashes, restarts)"),
}

PROG = "reserve-occupy"


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<13} {help_text}" for name, (_, help_text) in SUBCOMMANDS.items())
    return argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} COMMAND [options]",
        description="Reserve–Occupy staleness control for asynchronous RL.",
        epilog=f"commands:\n{lines}\n\n'{PROG} COMMAND --help' shows a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


# Exit statuses every command shares (docs/cli.md, "Signals, pipes and exit status").
EXIT_SIGINT = 130  # 128 + SIGINT: Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM
EXIT_PIPE = 141  # 128 + SIGPIPE: the reader of the output went away (| head)
EXIT_IO = 74  # the output cannot be written (a full disk); never 1, which check-trace uses
EXIT_SOFTWARE = 70  # EX_SOFTWARE: an unexpected error (a bug), never reported as bad input


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so that every ``finally`` runs."""


def interrupted_status(exc: BaseException) -> int:
    return EXIT_SIGTERM if isinstance(exc, Terminated) or _terminated else EXIT_SIGINT


_signalled = False
_terminated = False  # the interrupt came from SIGTERM


def interrupted() -> bool:
    """A SIGINT or SIGTERM has been received by the command running now."""
    return _signalled


def _on_signal(signum: int, frame: object) -> None:
    """The first SIGINT or SIGTERM interrupts; any later one (``timeout`` and a terminal both
    signal the process group and the process; a user presses Ctrl-C again) is ignored, so it
    cannot interrupt the interrupt's handling: engines closing, files written, the exit."""
    global _signalled, _terminated
    if _signalled:
        return
    _signalled = True
    _terminated = signum == signal.SIGTERM
    raise Terminated() if _terminated else KeyboardInterrupt()


class _Loop:
    """What ``run_async``'s signal handler acts on."""

    task: Any = None  # asyncio.Task (asyncio is imported only by the commands that use it)
    loop: Any = None
    closing = False  # the task has ended; the loop is being closed


def _on_loop_signal(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM while ``run_async`` runs: the first cancels the main task (every
    ``finally`` runs, in order, awaits included); later ones are ignored. One that comes once
    the task has ended (the loop closing) is only noted: ``run_async`` raises it after."""
    global _signalled, _terminated
    if _signalled:
        return
    _signalled = True
    _terminated = signum == signal.SIGTERM
    if _Loop.closing:
        return
    if _Loop.task is None or _Loop.loop is None:  # not started yet
        raise Terminated() if _terminated else KeyboardInterrupt()
    try:
        _Loop.loop.call_soon_threadsafe(_Loop.task.cancel)
    except RuntimeError:  # the loop is closed: run_async raises the interrupt once it returns
        pass


async def off_loop(start: Callable[[], T], name: str = "start-up") -> T:
    """``await off_loop(build_engine)``: run the blocking ``start`` (an engine's start-up, which
    holds its thread for seconds to minutes) in a thread of its own, so that a Ctrl-C cancels
    the wait at once instead of when ``start`` returns: the child processes ``start`` began
    are then killed (a process still starting up has nothing to save) and the thread is left
    to end with them. (In the loop's own thread a Ctrl-C could not cut it short: vLLM's
    start-up waits in a ``zmq`` poll that swallows ``KeyboardInterrupt``.) Once ``start``
    returns, the run's watchdog (if any) records what it started before this returns
    (``Watchdog.rescan``): an engine forked without exec carries no marker."""
    import asyncio
    import threading

    from .watchdog import (Watchdog, children, descendants, new_children, process_table,
                           send_signal)

    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if done.done():
            return
        if ok:
            done.set_result(value)
        else:
            done.set_exception(value)

    def target() -> None:
        try:
            result: Any = (True, start())
        except BaseException as exc:  # noqa: BLE001 -- handed to the awaiting task
            result = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *result)
        except RuntimeError:  # the loop is closed: the run was interrupted and has ended
            pass

    before = children()
    threading.Thread(target=target, name=name, daemon=True).start()
    try:
        result = await done
    except asyncio.CancelledError:
        started = new_children(before)  # not the resource tracker: it cleans up after them
        send_signal(started | descendants(process_table(), [pid for pid, _ in started]),
                    signal.SIGKILL)
        raise
    if Watchdog.current is not None:  # what start forked (no exec: no marker) is recorded
        Watchdog.current.rescan()     # before the run goes on
    return result


class deferred_interrupts:
    """``with deferred_interrupts() as stop: for x in work: step(x); stop.check()``: the first
    SIGINT or SIGTERM is only noted, and ``check`` raises it between two steps (each short:
    a fault schedule takes milliseconds), never from inside one (an event loop half torn
    down prints "Event loop is closed" and can hang); later ones are ignored."""

    pending = False

    def __enter__(self) -> deferred_interrupts:
        self.previous = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._note)
        except ValueError:  # not the main thread: leave signals alone
            pass
        return self

    def _note(self, signum: int, frame: object) -> None:
        global _signalled, _terminated
        if _signalled:
            return
        _signalled = self.pending = True
        _terminated = signum == signal.SIGTERM

    def check(self) -> None:
        if self.pending:
            raise Terminated() if _terminated else KeyboardInterrupt()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        if exc[0] is None:
            self.check()


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` for a command: the first SIGINT (or SIGTERM) cancels ``main``, so
    its ``finally`` blocks close what it opened, then raises ``KeyboardInterrupt`` (or
    ``Terminated``) here; further signals are ignored while it unwinds (asyncio's own handler
    would raise ``KeyboardInterrupt`` on the second one, anywhere). Once a signal has come,
    the run ends as interrupted whatever else it raised while unwinding (a dead engine, a
    failure it reports), and a signal that comes after ``main`` ended, while the loop closes,
    is raised once it has closed: it is never lost."""
    import asyncio

    global _signalled, _terminated

    async def wrapper() -> T:
        _Loop.task, _Loop.loop = asyncio.current_task(), asyncio.get_running_loop()
        try:
            return await main
        finally:  # a signal from now on is noted, not sent to a task that has ended
            _Loop.closing = True
            _Loop.task = _Loop.loop = None

    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _on_loop_signal)
    except ValueError:  # not the main thread: leave signals alone
        pass
    if previous and previous.get(signal.SIGINT) is not _on_signal:  # not inside ``guarded``
        _signalled = _terminated = False

    def quiet_after_interrupt(loop: Any, context: dict[str, Any]) -> None:
        # after an interrupt, a task or future that failed unseen failed because of it (an
        # engine process the terminal's Ctrl-C ended first): not worth a traceback
        if not _signalled:
            loop.default_exception_handler(context)

    _Loop.closing = False
    try:
        with asyncio.Runner() as runner:  # its own SIGINT handler is not installed: ours is
            runner.get_loop().set_exception_handler(quiet_after_interrupt)
            result = runner.run(wrapper())
    except BaseException as exc:
        if not _signalled or isinstance(exc, KeyboardInterrupt):
            raise
        cause = None if isinstance(exc, asyncio.CancelledError) else exc
        raise (Terminated() if _terminated else KeyboardInterrupt()) from cause
    finally:
        _Loop.task = _Loop.loop = None
        _Loop.closing = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if _signalled:  # it came once main had ended: the command was interrupted all the same
        raise Terminated() if _terminated else KeyboardInterrupt()
    return result


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit does not report the
    closed pipe a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def standard_streams(prog: str) -> bool:
    """A command started with a standard stream closed (``<&-``, ``>&-``, ``2>&-``; Python
    then sets ``sys.stdin``/``stdout``/``stderr`` to None): the closed descriptor is taken by
    ``/dev/null`` at once, so that no file the command opens later gets descriptor 0, 1 or 2
    (a report printed into a checkpoint), and the stream is made usable again. A closed
    standard input reads as empty (as ``</dev/null``), a closed standard error drops the
    messages: the command carries on. A closed standard output would lose the command's
    report without a word: False (exit 2) after one line on standard error, before any work."""
    closed = []
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is not None:
            continue
        closed.append(name)
        try:
            os.fstat(fd)
            taken = True  # something the interpreter opened since holds it: leave it be
        except OSError:
            taken = False
        try:
            if not taken:
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
                stream = open(fd, mode, encoding="utf-8", closefd=False)  # noqa: SIM115
            else:
                stream = open(os.devnull, mode, encoding="utf-8")  # noqa: SIM115
        except OSError:
            continue
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    if "stdout" in closed:
        try:
            print(f"{prog}: the standard output is closed (>&-): the command's output would be "
                  f"lost; send it to a file or to /dev/null", file=sys.stderr)
        except (OSError, ValueError):
            pass
        return False
    return True


def guarded(body: Callable[[], int | None], prog: str, exiting: bool = False) -> int:
    """Run a command's ``body`` the way every console entry point of this project runs:
    SIGINT exits 130 and SIGTERM 143 with one line, a closed output pipe ends quietly with
    141, an output that cannot be written (a full disk) exits 74 with one line -- never a
    traceback. Whatever the command writes must be written atomically (``runtime.atomic_io``),
    so an interrupted command leaves each output complete or absent. ``exiting``: the process
    exits with the returned status (a console entry point); after an interrupt, further
    SIGINTs and SIGTERMs are then ignored to the end, so they cannot cut the exit short."""
    global _signalled, _terminated
    if exiting and not standard_streams(prog):
        return 2
    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _on_signal)
        _signalled = _terminated = False
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        code = int(body() or 0)
        sys.stdout.flush()  # a closed pipe or a full disk shows here, not at exit
        return code
    except KeyboardInterrupt as exc:
        import warnings

        # work cut off mid-way (coroutines never awaited, ...) is what an interrupt means
        warnings.simplefilter("ignore")
        what = "terminated" if interrupted_status(exc) == EXIT_SIGTERM else "interrupted"
        print(f"{prog}: {what}", file=sys.stderr)
        return interrupted_status(exc)
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except OSError as exc:
        from .atomic_io import NotReplaceable

        replaceable = not isinstance(exc, NotReplaceable)
        if replaceable and exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
            return internal_error(prog, exc)
        _quiet_stdout()
        why = exc.strerror or exc if replaceable else f"{exc.filename}: {exc.strerror}"
        try:
            print(f"{prog}: cannot write the output: {why}", file=sys.stderr)
        except OSError:
            pass
        return EXIT_IO
    except Exception as exc:  # not bad input (each command reports that itself): a bug
        return internal_error(prog, exc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if exiting and _signalled else handler)


def internal_error(prog: str, exc: BaseException) -> int:
    """An exception no command expected: exit 70 with one line naming its type, where it was
    raised and the file that holds the whole traceback (printed instead when that file cannot
    be written). Never exit 2, which means the user's input was bad."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(exc))
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        parts = frames[-1].filename.replace(os.sep, "/").split("/")
        where = f" at {'/'.join(parts[-2:])}:{frames[-1].lineno}"
    detail = " ".join(str(exc).split())[:300]
    what = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    path = os.path.join(tempfile.gettempdir(), f"reserve-occupy-traceback-{os.getpid()}.txt")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"{prog}: {' '.join(sys.argv)}\n{text}")
        told = f"the traceback is in {path}"
    except OSError:
        print(text, file=sys.stderr, end="")
        told = "the traceback is above"
    try:
        print(f"{prog}: internal error (not bad input): {what}{where}; {told}; please report "
              f"it", file=sys.stderr)
    except OSError:
        pass
    return EXIT_SOFTWARE


def script(main_fn: Callable[[], int | None], prog: str) -> None:
    """``if __name__ == "__main__": script(main, PROG)``: ``guarded`` and exit."""
    raise SystemExit(guarded(main_fn, prog, exiting=True))


def main(argv: list[str] | None = None) -> int:
    # The console script, like ``python -m runtime``, imports user modules (--adapter,
    # reward.name) from the working directory.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    return guarded(lambda: _dispatch(argv), PROG, exiting=argv is None)  # None: the console


def _dispatch(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        top.print_usage(sys.stderr)
        print(f"{PROG}: unknown command {name!r} (choose from {', '.join(SUBCOMMANDS)})",
              file=sys.stderr)
        return 2
    module_name, help_text = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        return missing_extra(f"{PROG} {name}", exc)
    parser = argparse.ArgumentParser(prog=f"{PROG} {name}", description=help_text)
    module.add_arguments(parser)
    try:
        return int(module.run(parser.parse_args(rest)) or 0)
    except ModuleNotFoundError as exc:  # a module only this run's options import
        return missing_extra(f"{PROG} {name}", exc)


# top-level module -> the extras that install it (pyproject.toml), the first the one named when
# the command's own extra is not among them
EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("runtime",), "vllm": ("runtime",), "transformers": ("runtime",),
    "tokenizers": ("runtime",), "safetensors": ("runtime",), "yaml": ("runtime",),
    "pydantic": ("runtime",), "pyarrow": ("runtime",), "numpy": ("sim", "runtime"),
    "matplotlib": ("sim", "runtime"), "tqdm": ("sim", "runtime"), "ray": ("ray",),
    "tensorboard": ("tensorboard",), "z3": ("proofs",), "hypothesis": ("proofs",),
    "trl": ("trl",), "areal": ("areal",), "verl": ("verl",)}
# the extra each command needs beyond the core (a module several extras install is named by
# the command's: ``train`` lacking numpy needs ``runtime``, not ``sim``, which lacks torch)
COMMAND_EXTRAS = {"train": "runtime", "simulate": "sim"}


def missing_extra(prog: str, exc: ModuleNotFoundError) -> int:
    """One line naming the extra that installs the missing module; exit status 2."""
    top = (exc.name or "").split(".")[0]
    extras = EXTRAS.get(top)
    if extras is None and (top == "runtime" or top.startswith("reserve_occupy")):
        raise exc  # this project's own module is missing: a broken install, not an extra
    command = COMMAND_EXTRAS.get(prog.split()[-1])
    extra = None if extras is None else command if command in extras else extras[0]
    how = f"pip install 'reserve-occupy[{extra}]'" if extra else \
        "pip install 'reserve-occupy[all]'"
    print(f"{prog}: needs the module {top!r}, which this install lacks; install it with "
          f"{how}", file=sys.stderr)
    return 2
