"""Why one policy is ahead of another in a cell: where the engines' time goes, what sets each
batch's period, and how far the schedule itself moves under a tiny perturbation.

Three read-only views of finished simulator runs (nothing here changes a run):

* ``engine_time(sim)``: the instances' wall time split into idle, prefill (joins and the
  re-prefill after every weight sync), paused (syncs) and decoding, with the mean number of
  running requests and the decode rate per decoding second. A policy that keeps fewer requests
  in flight at each sync pays less re-prefill; this view shows it.
* ``critical_path(sim)``: per steady batch, the request that finished last (the one the
  trainer waited for), when it started relative to the opening of its staleness window (the
  publish of version ``v - eta``), how long it waited in the engine queue, how long it ran and
  its mean seconds per decode step. At eta = 1 a batch's period is set by such a straggler.
* ``perturbation_spread(...)``: the steady-state throughput of each policy when one cost
  coefficient (``rollout.per_ctx_token_s``) is scaled by factors such as 1 ± 1e-4. Such a change
  is far below any measurement error, yet the discrete-event schedule (which request starts in
  which slot when) is chaotic and a single seed's throughput moves by a percent or two; the
  spread of a policy against *itself* is the noise floor for comparing two policies on one seed.

``python -m reserve_occupy_sim.studies.diagnose --eta 4 --train-mult 0.25`` prints all three for a
cell of the regime map (``regimes.scaled``: training cost multiplier and concurrency on the preset).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runtime.inputs import InputError, int_in, number, one_int, seed_list, sim_limit
from reserve_occupy_peers import UnknownPolicy, policy_names

from ..model.cost import CostError, CostModel, preset
from ..model.core import Simulator
from ..model.filtering import RewardFilter
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, generate


@dataclass(frozen=True)
class EngineTime:
    """Fractions of the instances' wall time (they sum to 1) and the decode figures."""

    idle: float  # no running request, not paused
    prefill: float  # stalled for prefill: joins and re-prefill after syncs
    paused: float  # weight syncs
    decode: float  # the rest: decode steps
    mean_running: float  # time-mean running requests per instance
    decode_tok_per_s: float  # response tokens per decoding second per instance


def engine_time(sim: Simulator) -> EngineTime:
    """Where the engines' time went over the whole run."""
    wall = sim.now * len(sim.instances)
    if wall <= 0:
        raise ValueError("engine_time: the run has not advanced")
    idle = sum(i.idle_time for i in sim.instances) / wall
    prefill = sum(i.prefill_time for i in sim.instances) / wall
    paused = sum(i.paused_time for i in sim.instances) / wall
    decode = max(0.0, 1.0 - idle - prefill - paused)
    decoded = sum(i.decoded for i in sim.instances)
    running = sum(i.slot_time for i in sim.instances) / wall
    return EngineTime(idle=idle, prefill=prefill, paused=paused, decode=decode,
                      mean_running=running,
                      decode_tok_per_s=decoded / (decode * wall) if decode > 0 else 0.0)


@dataclass(frozen=True)
class Straggler:
    """The request batch ``index`` waited for."""

    index: int
    period_s: float  # publish before this batch's to its publish
    trainer_wait_s: float  # previous publish to this batch's consume
    length: int  # its response length
    start_after_open_s: float  # its start minus the publish that opened its window
    queue_s: float  # its start minus its group's admission
    run_s: float  # its start to its end
    step_ms: float  # run_s / length, in milliseconds


def critical_path(sim: Simulator, warmup: int | None = None) -> list[Straggler]:
    """The straggler of every batch after ``warmup`` (default: a fifth, as steady throughput)."""
    eta = sim.policy.eta if sim.policy.eta is not None else 0
    batches = sim.ledger.batches[: sim.n_batches]
    warmup = len(batches) // 5 if warmup is None else warmup
    published = {0: 0.0}  # version -> when it went live
    for b in batches:
        published[b.version + 1] = b.t_published
    by_tid = {r.tid: r for r in sim.ledger.requests}
    out = []
    for i in range(max(1, warmup), len(batches)):
        b = batches[i]
        last = max((by_tid[t] for t in b.tids), key=lambda r: r.t_end)
        opened = published.get(max(0, b.version - eta), 0.0)
        run = last.t_end - last.t_start
        out.append(Straggler(
            index=i, period_s=b.t_published - batches[i - 1].t_published,
            trainer_wait_s=b.t_consume - batches[i - 1].t_published, length=last.length,
            start_after_open_s=last.t_start - opened, queue_s=last.t_start - last.group.t_admit,
            run_s=run, step_ms=1000.0 * run / last.length if last.length else 0.0))
    return out


def perturbation_spread(policies: Sequence[str], workload, cost: CostModel, *, eta: int,
                        batches: int, batch_size: int = 16,
                        factors: Sequence[float] = (1.0, 1 - 1e-4, 1 + 1e-4),
                        filtering: RewardFilter | None = None) -> dict[str, list[float]]:
    """Steady-state throughput of each policy with ``rollout.per_ctx_token_s`` scaled by each
    factor (one list per policy, in ``factors`` order)."""
    out: dict[str, list[float]] = {}
    for name in policies:
        for f in factors:
            if not (isinstance(f, (int, float)) and math.isfinite(f) and f > 0):
                raise ValueError(f"perturbation_spread: factors must be numbers > 0, got {f!r}")
            c = dataclasses.replace(cost, rollout=dataclasses.replace(
                cost.rollout, per_ctx_token_s=cost.rollout.per_ctx_token_s * f))
            r, _ = simulate(RunSpec(name, eta, batches, batch_size, filtering=filtering),
                            workload, c)
            out.setdefault(name, []).append(r.steady_throughput)
    return out


