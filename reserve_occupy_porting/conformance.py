"""``reserve-occupy conformance``: run the conformance vectors against a port, or maintain them.

    reserve-occupy conformance                          # the reference core (self-test)
    reserve-occupy conformance --adapter mypkg.port:Adapter [--lenient]
    reserve-occupy conformance --adapter-cmd "./my-port --conformance"
    reserve-occupy conformance --export basic/00017 > t.jsonl   # one vector as a trace
    python -m reserve_occupy_porting.conformance --check        # is the corpus up to date?
    python -m reserve_occupy_porting.conformance --regenerate  # rewrite it (`make conformance`)

Exit codes: 0 all vectors pass / corpus up to date; 1 a vector failed / the corpus was stale
(``--regenerate`` rewrote it: review and commit); 2 bad arguments, an unreadable corpus, or an
adapter that cannot be loaded or started, or stops answering (checked before the first vector
where possible; docs/cli.md lists every check).
"""

from __future__ import annotations

import argparse
import importlib
import json
import lzma
import os
import sys
import time
from pathlib import Path
from typing import Any

from reserve_occupy.trace import dumps, header, loads_bounded, parse_config

from runtime import atomic_io, inputs
from runtime.inputs import InputError

from . import vectors as vec
from .vector_runner import (
    STUCK_GRACE_S,
    Adapter,
    AdapterError,
    CallGuard,
    Failure,
    ReferenceAdapter,
    SubprocessAdapter,
)
from .vector_runner import run as run_vectors

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


UsageError = InputError  # bad arguments: reported in one line, exit code 2
MAX_STRIDE = 1_000_000
MAX_ADAPTER_TIMEOUT_S = 3600.0
# ``stream`` is optional: only a port with streaming consume implements it, and only the
# ``streaming`` family asks for it.
OPTIONAL_METHODS = ("stream",)
ADAPTER_METHODS = tuple(name for name in Adapter.__dict__
                        if not name.startswith("_") and name not in OPTIONAL_METHODS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Run the conformance vectors (reserve_occupy_porting/corpus) against "
                          "a port through an adapter, or check / regenerate the committed corpus.")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--adapter", metavar="MODULE:CLASS",
                     help="a Python adapter class (see "
                          "reserve_occupy_porting.vector_runner.Adapter); "
                          "default: the reference core")
    who.add_argument("--adapter-cmd", metavar="COMMAND",
                     help="a port in any language, spoken to in JSON Lines on stdin/stdout")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true",
                      help="regenerate in memory and fail if the committed corpus differs")
    what.add_argument("--regenerate", action="store_true",
                      help="rewrite the corpus; exit 1 if it was stale")
    what.add_argument("--export", metavar="ID", help="print one vector as a trace file")
    what.add_argument("--list", action="store_true", help="list the families and their sizes")
    parser.add_argument("--lenient", action="store_true",
                        help="judge only the safety invariants (for ports that place "
                             "differently but legally)")
    parser.add_argument("--family", action="append", metavar="NAME",
                        help=f"only these families (repeatable): {', '.join(vec.family_names())}")
    parser.add_argument("--stride", type=int, default=1, metavar="K",
                        help="run every K-th vector only (quick runs)")
    parser.add_argument("--save-failures", metavar="DIR", type=inputs.path_arg,
                        help="write each failing vector's port outcomes as a trace "
                             "(check it with check-trace for the buffer tables)")
    parser.add_argument("--dir", type=inputs.path_arg, default=vec.CORPUS_DIR,
                        help="the corpus directory (default: the one installed with the package, "
                             "reserve_occupy_porting/corpus)")
    parser.add_argument("--adapter-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="give up (exit 2) when the port does not answer a request within "
                             "this long: an --adapter-cmd port's answer, or an --adapter's "
                             "import, constructor or method call (60)")


# The options each mode reads (by argparse dest; the mode: --check, --regenerate, --list,
# --export, else a run of the vectors against a port). An option its mode does not read is
# refused (``_check_used``; before: ``--list --adapter X`` or ``--check --stride 5`` were
# accepted and ignored).
MODE_OPTIONS: dict[str, frozenset[str]] = {
    "run": frozenset({"adapter", "adapter_cmd", "lenient", "family", "stride", "save_failures",
                      "dir", "adapter_timeout"}),
    "check": frozenset({"family", "dir"}),
    "regenerate": frozenset({"family", "dir"}),
    "list": frozenset(),
    "export": frozenset({"dir"}),
}
_MODE_FLAGS = ("check", "regenerate", "list", "export")


