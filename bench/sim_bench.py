"""Speed of the simulator: experiment 1 in full (Reserve–Occupy, eta 0..5, 100 batches each)
and events per second. Prints numbers; asserts nothing about time (the machine is shared)."""

from __future__ import annotations

import time

import sys as _sys
from pathlib import Path as _Path

if str(_Path(__file__).resolve().parents[1]) not in _sys.path:
    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401
from reserve_occupy_sim.model.cost import preset  # noqa: E402
from reserve_occupy_sim.model.runner import RunSpec, simulate  # noqa: E402
from reserve_occupy_sim.model.workload import generate  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    Parser(prog="sim_bench.py", description=__doc__.split("\n\n")[0]).parse_args(argv)
    workload, cost = generate(0), preset("qwen3-8b-h20")
    total_events, start = 0, time.perf_counter()
    for eta in range(6):
        t0 = time.perf_counter()
        result, sim = simulate(RunSpec("reserve_occupy", eta, 100), workload, cost)
        dt = time.perf_counter() - t0
        total_events += sim.events
        print(f"eta={eta}: {dt:6.2f} s, {sim.events:6d} events, {sim.events / dt:8.0f} events/s, "
              f"{result.wall_s / 3600:5.1f} simulated hours")
    print(f"experiment 1 in full: {time.perf_counter() - start:.2f} s, {total_events} events")


if __name__ == "__main__":
    main()