# --------------------------------------------------------------------------- CLI ------------

def _report(policies: list[str], seeds: list[int], cost: CostModel, *, eta: int, batches: int,
            truncated: float, filter_rate: float, perturb: bool) -> list[str]:
    lines = [f"cell: eta {eta}, {cost.name}, {truncated:g} at the cap, no-gradient rate "
             f"{filter_rate:g}, {batches} batches, seeds {','.join(map(str, seeds))}",
             "", "| seed | policy | steady tok/s | ÷ first | idle | prefill | paused | decode | "
             "mean running | decode tok/s per inst | straggler: start after window opens s | "
             "queue s | run s | ms/step |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    spreads: dict[str, list[float]] = {}
    for seed in seeds:
        wl = generate(seed, MathReasoningShape(truncated=truncated))
        filt = RewardFilter(filter_rate, seed=seed) if filter_rate > 0 else None
        first = None
        plain: dict[str, float] = {}  # the unperturbed runs, reused by the spread below
        for name in policies:
            r, sim = simulate(RunSpec(name, eta, batches, filtering=filt), wl, cost)
            first = first or r.steady_throughput
            plain[name] = r.steady_throughput
            e = engine_time(sim)
            path = critical_path(sim)
            mean = (lambda k: float(np.mean([getattr(s, k) for s in path])) if path
                    else float("nan"))
            lines.append(
                f"| {seed} | {name} | {r.steady_throughput:.0f} | "
                f"{r.steady_throughput / first:.3f} | {e.idle:.3f} | {e.prefill:.3f} | "
                f"{e.paused:.3f} | {e.decode:.3f} | {e.mean_running:.1f} | "
                f"{e.decode_tok_per_s:.0f} | {mean('start_after_open_s'):.0f} | "
                f"{mean('queue_s'):.0f} | {mean('run_s'):.0f} | {mean('step_ms'):.1f} |")
        if perturb:
            s = perturbation_spread(policies, wl, cost, eta=eta, batches=batches,
                                    factors=(1 - 1e-4, 1 + 1e-4), filtering=filt)
            for name in policies:
                spreads.setdefault(name, []).extend(v / first for v in [plain[name], *s[name]])
    if perturb:
        lines += ["", "per_ctx_token_s × 1, 1 − 1e-4, 1 + 1e-4 on every seed; steady tok/s ÷ "
                      f"{policies[0]}'s unperturbed run on the same seed:", "",
                  "| policy | mean | lowest | highest |", "|---|---|---|---|"]
        for name, v in spreads.items():
            lines.append(f"| {name} | {np.mean(v):.3f} | {min(v):.3f} | {max(v):.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    from reserve_occupy.config import MAX_STALENESS

    from .regimes import scaled

    parser = argparse.ArgumentParser(
        prog="python -m reserve_occupy_sim.studies.diagnose",
        description="Where the engines' time goes, what each steady batch waited for, and the "
                    "schedule's own noise, for a few policies in one cell of the regime map.")
    parser.add_argument("--policies", default="reserve_occupy,nemo_in_order,verl_drop",
                        help="comma list; ratios are to the first (default "
                             "reserve_occupy,nemo_in_order,verl_drop)")
    parser.add_argument("--eta", default="1", help="staleness bound (default 1)")
    parser.add_argument("--seeds", default="0,1,2", help="workload seeds (default 0,1,2)")
    parser.add_argument("--batches", default="60", help="batches per run (default 60)")
    parser.add_argument("--train-mult", default="1", help="training cost × (default 1)")
    parser.add_argument("--concurrency", default="40", help="requests per instance (default 40)")
    parser.add_argument("--truncated", default="0.03",
                        help="share of responses at the length cap (default 0.03)")
    parser.add_argument("--filter-rate", default="0", help="no-gradient rate (default 0)")
    parser.add_argument("--perturb", action="store_true",
                        help="also run each policy with per_ctx_token_s × (1 ± 1e-4)")
    parser.add_argument("--preset", default="qwen3-8b-h20", help="cost preset")
    args = parser.parse_args(argv)
    try:
        policies = policy_names(args.policies)
        eta = one_int("--eta", args.eta)
        int_in("--eta", eta, 0, MAX_STALENESS)
        seeds = seed_list("--seeds", args.seeds)
        batches = sim_limit("--batches", one_int("--batches", args.batches, 1))
        mult = number("--train-mult", args.train_mult, 1e-3, 1e3, open_low=True)
        conc = sim_limit("--concurrency", one_int("--concurrency", args.concurrency, 1))
        truncated = number("--truncated", args.truncated, 0.0, 1.0)
        rate = number("--filter-rate", args.filter_rate, 0.0, 0.95)
        cost = scaled(preset(args.preset), mult, conc)
    except (InputError, UnknownPolicy, CostError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in _report(policies, seeds, cost, eta=eta, batches=batches, truncated=truncated,
                        filter_rate=rate, perturb=args.perturb):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.diagnose")