def _check_used(args: argparse.Namespace) -> None:
    mode = next((m for m in _MODE_FLAGS if getattr(args, m, None)), "run")
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    for action in parser._actions:
        dest = action.dest
        if dest in _MODE_FLAGS or dest in MODE_OPTIONS[mode] or not hasattr(args, dest):
            continue
        if getattr(args, dest) != action.default:
            what = "a run of the vectors" if mode == "run" else f"--{mode}"
            raise UsageError(f"{action.option_strings[0]} is not used by {what}: leave it out")


def _check(args: argparse.Namespace) -> None:
    """Options and paths, before any vector runs."""
    _check_used(args)
    inputs.int_in("--stride", args.stride, 1, MAX_STRIDE)
    for option, value in (("--adapter", args.adapter), ("--export", args.export)):
        if value is not None:  # '' is refused, not taken for "not given" (the reference ran)
            inputs.name_text(value, option)
    inputs.number_in("--adapter-timeout", args.adapter_timeout, 0.0, MAX_ADAPTER_TIMEOUT_S,
                     open_low=True)
    _families(args)
    if args.regenerate:  # each file it may rewrite: absent or a regular file
        inputs.output_dir(args.dir, "--dir", files=(
            *(vec.path_for(f, Path()).name for f in vec.family_names()), vec.MANIFEST_NAME))
    elif not args.dir.is_dir():
        why = "not a directory" if args.dir.exists() else "does not exist"
        raise UsageError(f"--dir {args.dir}: {why}")
    if args.save_failures is not None:
        inputs.output_dir(args.save_failures, "--save-failures")


def _families(args: argparse.Namespace) -> list[str]:
    names = args.family or vec.family_names()
    unknown = [n for n in names if n not in vec.family_names()]
    if unknown:
        raise UsageError(f"unknown family {unknown[0]!r} "
                         f"(choose from {', '.join(vec.family_names())})")
    return names


def _load_adapter(args: argparse.Namespace) -> Any:
    if args.adapter_cmd is not None:
        if not args.adapter_cmd.strip():
            raise UsageError("--adapter-cmd is empty")
        return SubprocessAdapter(args.adapter_cmd, args.adapter_timeout)
    if not args.adapter:
        return ReferenceAdapter()
    module_name, _, attr = args.adapter.partition(":")
    with CallGuard(args.adapter_timeout, _stuck(args)) as guard:
        try:
            return _construct(args, guard, module_name, attr or "Adapter")
        except AdapterError as exc:
            raise UsageError(f"cannot load adapter {args.adapter!r}: {exc}") from None


def _stuck(args: argparse.Namespace) -> Any:
    """What ends an in-process adapter call that ignores its interruption (``CallGuard``):
    one line, and the process exits with status 2 (the adapter's code cannot be stopped
    otherwise)."""
    def stuck(what: str) -> None:
        try:
            print(f"error: the adapter did not return from {what} within "
                  f"{args.adapter_timeout:g} s (--adapter-timeout), nor {STUCK_GRACE_S:g} s "
                  f"after it was interrupted: ending the command", file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_USAGE)
    return stuck


