"""Throughput of the pure core: µs per operation, against a bare ``transitions`` trigger.

Drives a steady-state loop (admit while allowed, finish a random in-flight unit, consume and
publish whenever the head buffer is READY) at B = 16 and B = 256 (eta = 3, max_concurrency =
2.5 B by default) and times every call with ``time.perf_counter_ns``. In the same run it times a
bare ``transitions`` trigger (a stock ``Machine``, one internal transition, no guard, no
callbacks): the host's unit of speed, so that the table reads the same on a fast or a loaded host.

Per call it reports the median (robust against the preemptions of a shared host, which land on
whichever call is running and can swamp a mean over a few hundred batches) and the mean (which
also charges each operation its share of garbage collection: reserve and occupy allocate the
most, so their means run well above their medians).
Rounds alternate the configurations so that a change in the host's load hits all of them alike;
each row pools all rounds. The ratios at the end are the core's speed targets:

* consume+publish per batch / one reserve+occupy pair, at B = 16 (goal <= 1) and B = 256
  (goal <= 3): handing a batch to the trainer costs no more than admitting and placing a unit;
* pair at B = 256 / pair at B = 16 (goal <= 1.2): placement does not slow down with the buffer.

Prints numbers; asserts nothing about time (a timed assert fails on a busy machine).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any
import sys as _sys
from pathlib import Path as _Path

if str(_Path(__file__).resolve().parents[1]) not in _sys.path:
    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401

from transitions import Machine

from reserve_occupy import Config, StalenessController

OPS = ("reserve", "occupy", "consume", "publish", "consume+publish")


def drive(make: Callable[[], Any], units: int, seed: int = 0,
          before_consume: Callable[[], None] | None = None) -> dict[str, list[int]]:
    """Run the steady-state loop on ``make()`` until ``units`` units finished; return the
    duration in ns of every successful call, per operation (``consume+publish`` per batch).
    ``make`` may build any controller with this core's interface (an older core, for a
    side-by-side comparison). ``before_consume`` runs, untimed, before each consume that will
    hand out a batch (``--before-consume``)."""
    rng = random.Random(seed)
    c = make()
    times: dict[str, list[int]] = {op: [] for op in OPS}
    t_res, t_occ, t_con, t_pub, t_batch = (times[op] for op in OPS)
    in_flight: list[int] = []
    next_id = 0
    clock = time.perf_counter_ns
    while len(t_occ) < units:
        while True:
            t0 = clock()
            r = c.reserve(next_id)
            dt = clock() - t0
            if r is None:
                break
            t_res.append(dt)
            in_flight.append(next_id)
            next_id += 1
        if c.phase.value == "IDLE":
            if before_consume is not None and c.head_status is not None \
                    and c.head_status.value == "READY":
                before_consume()
            t0 = clock()
            b = c.consume()
            t1 = clock()
            if b is not None:
                c.publish()
                t2 = clock()
                t_con.append(t1 - t0)
                t_pub.append(t2 - t1)
                t_batch.append(t2 - t0)
                continue
        if not in_flight:
            raise RuntimeError("stalled: nothing in flight and nothing to consume")
        i = rng.randrange(len(in_flight))
        in_flight[i], in_flight[-1] = in_flight[-1], in_flight[i]
        u = in_flight.pop()
        t0 = clock()
        p = c.occupy(u)
        t_occ.append(clock() - t0)
        for a in p.aborted:
            in_flight.remove(a)
    return times


class CacheFlush:
    """``--before-consume flush``: evict the caches as B reserve/occupy calls do between two
    consumes at a large B: write a 16 MiB buffer (beyond this host's L2 and most of an L3) a
    byte per 64-byte line and walk 300,000 objects."""

    def __init__(self) -> None:
        self.junk = [object() for _ in range(300_000)]
        self.big = bytearray(16 << 20)
        self.ones = b"\1" * len(self.big[::64])

    def __call__(self) -> None:
        self.big[::64] = self.ones
        for _ in self.junk:
            pass


class WarmConsume:
    """``--before-consume warm``: run the same code -- 16 reserve and occupy calls, a consume
    and a publish -- on a small controller of its own (B = 16), which brings consume's and
    publish's code and the interpreter's data for it back into the caches, not the timed
    controller's data."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self.c = make(Config(1, 16))
        self.next_id = 0

    def __call__(self) -> None:
        c = self.c
        while c.reserve(self.next_id) is not None:
            c.occupy(self.next_id)
            self.next_id += 1
        c.consume()
        c.publish()


def bare_trigger(calls: int) -> list[int]:
    """ns per call of a stock ``transitions`` trigger with nothing to do, in batches of 100."""

    class Model:
        pass

    model = Model()
    machine = Machine(model=model, states=["A"], initial="A", auto_transitions=False)
    machine.add_transition("tick", "A", None)
    tick = model.tick  # type: ignore[attr-defined]
    clock = time.perf_counter_ns
    out = []
    for _ in range(max(1, calls // 100)):
        t0 = clock()
        for _ in range(100):
            tick()
        out.append((clock() - t0) // 100)
    return out


def summarize(times: dict[str, list[int]]) -> dict[str, float]:
    """Median and mean µs per operation; ``pair`` is median reserve + median occupy."""
    out: dict[str, float] = {}
    for op, ts in times.items():
        out[op] = statistics.median(ts) / 1e3 if ts else float("nan")
        out[op + " mean"] = statistics.fmean(ts) / 1e3 if ts else float("nan")
    out["pair"] = out["reserve"] + out["occupy"]
    out["pair mean"] = out["reserve mean"] + out["occupy mean"]
    out["batches"] = len(times["consume"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = Parser(prog="core_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int_in(1, 1 << 20), nargs="+", default=[16, 256])
    ap.add_argument("--eta", type=int_in(0, 1024), default=3)
    ap.add_argument("--concurrency", type=float_in(0, 1e6, lo_open=True), default=2.5,
                    help="max_concurrency as a multiple of the batch size")
    ap.add_argument("--units", type=int_in(1, 10**9), default=40_000,
                    help="finished units per configuration and round")
    ap.add_argument("--min-batches", type=int_in(1, 10**9), default=200,
                    help="raise --units where a configuration would consume fewer batches")
    ap.add_argument("--rounds", type=int_in(1, 10**6), default=3)
    ap.add_argument("--trigger-calls", type=int_in(1, 10**9), default=20_000,
                    help="bare transitions triggers timed before and after each round")
    ap.add_argument("--oversampling", action="store_true",
                    help="also capacity = 1.25 B (batch-level oversampling)")
    ap.add_argument("--before-consume", choices=("nothing", "flush", "warm"), default="nothing",
                    help="untimed, before each consume: flush the caches (CacheFlush), or "
                         "warm consume's code on a small controller (WarmConsume)")
    args = ap.parse_args(argv)
    hook = {"nothing": None, "flush": CacheFlush(),
            "warm": WarmConsume(StalenessController)}[args.before_consume]

    configs = []
    for b in args.batch_sizes:
        for cap in (b, b + b // 4) if args.oversampling else (b,):
            configs.append(Config(args.eta, b, cap, max(1, round(args.concurrency * b))))
    pooled: dict[Config, dict[str, list[int]]] = {cfg: {op: [] for op in OPS} for cfg in configs}
    trigger: list[int] = []
    for rnd in range(args.rounds):
        trigger += bare_trigger(args.trigger_calls)
        for cfg in configs:
            units = max(args.units, args.min_batches * cfg.batch_size)
            for op, ts in drive(lambda: StalenessController(cfg), units, seed=rnd,
                                before_consume=hook).items():
                pooled[cfg][op] += ts
        trigger += bare_trigger(args.trigger_calls)
    t_bare = statistics.median(trigger) / 1e3

    print(f"eta={args.eta} max_concurrency={args.concurrency}·B rounds={args.rounds} "
          f"before consume: {args.before_consume}; median µs per call (mean in brackets)")
    print(f"bare transitions trigger (stock Machine, no guard, no callback): {t_bare:.2f} µs")
    head = (f"{'B':>4} {'C':>4} {'reserve':>14} {'occupy':>14} {'pair':>14} {'consume':>15} "
            f"{'publish':>14} {'consume+publish':>16} {'pair/trigger':>12} {'batches':>8}")
    print(head)
    rows = {}
    for cfg in configs:
        r = rows[cfg] = summarize(pooled[cfg])
        cells = " ".join(f"{r[op]:>6.2f} [{r[op + ' mean']:>6.2f}]"
                         for op in ("reserve", "occupy", "pair", "consume", "publish"))
        print(f"{cfg.batch_size:>4} {cfg.capacity:>4} {cells} "
              f"{r['consume+publish']:>7.2f} [{r['consume+publish mean']:>6.2f}] "
              f"{r['pair'] / t_bare:>12.2f} {r['batches']:>8}")

    print("ratios, from medians [from means]; goal after the arrow:")
    plain = {cfg.batch_size: rows[cfg] for cfg in configs if cfg.capacity == cfg.batch_size}

    def ratio(a: dict[str, float], a_op: str, b: dict[str, float], b_op: str) -> str:
        return f"{a[a_op] / b[b_op]:.2f} [{a[a_op + ' mean'] / b[b_op + ' mean']:.2f}]"

    for b, goal in ((16, 1.0), (256, 3.0)):
        if b in plain:
            print(f"  consume+publish / pair at B={b}: "
                  f"{ratio(plain[b], 'consume+publish', plain[b], 'pair')} -> <= {goal:g}")
    if 16 in plain and 256 in plain:
        print(f"  pair at B=256 / pair at B=16: {ratio(plain[256], 'pair', plain[16], 'pair')}"
              f" -> <= 1.2")

if __name__ == "__main__":
    main()
