"""Throughput of the pure core: µs per reserve+occupy pair and per consume.

Drives a steady-state loop (admit while allowed, finish a random in-flight unit, consume and
publish whenever the head buffer is READY) and times each kind of operation separately with
``time.perf_counter_ns``. Prints a table; asserts nothing about time (this machine is noisy).
"""

from __future__ import annotations

import argparse
import random
import time

from reserve_occupy import Config, Phase, StalenessController


def drive(config: Config, units: int, seed: int = 0) -> dict[str, float]:
    rng = random.Random(seed)
    c = StalenessController(config)
    in_flight: list[int] = []
    t_res = t_ref = t_occ = t_con = t_pub = 0
    n_res = n_ref = n_occ = n_con = 0
    next_id = 0
    clock = time.perf_counter_ns
    start = clock()
    while n_occ < units:
        while True:
            t0 = clock()
            r = c.reserve(next_id)
            dt = clock() - t0
            if r is None:
                t_ref += dt
                n_ref += 1
                break
            t_res += dt
            in_flight.append(next_id)
            next_id += 1
            n_res += 1
        if c.phase is Phase.IDLE:
            t0 = clock()
            b = c.consume()
            dt = clock() - t0
            if b is not None:
                t_con += dt
                n_con += 1
                t0 = clock()
                c.publish()
                t_pub += clock() - t0
                continue
        if not in_flight:
            raise RuntimeError("stalled: nothing in flight and nothing to consume")
        i = rng.randrange(len(in_flight))
        in_flight[i], in_flight[-1] = in_flight[-1], in_flight[i]
        u = in_flight.pop()
        t0 = clock()
        p = c.occupy(u)
        t_occ += clock() - t0
        n_occ += 1
        for a in p.aborted:
            in_flight.remove(a)
    wall = (clock() - start) / 1e9
    return {
        "reserve_us": t_res / 1e3 / max(n_res, 1),
        "refused_us": t_ref / 1e3 / max(n_ref, 1),
        "occupy_us": t_occ / 1e3 / max(n_occ, 1),
        "pair_us": (t_res / max(n_res, 1) + t_occ / max(n_occ, 1)) / 1e3,
        "consume_us": t_con / 1e3 / max(n_con, 1),
        "publish_us": t_pub / 1e3 / max(n_con, 1),
        "admitted_per_s": n_res / wall,
        "batches": n_con,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=200_000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--eta", type=int, default=3)
    ap.add_argument("--max-concurrency", type=int, default=48)
    args = ap.parse_args(argv)
    print(f"batch_size={args.batch_size} eta={args.eta} max_concurrency={args.max_concurrency} "
          f"units={args.units}")
    print(f"{'capacity':>8} {'reserve µs':>10} {'occupy µs':>9} {'pair µs':>8} {'refused µs':>10} "
          f"{'consume µs':>10} {'publish µs':>10} {'admitted/s':>11} {'batches':>8}")
    for capacity in (args.batch_size, args.batch_size + args.batch_size // 4):
        cfg = Config(args.eta, args.batch_size, capacity, args.max_concurrency)
        r = drive(cfg, args.units)
        print(f"{capacity:>8} {r['reserve_us']:>10.2f} {r['occupy_us']:>9.2f} {r['pair_us']:>8.2f} "
              f"{r['refused_us']:>10.2f} "
              f"{r['consume_us']:>10.2f} {r['publish_us']:>10.2f} {r['admitted_per_s']:>11,.0f} "
              f"{r['batches']:>8}")


if __name__ == "__main__":
    main()