def _construct(args: argparse.Namespace, guard: CallGuard, module_name: str, attr: str) -> Any:
    """Import the adapter's module and build it, each under ``guard``."""
    try:
        obj = getattr(guard.call(f"import {module_name}", importlib.import_module,
                                 module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(f"cannot load adapter {args.adapter!r}: {exc}") from None
    except SystemExit as exc:  # its module exits on import: not an adapter, and not a pass
        raise UsageError(f"cannot load adapter {args.adapter!r}: importing it raised "
                         f"SystemExit({exc.code!r})") from None
    except AdapterError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the port's module failed (SyntaxError, ...)
        raise UsageError(f"cannot load adapter {args.adapter!r}: importing it raised "
                         f"{type(exc).__name__}: {exc}") from None
    if isinstance(obj, type):
        try:
            obj = guard.call(f"{attr}()", obj)
        except AdapterError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 -- the port's constructor
            raise UsageError(f"adapter {args.adapter!r}: its constructor raised "
                             f"{type(exc).__name__}: {exc}") from None
    missing = [m for m in ADAPTER_METHODS if not callable(getattr(obj, m, None))]
    if missing:
        raise UsageError(f"adapter {args.adapter!r} is not an adapter: it lacks "
                         f"{', '.join(missing)} (see reserve_occupy_porting.vector_runner.Adapter)")
    return obj


def _compare_corpus(args: argparse.Namespace, write: bool) -> int:
    texts, stale = {}, []
    for name in _families(args):
        t0 = time.perf_counter()
        text = texts[name] = vec.family_text(name)
        path = vec.path_for(name, args.dir)
        try:
            committed = vec.read_text(path)
        except FileNotFoundError:
            committed = None
        except lzma.LZMAError as exc:
            print(f"{path}: unreadable ({exc})", file=sys.stderr)
            committed = None
        state = "up to date" if committed == text else "STALE" if committed else "MISSING"
        count = text.count(b"\n")
        print(f"  {name:<13} {count:>5} vectors  {state}  "
              f"({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
        if committed != text:
            stale.append(name)
            if write:
                vec.write_family(name, text, args.dir)
    manifest_path = args.dir / vec.MANIFEST_NAME
    manifest = json.dumps(_manifest(args, texts), indent=2) + "\n"
    try:
        old = manifest_path.read_text(encoding="utf-8") if manifest_path.exists() else None
    except (OSError, UnicodeDecodeError):
        old = None
    if old != manifest:
        stale.append(vec.MANIFEST_NAME)
        if write:
            atomic_io.write_text(manifest_path, manifest)
    if not stale:
        print("conformance corpus is up to date", file=sys.stderr)
        return EXIT_OK
    if write:
        print(f"the committed conformance corpus was stale: rewrote {', '.join(stale)} in "
              f"{args.dir}. Review the change (a behaviour change of the core shows up here) "
              f"and commit it.", file=sys.stderr)
    else:
        print(f"the committed conformance corpus is stale ({', '.join(stale)} differ from what "
              f"generation produces): run `make conformance` and commit the result.",
              file=sys.stderr)
    return EXIT_FAIL


def _manifest(args: argparse.Namespace, texts: dict[str, bytes]) -> dict[str, Any]:
    """MANIFEST.json for ``texts``: the whole corpus, or with ``--family`` the directory's
    manifest with those families' entries replaced (the others kept as they are)."""
    if not args.family:
        return vec.manifest(texts)
    try:
        kept = vec.read_manifest(args.dir)
    except vec.CorpusError:  # none yet, or unreadable: it is rewritten
        kept = {}
    ours = vec.manifest(texts)
    entries = {**kept, **ours["families"]}
    order = [n for n in vec.family_names() if n in entries] + sorted(
        n for n in entries if n not in vec.family_names())
    return {**ours, "families": {n: entries[n] for n in order}}


def _export(args: argparse.Namespace) -> int:
    family = args.export.split("/")[0]
    if family not in vec.family_names():
        print(f"error: no family {family!r} for id {args.export!r}", file=sys.stderr)
        return EXIT_USAGE
    needle = f'"id":{json.dumps(args.export)},'.encode()
    for line in vec.verified_text(family, args.dir).splitlines():
        if line.startswith(b"{" + needle):  # ids lead each line: skip decoding the others
            v = loads_bounded(line)
            print(dumps(header(parse_config({"op": "config", "schema_version": 1,
                                             "config": v["config"]}),
                               producer=f"conformance vector {v['id']}")))
            for record in v["events"]:
                print(dumps(record))
            return EXIT_OK
    print(f"error: no vector {args.export!r}", file=sys.stderr)
    return EXIT_USAGE


def _save(failure: Failure, vector_config: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (failure.vector.replace("/", "-") + ".jsonl")
    config = parse_config({"op": "config", "schema_version": 1, "config": vector_config})
    lines = [header(config, producer=f"port outcomes for {failure.vector}")] + failure.outcomes
    atomic_io.write_text(path, "".join(dumps(r) + "\n" for r in lines))
    return path


def _progress(n: int) -> None:
    print(f"  ... {n} vectors", file=sys.stderr)


def _run_watched(adapter: SubprocessAdapter, vectors: Any, mode: str) -> Any:
    """Run an ``--adapter-cmd`` port under the watchdog ``train`` uses (runtime/watchdog.py):
    the port (and whatever it starts) ends with this process, ``kill -9`` of it included. A
    port that keeps running after its input closed would otherwise be left behind, reparented
    to init; on a normal end (pass, fail, Ctrl-C) ``close`` and ``reap_children`` end it."""
    from runtime.watchdog import Watchdog, _stat, children, reap, reap_children

    def _start_time(pid: int) -> int:
        st = _stat(pid)
        return -1 if st is None else st[1]

    before = children()
    watchdog = Watchdog.start(before)
    try:
        return run_vectors(adapter, vectors, mode, progress=_progress)
    finally:
        reap_children(before, spare=[watchdog.proc.pid] if watchdog else [])
        if watchdog is not None:
            # a daemon of the port's (forked twice, a session of its own) is no child of
            # ours any more, and not in the port's process group, which ``close`` ended: it
            # carries the run's marker, as everything the port started does
            reap(set(), watchdog.token, os.getpid(), exclude=before | {
                (watchdog.proc.pid, _start_time(watchdog.proc.pid))})
            watchdog.stop()


def _run(args: argparse.Namespace) -> int:
    adapter = _load_adapter(args)
    mode = "lenient" if args.lenient else "strict"
    configs: dict[str, Any] = {}

    families = _families(args)
    has_stream = callable(getattr(adapter, "stream", None))
    skipped = None
    if not args.family and (isinstance(adapter, SubprocessAdapter) or not has_stream):
        # Streaming consume is an optional extension: its family runs by default only for an
        # in-process adapter with ``stream``; ``--family streaming`` asks for it explicitly.
        families = [f for f in families if f != "streaming"]
        skipped = ("not run: the streaming family (" + (
            "an --adapter-cmd port may not implement stream" if has_stream else
            "the adapter has no stream()") + "; --family streaming runs it)")
    elif "streaming" in families and not has_stream:
        raise UsageError(f"adapter {args.adapter!r} has no stream(), which every vector of "
                         f"the streaming family asks for: implement it, or leave out "
                         f"--family streaming")

    def selected() -> Any:
        for k, v in enumerate(vec.load(families, args.dir)):
            if k % args.stride == 0:
                configs[v["id"]] = v["config"]
                yield v

    t0 = time.perf_counter()
    if isinstance(adapter, SubprocessAdapter):
        result = _run_watched(adapter, selected(), mode)
    else:
        result = run_vectors(adapter, selected(), mode, progress=_progress,
                             call_timeout_s=args.adapter_timeout, on_stuck=_stuck(args))
    took = time.perf_counter() - t0
    if not result.vectors:  # a pass must have checked something
        raise UsageError(f"no vectors to run in {args.dir} for {', '.join(families) or 'no '}"
                         f" famil{'y' if len(families) == 1 else 'ies'}")
    print(f"{mode}: {result.vectors - len(result.failures)}/{result.vectors} vectors pass "
          f"({result.steps} operations, {result.skipped} skipped as inapplicable, {took:.1f}s)")
    if skipped:
        print(skipped)
    for failure in result.failures[:10]:
        print(f"FAIL {failure.vector} step {failure.step} ({failure.request}): {failure.detail}")
        if args.save_failures:
            print(f"     port trace: {_save(failure, configs[failure.vector], args.save_failures)}")
    if len(result.failures) > 10:
        print(f"... and {len(result.failures) - 10} more failing vectors")
    if result.failures:
        first = result.failures[0].vector
        print(f"reproduce: reserve-occupy conformance --export {first} > ref.jsonl "
              f"(the reference's trace for that vector)")
    return EXIT_OK if result.ok else EXIT_FAIL


def run_command(args: argparse.Namespace) -> int:
    try:
        _check(args)
        if args.check or args.regenerate:
            return _compare_corpus(args, write=args.regenerate)
        if args.list:
            for v in vec.family_names():
                desc = (vec.FAMILIES[v].description if v in vec.FAMILIES else
                        "the worked examples of spec/scenarios" if v == "spec" else
                        "the shortest run in which each rule decides an outcome")
                print(f"{v:<13} {desc}")
            return EXIT_OK
        if args.export is not None:
            return _export(args)
        return _run(args)
    except (UsageError, AdapterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as exc:
        print(f"error: {exc.filename}: missing (run `make conformance` to generate the corpus)",
              file=sys.stderr)
        return EXIT_USAGE
    except lzma.LZMAError as exc:
        print(f"error: the conformance corpus is corrupted ({exc}); run `make conformance`",
              file=sys.stderr)
        return EXIT_USAGE
    except vec.CorpusError as exc:
        print(f"error: the conformance corpus is not valid: {exc}", file=sys.stderr)
        return EXIT_USAGE


run = run_command  # the CLI dispatcher calls ``run(args)``


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reserve_occupy_porting.conformance")
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_porting.conformance")
