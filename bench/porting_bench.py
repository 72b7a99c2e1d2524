"""Throughput of the porting kit: events per second of check-trace (strict and lenient) and of
the conformance runner. Prints a table; asserts nothing about time (this machine is noisy).

    PYTHONPATH=. python bench/porting_bench.py [--steps 200000]
"""

from __future__ import annotations

import itertools
import time
import sys as _sys
from pathlib import Path as _Path

if str(_Path(__file__).resolve().parents[1]) not in _sys.path:
    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401

from reserve_occupy import Config, StalenessController
from reserve_occupy.trace import dumps
from reserve_occupy_porting.checker import check
from reserve_occupy_porting.vector_runner import ReferenceAdapter, run
from reserve_occupy_porting.vectors import load
from reserve_occupy_porting.drive import Profile, drive


def main() -> None:
    parser = Parser(prog="porting_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int_in(1, 10**9), default=200_000)
    args = parser.parse_args()
    config = Config(2, 16, capacity=18, max_concurrency=48)
    t0 = time.perf_counter()
    rec = drive(StalenessController(config), 0, Profile(steps=args.steps), reraise=True)
    lines = [dumps(r) for r in rec.lines()]
    gen = time.perf_counter() - t0
    print(f"trace: {len(lines) - 1:,} events ({config}), generated in {gen:.1f}s")
    print(f"{'what':<28}{'events/s':>12}{'seconds':>10}")
    for mode in ("strict", "lenient"):
        t0 = time.perf_counter()
        report = check(lines, mode)
        dt = time.perf_counter() - t0
        assert report.ok
        print(f"{'check-trace ' + mode:<28}{report.events / dt:>12,.0f}{dt:>10.2f}")
    vectors = list(itertools.islice(load(), 0, None, 4))
    for mode in ("strict", "lenient"):
        t0 = time.perf_counter()
        result = run(ReferenceAdapter(), vectors, mode)
        dt = time.perf_counter() - t0
        assert result.ok
        print(f"{'conformance ' + mode + ' (core)':<28}{result.steps / dt:>12,.0f}{dt:>10.2f}")


if __name__ == "__main__":
    main()
