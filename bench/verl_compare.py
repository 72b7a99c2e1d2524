"""verl 0.9.1 as shipped (``drop``, ``wait``) against verl with Reserve–Occupy, on one schedule.

Each row plays the same seeded rollout schedule (tests/integrations/verl_schedule.py: prompt
generation times with a long tail, training 1 s a step, simulated clock) through a real
TransferQueue on a local Ray bound to 127.0.0.1: verl's own ``ReplayBufferAsync`` with
``max_off_policy_threshold = eta + 1`` (verl counts a span, the protocol a staleness: the same
bound), and ``ReserveOccupyReplayBuffer`` at eta. Columns: trained groups, their staleness
(max / mean, ``global_steps - tag``), finished groups dropped as too stale, simulated seconds
the trainer waited in ``sample``, prompts generated, and the simulated time of the whole run.

    python bench/verl_compare.py [--steps 8] [--batch 8] [--eta 1,2] [--seeds 0,1,2] [--write]

``--write`` puts the table into docs/porting/verl.md between its ``verl-compare`` markers.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on 127.0.0.1 only
DOC = Path(__file__).resolve().parents[1] / "docs" / "porting" / "verl.md"


def main(argv: list[str] | None = None) -> None:
    ap = Parser(prog="verl_compare.py", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int_in(1, 10**6), default=8)
    ap.add_argument("--batch", type=int_in(1, 10**6), default=8)
    ap.add_argument("--sync-step", type=int_in(1, 10**6), default=1, help="parameter_sync_step")
    ap.add_argument("--eta", type=int_list(0, 1024), default=[1, 2])
    ap.add_argument("--seeds", type=int_list(0, 2**32 - 1), default=[0, 1, 2])
    ap.add_argument("--write", action="store_true", help=f"update {DOC.name}'s table")
    args = ap.parse_args(argv)
    etas = args.eta
    seeds = args.seeds

    import ray
    import transfer_queue as tq

    from runtime.ray_backend import loopback
    from tests.integrations import verl_schedule as vs

    loopback.pin()
    t0 = time.monotonic()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(vs.ONE_STORAGE_UNIT)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {loopback.LOOPBACK}
    print(f"Ray + TransferQueue on {loopback.LOOPBACK} up in {time.monotonic() - t0:.1f} s; "
          f"{args.steps} steps of {args.batch} groups, parameter_sync_step {args.sync_step}\n")
    head = (f"| {'eta':>3} | {'seed':>4} | {'run':<22} | {'trained':>7} | {'stale max':>9} | "
            f"{'stale mean':>10} | {'dropped':>7} | {'waited s':>8} | {'generated':>9} | "
            f"{'run s':>6} |")
    rule = "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"
    print(head)
    print(rule)
    lines = [head, rule]
    try:
        for eta in etas:
            for seed in seeds:
                for r in vs.compare(eta, seed=seed, steps=args.steps, batch_size=args.batch,
                                    parameter_sync_step=args.sync_step,
                                    with_unbounded=True):
                    line = (f"| {eta:>3} | {seed:>4} | {r.name:<22} | {len(r.trained):>7} | "
                            f"{r.max_staleness:>9} | {r.mean_staleness:>10.2f} | "
                            f"{r.dropped:>7} | {r.wait_s:>8.2f} | {r.submitted:>9} | "
                            f"{r.end_s:>6.2f} |")
                    print(line, flush=True)
                    lines.append(line)
    finally:
        tq.close()
        ray.shutdown()
    if args.write:
        write_table(lines)
        print(f"\nwrote {DOC.relative_to(DOC.parents[2])}")


def write_table(lines: list[str]) -> None:
    from bench.docblock import splice

    splice(DOC, "<!-- verl-compare:start -->", "<!-- verl-compare:end -->", "\n".join(lines))


if __name__ == "__main__":
    main()
