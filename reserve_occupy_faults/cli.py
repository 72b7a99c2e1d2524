"""``python -m reserve_occupy_faults --schedules N`` (also ``reserve-occupy faults``): run N seeded
fault schedules and report what ran, what was injected, how many checks were made and what failed.

Schedules ``seed .. seed + N - 1``; a share (``--sim-share``, default 0.2) runs in the
simulator, the rest against the driver, durability and recovery code (``harness``). Every
violation is printed with its seed and the minimal schedule that still shows it. Exit status:
0 no violation, 1 violations (with ``--variant``: 0 when the broken variant was caught, 1 when
it was not), 2 bad arguments (checked before any schedule runs: docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any

from runtime import atomic_io, inputs
from runtime.inputs import InputError

from .harness import run_schedule
from .schedule import generate, minimize
from .sim import SIM_VARIANTS, FaultyReserveOccupy, generate_sim, run_sim_schedule

SHOW = 5  # failing schedules printed in full
MAX_SCHEDULES = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedules", type=int, default=1000, help="how many (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--sim-share", type=float, default=0.2,
                        help="share of schedules run in the simulator (default 0.2)")
    parser.add_argument("--variant", help="run against a deliberately broken variant (it must "
                                          "be caught); see reserve_occupy_faults/variants.py")
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def _variant(name: str | None) -> tuple[Any, type[FaultyReserveOccupy] | None, str]:
    """(driver variant, simulator policy, which side runs) for ``--variant``."""
    if name is None:
        return None, FaultyReserveOccupy, "both"
    from .variants import VARIANTS

    if name in VARIANTS:
        return VARIANTS[name], None, "driver"
    if name in SIM_VARIANTS:
        return None, SIM_VARIANTS[name], "sim"
    raise ValueError(f"unknown variant {name!r} (choose from "
                     f"{', '.join([*VARIANTS, *SIM_VARIANTS])})")


def run(args: argparse.Namespace) -> int:
    try:
        inputs.int_in("--schedules", args.schedules, 1, MAX_SCHEDULES)
        inputs.int_in("--seed", args.seed, 0, 2**63 - 1)
        inputs.number_in("--sim-share", args.sim_share, 0.0, 1.0)
        if args.json is not None:  # '' too: refused, not taken for "no --json"
            inputs.output_file(args.json, "--json")
        variant, policy, side = _variant(args.variant)
        if side != "both" and args.sim_share != 0.2:  # accepted and ignored before
            raise ValueError(f"--sim-share splits the schedules between the simulator and "
                             f"the driver, and --variant {args.variant} runs on one side "
                             f"only ({side}): leave it out")
    except ValueError as exc:  # InputError too
        print(f"faults: {exc}", file=sys.stderr)
        return 2
    n_sim = (0 if side == "driver" else args.schedules if side == "sim"
             else round(args.schedules * args.sim_share))
    n_driver = args.schedules - n_sim
    injected: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    did: Counter[str] = Counter()
    failures: list[tuple[Any, list[str], Any]] = []
    t0 = time.perf_counter()
    total = n_driver + n_sim
    step = max(1, total // 10)
    done = 0

    def progress() -> None:
        if not args.quiet and (done % step == 0 or done == total):
            rate = done / (time.perf_counter() - t0)
            print(f"  {done:>6}/{total} schedules, {len(failures)} with violations, "
                  f"{rate:.1f} schedules/s", file=sys.stderr, flush=True)

    from runtime.cli import deferred_interrupts

    with deferred_interrupts() as interrupts:  # Ctrl-C takes effect between two schedules
        for seed in range(args.seed, args.seed + n_driver):
            schedule = generate(seed)
            out = run_schedule(schedule, variant)
            injected.update(out.injected)
            stats["checks"] += out.checks
            stats["restarts"] += out.incarnations - 1
            did.update(out.recovery)
            if not out.ok:
                failures.append((schedule, out.violations, "driver"))
            done += 1
            progress()
            interrupts.check()
        for seed in range(args.seed, args.seed + n_sim):
            sim_schedule = generate_sim(seed)
            sim_out = run_sim_schedule(sim_schedule, policy)  # type: ignore[arg-type]
            injected.update({f"sim {k}": v for k, v in sim_out.injected.items()})
            stats["checks"] += sim_out.checks
            if not sim_out.ok:
                failures.append((sim_schedule, sim_out.violations, "sim"))
            done += 1
            progress()
            interrupts.check()
    elapsed = time.perf_counter() - t0
    summary = {
        "schedules": total, "driver_schedules": n_driver, "sim_schedules": n_sim,
        "first_seed": args.seed, "seconds": round(elapsed, 2),
        "schedules_per_s": round(total / elapsed, 1), "injected": dict(sorted(injected.items())),
        "restarts": stats["restarts"], "checks": stats["checks"],
        "recovery": dict(sorted(did.items())),
        "violating_schedules": len(failures), "variant": args.variant,
    }
    _print_summary(summary)
    for schedule, violations, kind in failures[:SHOW]:
        _print_failure(schedule, violations, kind, variant, policy)
    if args.json is not None:
        try:
            atomic_io.write_text(args.json, json.dumps(summary, indent=2))
        except OSError as exc:  # checked writable up front; the disk may still fail
            from runtime.cli import EXIT_IO

            print(f"error: --json {args.json}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_IO
    if args.variant:
        caught = bool(failures)
        print(f"variant {args.variant}: {'caught' if caught else 'NOT caught'} in "
              f"{len(failures)} of {total} schedules")
        return 0 if caught else 1
    return 1 if failures else 0


def _print_summary(s: dict[str, Any]) -> None:
    print(f"fault injection: {s['schedules']} schedules ({s['driver_schedules']} driver + "
          f"recovery, {s['sim_schedules']} simulator), seeds {s['first_seed']}.."
          f"{s['first_seed'] + max(s['driver_schedules'], s['sim_schedules']) - 1}, "
          f"{s['seconds']:.1f} s ({s['schedules_per_s']} schedules/s)")
    print("faults injected, by kind:")
    for kind, n in s["injected"].items():
        print(f"  {kind:<24} {n:>7}")
    print(f"restarts from the event log: {s['restarts']}; what the driver and recovery did:")
    for what, n in s["recovery"].items():
        print(f"  {what:<40} {n:>7}")
    print(f"invariant checks performed: {s['checks']:,}")
    print(f"schedules with violations: {s['violating_schedules']}")


def _print_failure(schedule: Any, violations: list[str], kind: str, variant: Any,
                   policy: Any) -> None:
    if kind == "driver":
        small = minimize(schedule, lambda s: not run_schedule(s, variant).ok)
        again = run_schedule(small, variant).violations
    else:
        small = minimize(schedule, lambda s: not run_sim_schedule(s, policy).ok)
        again = run_sim_schedule(small, policy).violations
    print(f"\nVIOLATION ({kind}) -- reproduce with: python -m reserve_occupy_faults --schedules 1 "
          f"--seed {schedule.seed}{' --sim-share 1' if kind == 'sim' else ' --sim-share 0'}")
    print("minimal schedule:\n" + small.describe())
    for v in again[:6]:
        print(f"  ! {v}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reserve_occupy_faults", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
