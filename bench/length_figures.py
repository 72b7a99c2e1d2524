"""The runtime's length-bias bookkeeping at scale (issue 38, item 4): what the driver's once-a-step
``LengthLog.figures`` costs, and how many per-unit entries the bookkeeping holds, against the
number of units settled.

Feeds ``runtime.accounting`` exactly what a driver feeds it, without an engine: per step
``--groups`` units reserved, their samples' lengths added to a ``LengthLog`` (``--samples``
candidates, 12 of 16 committed, 4 surplus, lengths drawn from 1..``--max-tokens``), the units
occupied and consumed in the controller's trace format (every ``--filter-every``-th unit
filtered, and a reservation aborted by the closing rule each step), and then the step's figures
as the driver takes them. ``--groups`` units settle per step; the last step's units' lengths
arrive one step late (a unit's surplus requests return after its fate), so some entries are
always pending.

Prints one row per ``--every`` steps: units settled, the per-unit entries held (fates not yet
joined + length records not yet joined), and the seconds the step's figures call took (one
call, wall clock on a shared host: an illustration of growth, not a benchmark). Asserts
nothing.

    python bench/length_figures.py --groups 1024 --samples 16 --steps 60 --every 10
"""

from __future__ import annotations

import random
import sys as _sys
import time
from pathlib import Path as _Path

if str(_Path(__file__).resolve().parents[1]) not in _sys.path:
    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

from bench.cli import Parser, bad, int_in  # noqa: E402

from runtime.accounting import LengthLog, LogCounts  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = Parser(prog="length_figures.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int_in(8, 10**6), default=1024)
    p.add_argument("--samples", type=int_in(1, 4096), default=16)
    p.add_argument("--committed", type=int_in(1, 4096), default=12)
    p.add_argument("--max-tokens", type=int_in(1, 10**7), default=4096)
    p.add_argument("--steps", type=int_in(1, 10**6), default=60)
    p.add_argument("--every", type=int_in(1, 10**6), default=10)
    p.add_argument("--filter-every", type=int_in(2, 10**6), default=4)
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0)
    a = p.parse_args(argv)
    if a.committed > a.samples:
        bad(p.prog, f"--committed {a.committed} is more than --samples {a.samples}")
    rng = random.Random(a.seed)
    counts, lengths = LogCounts(), LengthLog()
    take = getattr(counts, "take_fates", None)  # the bounded API; the old one keeps them all
    late: list[str] = []
    roles = ["committed"] * a.committed + ["surplus"] * (a.samples - a.committed)
    print(f"{'step':>5} {'units settled':>14} {'entries held':>13} {'figures s':>10}")
    for step in range(a.steps):
        units = [f"g{step}-{i}" for i in range(a.groups)]
        for u in units + [f"c{step}"]:
            counts.add({"op": "reserve", "unit": u})
        for u in late:  # last step's units: their surplus requests returned only now
            lengths.add(u, [rng.randint(1, a.max_tokens) for _ in roles], roles)
        late = units[-a.groups // 8:]
        for u in units[:-a.groups // 8]:
            lengths.add(u, [rng.randint(1, a.max_tokens) for _ in roles], roles)
        trained = []
        for i, u in enumerate(units):
            if i % a.filter_every == a.filter_every - 1:
                counts.add({"op": "filter", "unit": u, "meta": {"reason": "no_gradient"}})
            else:
                counts.add({"op": "occupy", "unit": u, "aborted": [f"c{step}"] if i == 0 else []})
                trained.append({"unit": u, "staleness": 0})
        lengths.add(f"c{step}", [rng.randint(1, a.max_tokens)], ["stopped"])
        counts.add({"op": "consume", "batch": {"units": trained}})
        counts.add({"op": "publish"})
        t0 = time.perf_counter()
        fig = lengths.figures(take() if take else counts.fates)
        dt = time.perf_counter() - t0
        if (step + 1) % a.every == 0 or step == 0:
            waiting = getattr(lengths, "waiting_fates", {})  # the bounded LengthLog's
            held = len(counts.fates) + len(lengths.records) + len(waiting)
            print(f"{step + 1:>5} {(step + 1) * (a.groups + 1):>14} {held:>13} {dt:>10.4f}"
                  f"   ratio {fig['length_ratio']:.4f} ks {fig['length_ks']:.4f}")


if __name__ == "__main__":
    main()
