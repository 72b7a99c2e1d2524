"""``reserve-occupy check-trace FILE``: is this trace, from any implementation, conforming?

Exit codes: 0 conforming; 1 the trace diverges from the reference (strict) or violates a safety
invariant; 2 the input cannot be read or is not a valid trace (the message names the line and
field). Every log is checked as Reserve–Occupy's; a peer's log (``x_policy``) only with
``--peer NAME``, by that rule's terms: 0 the rule held, 1 it broke. The format is
docs/porting/trace-format.md; ``.gz`` files and ``-`` (stdin) are read too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator

from reserve_occupy.trace import TraceFormatError

from .checker import LENIENT, STRICT, PeerHeaderError, check
from .report import EXIT_FAIL, EXIT_OK, EXIT_UNREADABLE, render_json, render_text

FORMAT_DOC = "docs/porting/trace-format.md"
# Longest line read: a consume of a 1,000,000-unit batch (Config's limit) takes ~40 MB. A line is
# read whole before it is parsed, so this bounds the memory one line (or a .gz bomb) can take.
MAX_LINE_BYTES = 64 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check a Reserve-Occupy trace (JSON Lines) from any implementation. Strict mode "
        "replays it through the reference controller and reports the first divergence; "
        "--lenient checks only the safety invariants (staleness bound, conservation, in-order "
        "consumption, full batches, capacity, concurrency). A peer's log (a header with "
        "x_policy) is checked only with --peer NAME, by that rule's terms. Exit 0 conforming "
        "(with --peer: the rule held), 1 divergence or violation, 2 unreadable or invalid "
        "input.")
    parser.add_argument("file", metavar="FILE", help="trace file (.jsonl, .jsonl.gz, or - for "
                                                     "stdin)")
    parser.add_argument("--lenient", action="store_true",
                        help="check only the safety invariants, for implementations that place "
                             "units differently but legally")
    parser.add_argument("--peer", metavar="NAME",
                        help="the log is a peer's (runtime/peers.py; its header's x_policy must "
                             "be NAME): check it by that rule's terms, with the bound and eta "
                             "the rule enforces; the verdict is the rule's, not conformance")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


class UnreadableTrace(Exception):
    """The file cannot be opened, decompressed or decoded as UTF-8."""


def read_lines(path: str) -> Iterator[str]:
    """The trace's lines, with I/O and decoding failures turned into ``UnreadableTrace``."""
    try:
        if path == "-":
            raw = sys.stdin.buffer
        elif path.endswith(".gz"):
            raw = gzip.open(path, "rb")  # noqa: SIM115 -- closed by the `with` below
        else:
            raw = open(path, "rb")  # noqa: SIM115 -- closed by the `with` below
    except OSError as exc:
        raise UnreadableTrace(f"cannot open {path}: {exc.strerror or exc}") from None
    number, shown = 0, "<stdin>" if path == "-" else path
    try:
        with raw:
            while True:
                data = raw.readline(MAX_LINE_BYTES + 1)
                if not data:
                    break
                number += 1
                if len(data) > MAX_LINE_BYTES:
                    raise UnreadableTrace(f"{shown}: line {number} is longer than "
                                          f"{MAX_LINE_BYTES >> 20} MB: not a trace line")
                try:
                    yield data.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError:
                    raise UnreadableTrace(f"{shown}: line {number}: not UTF-8 text (is this a "
                                          f"binary or compressed file? name it .gz)") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UnreadableTrace(f"{shown}: read failed after line {number}: {exc} (truncated or "
                              f"corrupted file?)") from None


def run(args: argparse.Namespace) -> int:
    mode = LENIENT if args.lenient else STRICT
    name = "<stdin>" if args.file == "-" else args.file
    if args.peer is not None:
        from runtime.peers import PEER_POLICIES

        if args.peer not in PEER_POLICIES:
            return _unreadable(args, name, f"--peer: unknown rule {args.peer!r} (choose from "
                                           f"{', '.join(PEER_POLICIES)})")
        if args.lenient:
            return _unreadable(args, name, "--peer with --lenient: a peer's log is checked by "
                                           "its rule's terms; --lenient is Reserve–Occupy's")
    try:
        report = check(read_lines(args.file), mode, progress=_progress(), peer=args.peer)
    except UnreadableTrace as exc:
        return _unreadable(args, name, str(exc))
    except PeerHeaderError as exc:
        return _unreadable(args, name, f"{name}: {exc}")
    except TraceFormatError as exc:
        return _unreadable(args, name, f"{name}: {exc}\n  (trace format: {FORMAT_DOC})")
    if args.json:
        print(json.dumps(render_json(report, name), indent=2, default=str))
    else:
        print(render_text(report, name))
    return EXIT_OK if report.ok else EXIT_FAIL


def _progress():
    """Print progress on long traces, to a terminal only (logs and pipes stay clean)."""
    if not sys.stderr.isatty():
        return None
    return lambda n: print(f"  ... {n:,} events checked", file=sys.stderr, flush=True)


def _unreadable(args: argparse.Namespace, name: str, message: str) -> int:
    if args.json:
        print(json.dumps({"file": name, "ok": False, "error": message}, indent=2))
    else:
        print(f"error: {message}", file=sys.stderr)
    return EXIT_UNREADABLE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reserve-occupy check-trace")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_porting.check_trace")
