"""The ``reserve-occupy`` command line (also ``python -m runtime``).

Each subcommand lives in its own module, imported only when that subcommand runs, so
``check-trace`` starts fast and works without torch or vLLM installed. A subcommand module
provides ``add_arguments(parser)`` and ``run(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("runtime.train", "run async GRPO with vLLM rollout (default: the embedded demo)"),
    "simulate": ("runtime.sim.cli", "simulate the protocol against the baselines on a trace"),
    "check-trace": ("runtime.porting.check_trace", "check another implementation's trace"),
    "conformance": ("runtime.porting.conformance", "run or regenerate the conformance vectors"),
    "faults": ("runtime.faults.cli", "run seeded fault-injection schedules (crashes, restarts)"),
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


def main(argv: list[str] | None = None) -> int:
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
        print(f"{PROG} {name}: needs the missing module {exc.name!r}; install the extras with "
              f"pip install 'reserve-occupy[all]'", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=f"{PROG} {name}", description=help_text)
    module.add_arguments(parser)
    return int(module.run(parser.parse_args(rest)) or 0)
