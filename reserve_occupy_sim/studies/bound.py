"""The clairvoyant limit: how fast any strictly bounded, drop-free policy can be in this simulator.

``clairvoyant_bound`` returns two numbers for one workload, cost model and eta, both measured like
``metrics.steady_throughput`` (effective tokens of the batches after the warm-up, over the time
between their publishes):

* ``upper_tok_s`` -- a provable upper bound, the smallest of four terms, each a lower bound on
  the time those batches take (the argument and its assumptions are written out in
  docs/sim/bound.md):

  - trainer: every step trains its batch and syncs; the time depends only on *which* groups are
    trained, not on how they are batched;
  - rollout: every trained trajectory is decoded, and each decode step costs at least
    ``max(F, a + b*k + c*ctx)`` with ``k <= concurrency``; prefill stalls the engine and the
    engines are paused during every sync;
  - staleness window: the longest trajectory trained at step ``j`` started decoding after the
    publish of version ``j - eta``, so ``eta + 1`` consecutive periods hold its decode (at least
    ``F`` per token), ``eta`` syncs, and step ``j``'s training and sync;
  - in-flight: a group trains within eta steps of starting, so while batch ``v`` is collected
    at most ``(eta+1)*B`` groups are started and untrained, and while it trains at most
    ``eta*B``; that caps the running requests per phase (``inflight_collect_time``). On the
    shipped setting at eta >= 1 the caps (256 and 128 requests) exceed the 80 engine slots, so
    this term equals the smaller of the trainer and rollout terms; it is kept as the proof that
    the concurrency lever gives nothing there.

  A streaming trainer (``cost.train.chunk_groups`` >= 1) restates two terms, and drops one:

  - trainer: a step whose chunks hold ``n_1 .. n_k`` trajectories costs
    ``sum_i share*W_i*(1 + (P-1)/mb(n_i)) + k*overhead + fixed + (1-share)*W*(1 + (P-1)/mb(B*G))``
    (``cost.TrainCost.chunk_time`` and ``finish_time``); every ``n_i <= B*G`` and ``k >= 1``, so
    it is at least ``W*(1 + (P-1)/mb(B*G)) + overhead + fixed``, again independent of the
    batching (``_train_time``);
  - window: the slowest group of step ``j`` still starts decoding after the publish of version
    ``j - eta``, but the trainer no longer waits for it to start step ``j``: the earlier chunks
    train while it decodes. What cannot overlap it is the chunk that holds it (at least one
    chunk overhead) and the end of the step (the optimizer step and the part of the work a
    chunk does not run, ``fixed + (1-share)*W_j*(1 + bubble)``), then the sync. So the
    ``eta + 1`` periods hold the straggler's decode, ``eta + 1`` syncs and this *tail* instead
    of step ``j``'s whole training (``_tail_time``); with ``share = 1`` the tail is
    ``overhead + fixed`` per step, whatever the tokens;
  - in-flight: its phases assume the trainer idles while a batch is collected, which a
    streaming trainer does not, so it is not restated and not used (reported as infinite).

  The groups are the window's own (admission order ``warmup*B .. batches*B``): a drop-free policy
  trains every admitted group within eta steps of its admission, so over a long run these are
  the groups it trains; the bound is on the long-run rate (see the docs for the end effects).

* ``schedule_tok_s`` -- the best strictly bounded, drop-free schedule we could construct, run
  through the simulator itself: the clairvoyant EDF policy (``policies/clairvoyant.py``) in a few
  variants, and the bounded policies that train every group (Reserve–Occupy, NeMo-RL in_order
  and weight_fifo, synchronous), on the cost model's trainer (with a streaming one,
  Reserve–Occupy streams and NeMo-RL's samplers take chunks; the others hand each batch as one
  chunk). Each run must pass ``checks.check_run`` and ``check_drop_free``.
  It is a lower bound on the optimum, so the optimum lies in ``[schedule_tok_s, upper_tok_s]``.

``python -m reserve_occupy_sim.studies.bound`` prints both, and every policy as a fraction of the
bound.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from reserve_occupy.config import MAX_STALENESS

from runtime.inputs import InputError, int_in, int_list, one_int, output_dir, seed_list, sim_limit
from reserve_occupy_peers import make_policy

from ..model.checks import CheckFailed, check_run
from ..model.core import Simulator
from ..model.cost import CostError, CostModel, preset
from ..model.metrics import steady_throughput
from ..model.workload import Workload, generate

# Strictly bounded policies that never drop, abort or filter (without reward filtering), so each
# run is a valid schedule of the class the bound is about.
SCHEDULE_CANDIDATES: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = (
    ("clairvoyant", (("fill", "long"),)),
    ("clairvoyant", (("fill", "short"),)),
    ("clairvoyant", (("fill", "fifo"),)),
    ("clairvoyant", (("fill", "fifo"), ("max_running", 40))),
    ("clairvoyant", (("fill", "fifo"), ("max_running", 56))),
    ("clairvoyant", (("fill", "long"), ("start", "longest"))),
    ("clairvoyant", (("fill", "fifo"), ("start", "longest"))),
    ("reserve_occupy", ()),
    ("nemo_in_order", ()),
    ("nemo_weight_fifo", ()),
    ("synchronous", ()),
)


@dataclass(frozen=True)
class Bound:
    """The limit for one (workload, cost, eta, batch size, horizon)."""

    eta: int
    upper_tok_s: float  # provable upper bound on steady-state effective throughput
    schedule_tok_s: float  # best strictly bounded drop-free schedule run in the simulator
    notes: str  # which term binds, and which schedule won
    trainer_tok_s: float = math.inf
    rollout_tok_s: float = math.inf
    window_tok_s: float = math.inf
    inflight_tok_s: float = math.inf  # the staleness in-flight limit, per phase
    schedule_policy: str = ""  # the winning schedule, with its options
    schedule_max_staleness: int = 0
    batches: int = 0
    warmup: int = 0


class BoundError(ValueError):
    """Bad arguments to the bound (names the argument)."""


def window_groups(workload: Workload, batch_size: int, batches: int, warmup: int) -> list:
    """The groups a drop-free policy trains in the steady-state window, in admission order."""
    n = len(workload.groups)
    return [workload.groups[i % n] for i in range(warmup * batch_size, batches * batch_size)]


def _work(groups: list, cost: CostModel) -> float:
    """``per_token * tokens + per_token_sq * sum(L^2)`` over every trajectory of ``groups``."""
    t = cost.train
    tokens = squares = 0.0
    for g in groups:
        for r in g.response_lens:
            n = g.prompt_len + r
            tokens += n
            squares += n * n
    return t.per_token_s * tokens + t.per_token_sq_s * squares


def _batch_bubble(cost: CostModel, batch_size: int, group_size: int) -> float:
    t = cost.train
    microbatches = max(1, math.ceil(batch_size * group_size / t.microbatch_size))
    return 1.0 + (t.pipeline_stages - 1) / microbatches


def _train_time(groups: list, cost: CostModel, steps: int, batch_size: int,
                group_size: int) -> float:
    """Total training time (without syncs) of ``steps`` batches holding exactly ``groups``; for a
    streaming trainer, a lower bound on it (see the module docstring).

    ``TrainCost.batch_time`` is linear in the trajectories' lengths and squares, and its bubble
    factor depends only on the batch's trajectory count, so the sum over any batching of the same
    groups is this closed form."""
    t = cost.train
    bubble = _batch_bubble(cost, batch_size, group_size)
    if t.streaming:
        return bubble * _work(groups, cost) + steps * (t.chunk_overhead_s + t.fixed_s)
    tokens = squares = 0.0
    for g in groups:
        for r in g.response_lens:
            n = g.prompt_len + r
            tokens += n
            squares += n * n
    return bubble * (steps * t.fixed_s + t.per_token_s * tokens + t.per_token_sq_s * squares)


def _tail_time(groups: list, cost: CostModel, steps: int, batch_size: int,
               group_size: int) -> float:
    """Summed over the steps, what a step's training must spend after its last group finished:
    the whole training for the whole-batch trainer; for a streaming one, one chunk overhead,
    the fixed cost and the share of the work no chunk runs (see the module docstring)."""
    t = cost.train
    if not t.streaming:
        return _train_time(groups, cost, steps, batch_size, group_size)
    rest = (1.0 - t.chunk_share) * _batch_bubble(cost, batch_size, group_size) \
        * _work(groups, cost)
    return rest + steps * (t.chunk_overhead_s + t.fixed_s)


def rollout_busy(groups: list, cost: CostModel) -> float:
    """A lower bound on the engine-seconds (summed over instances, pauses excluded) needed to
    prefill and decode every trajectory of ``groups``, whatever the placement and timing.

    Per instance the decode steps cost ``sum_s max(F, a + b*k_s + c*ctx_s)`` over its progress;
    that is at least both ``F*X`` and ``a*X + b*R + c*Q`` (``X`` steps, ``R = sum k_s`` tokens,
    ``Q = sum_s ctx_s = sum_i (P_i*L_i + L_i^2/2)`` in the engine's continuous progress), and
    ``X >= R / concurrency``. Summing the two over instances keeps both lower bounds. Each join
    stalls its instance ``prefill_per_token * prompt`` seconds with no decode progress."""
    r = cost.rollout
    R, Q, prompts = _context_sums(groups)
    steps = R / cost.concurrency
    decode = max(r.floor_s * steps, r.step_s * steps + r.per_request_s * R + r.per_ctx_token_s * Q)
    return decode + r.prefill_per_token_s * prompts


def _context_sums(groups: list) -> tuple[float, float, float]:
    """Response tokens ``R``, context sum ``Q = sum_i (P_i*L_i + L_i^2/2)`` and prompt tokens."""
    R = Q = prompts = 0.0
    for g in groups:
        for L in g.response_lens:
            R += L
            Q += g.prompt_len * L + 0.5 * L * L
            prompts += g.prompt_len
    return R, Q, prompts


def inflight_collect_time(groups: list, cost: CostModel, *, eta: int, batch_size: int,
                          group_size: int, train: float,
                          decode_while_training: bool = True) -> float:
    """A lower bound on the total *collection* time ``sum_v (C_v - T_v)`` (publish to the next
    take, the trainer idle) of any strictly bounded drop-free schedule of ``groups``, from the
    staleness in-flight limit.

    A group that started decoding at version ``v`` trains at a step in ``v .. v+eta``. So at a
    time in ``[T_v, C_v)`` the started, not yet taken groups go to batches ``v .. v+eta``: at most
    ``(eta+1)*B`` of them, ``K_c = (eta+1)*B*G`` running requests; in ``[C_v, T_{v+1})`` (batch
    ``v`` training, then the sync) batch ``v`` is taken, so at most ``eta*B`` groups,
    ``K_t = eta*B*G`` requests. Per instance a step runs ``k <= kappa = min(C, K)`` requests and
    costs ``max(F, a + b*k + c*ctx) >= (a/kappa + b)*k + c*ctx`` and ``>= F*k/kappa``; all
    instances together decode at most ``K/F`` tokens a second. Decoding during training is done
    in at most ``I * sum(train)`` engine-seconds (the sync pauses the engines); the rest of the
    ``R`` tokens and ``Q`` context must be decoded during collection, ``I`` engines for ``A``
    seconds, and every join stalls its engine for the prompt's prefill. The split of tokens
    ``x`` and context between the phases is the schedule's choice: this returns the smallest
    ``A`` over all splits (an exact minimum of a convex piecewise-linear function of ``x``, the
    context in the training phases taken as large as the training time allows).

    ``decode_while_training=False`` is *not* a bound: it pretends nothing decodes while a batch
    trains (``K_t = 0`` at every eta); the tests show bounded policies beat it."""
    r, I, C = cost.rollout, cost.instances, cost.concurrency
    a, b, c, F = r.step_s, r.per_request_s, r.per_ctx_token_s, r.floor_s
    R, Q, prompts = _context_sums(groups)
    prefill = r.prefill_per_token_s * prompts
    K_c, K_t = (eta + 1) * batch_size * group_size, eta * batch_size * group_size
    if not decode_while_training:
        K_t = 0
    kappa_c, kappa_t = min(C, K_c), min(C, K_t)
    u_c = a / kappa_c + b  # seconds of engine time per token, besides context, in collection
    S = train

    def need(x: float, q: float) -> float:
        """Collection time needed when the training phases decode ``x`` tokens and ``q`` of the
        context."""
        u_t = a / kappa_t + b if kappa_t else 0.0
        return max(0.0,
                   (u_c * (R - x) + u_t * x + c * Q + prefill) / I - S,  # all engine time
                   (u_c * (R - x) + c * (Q - q)) / I,  # collection engine time
                   F * (R - x) / (kappa_c * I),  # steps of at most kappa_c requests
                   F * (R - x) / K_c)  # K_c requests in flight decode <= K_c/F tokens/s

    if kappa_t == 0:  # eta = 0: nothing decodes while the batch trains
        return need(0.0, 0.0)
    u_t = a / kappa_t + b
    x_max = min(R, I * S / u_t, I * S * kappa_t / F, K_t * S / F)

    def q_of(x: float) -> float:  # the most context the training phases can hold beside x
        return min(Q, max(0.0, (I * S - u_t * x) / c)) if c > 0 else Q

    def collect(x: float) -> float:
        return need(x, q_of(x))

    # collect(x) is convex and piecewise linear: its minimum lies at an end, at the kink of
    # q_of, or where two of its linear pieces cross.
    points = {0.0, x_max}
    if c > 0 and 0.0 < (I * S - c * Q) / u_t < x_max:
        points.add((I * S - c * Q) / u_t)
    edges = sorted(points)
    pieces = (lambda x: (u_c * (R - x) + u_t * x + c * Q + prefill) / I - S,
              lambda x: (u_c * (R - x) + c * (Q - q_of(x))) / I,
              lambda x: F * (R - x) / (kappa_c * I),
              lambda x: F * (R - x) / K_c,
              lambda x: 0.0)
    for lo, hi in zip(edges, edges[1:]):
        lines = [((f(hi) - f(lo)) / (hi - lo), f(lo)) for f in pieces]
        for i, (s1, y1) in enumerate(lines):
            for s2, y2 in lines[i + 1:]:
                if s1 != s2:
                    x = lo + (y2 - y1) / (s1 - s2)
                    if lo < x < hi:
                        points.add(x)
    return min(collect(x) for x in points)


def straggler_time(group, cost: CostModel) -> float:
    """A lower bound on the seconds from a group's first join to its last member finishing: its
    longest member's own prefill stall, then ``L`` decode steps, each at least
    ``max(F, a + b + c*(P + x))`` (at least itself running, with its own context)."""
    r = cost.rollout
    L, P = max(group.response_lens), group.prompt_len
    floor, alpha, beta = (r.floor_s, r.step_s + r.per_request_s + r.per_ctx_token_s * P,
                          r.per_ctx_token_s)
    if alpha >= floor:
        decode = alpha * L + 0.5 * beta * L * L
    else:
        x0 = (floor - alpha) / beta if beta > 0 else math.inf  # where the line crosses F
        if L <= x0:
            decode = floor * L
        else:
            decode = floor * x0 + alpha * (L - x0) + 0.5 * beta * (L * L - x0 * x0)
    return r.prefill_per_token_s * P + decode


def bound_terms(groups: list, cost: CostModel, *, eta: int, batch_size: int,
                group_size: int) -> dict[str, float]:
    """The four throughput bounds (tokens/s) for training ``groups`` in ``len(groups) /
    batch_size`` steps at staleness <= eta (see the module docstring and the docs)."""
    steps = len(groups) // batch_size
    if steps < 1 or steps * batch_size != len(groups):
        raise BoundError(f"groups: need a whole number >= 1 of batches of {batch_size}, "
                         f"got {len(groups)} groups")
    sync = cost.train.sync_s
    tokens = float(sum(g.prompt_len * group_size + sum(g.response_lens) for g in groups))
    train = _train_time(groups, cost, steps, batch_size, group_size)
    t_trainer = train + steps * sync
    busy = rollout_busy(groups, cost) / cost.instances
    t_rollout = steps * sync + busy
    # Each step's window of eta + 1 periods holds its slowest group's decode and all of its own
    # rollout work. Summed over steps: the sum over any batching of the per-step maximum
    # straggler is at least the sum of every B-th largest, and the per-step work adds up to at
    # least the work of all groups (rollout_busy is superadditive).
    d = sorted((straggler_time(g, cost) for g in groups), reverse=True)
    stragglers = sum(d[k * batch_size] for k in range(steps))
    tail = _tail_time(groups, cost, steps, batch_size, group_size)
    t_window = (max(stragglers, busy) + tail + steps * (eta + 1) * sync) / (eta + 1)
    if cost.train.streaming:  # its phases do not hold for a streaming trainer (docstring)
        inflight = math.inf
    else:
        collect = inflight_collect_time(groups, cost, eta=eta, batch_size=batch_size,
                                        group_size=group_size, train=train)
        inflight = tokens / (collect + train + steps * sync)
    return {"trainer": tokens / t_trainer, "rollout": tokens / t_rollout,
            "window": tokens / t_window, "inflight": inflight}


def check_drop_free(sim: Simulator, eta: int) -> None:
    """Every admitted group whose deadline (the version it started decoding at + eta) fell within
    the run was trained: nothing was dropped, aborted, filtered or left behind."""
    ledger = sim.ledger
    if ledger.aborted or ledger.dropped or ledger.filtered:
        raise CheckFailed("drop_free", f"{len(ledger.aborted)} aborted, {len(ledger.dropped)} "
                                       f"dropped, {len(ledger.filtered)} filtered trajectories")
    trained = {tid for b in ledger.batches for tid in b.tids}
    last = len(ledger.batches) - 1
    for g in sim.groups:
        started = g.v_gen >= 0
        if started and g.v_gen + eta <= last and g.requests[0].tid not in trained:
            raise CheckFailed("drop_free", f"group {g.gid} started at version {g.v_gen} was not "
                                           f"trained by step {g.v_gen + eta}")


def run_schedule(workload: Workload, cost: CostModel, policy: str, options: tuple, *,
                 eta: int, batch_size: int, batches: int, warmup: int) -> tuple[float, Simulator]:
    """Run one candidate schedule, verify it is strictly bounded and drop-free, and return its
    steady-state throughput."""
    if cost.train.streaming and policy == "reserve_occupy":
        options = tuple(options) + (("streaming", True),)
    pol = make_policy(policy, eta, **dict(options))
    sim = Simulator(pol, workload, cost, batches=batches, batch_size=batch_size).run()
    check_run(sim)
    check_drop_free(sim, pol.eta)
    return steady_throughput(sim, warmup), sim


def _label(policy: str, options: tuple) -> str:
    return policy + "".join(f" {k}={v}" for k, v in options)


def clairvoyant_bound(workload, cost, *, eta: int, batch_size: int, batches: int,
                      warmup: int | None = None) -> Bound:
    """The upper bound and the best constructed schedule for strictly bounded, drop-free policies
    (see the module docstring). ``warmup`` defaults to a fifth of ``batches``, as in
    ``metrics.summarize``."""
    if isinstance(eta, bool) or not isinstance(eta, int) or eta < 0:
        raise BoundError(f"eta: must be an int >= 0, got {eta!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BoundError(f"batch_size: must be an int >= 1, got {batch_size!r}")
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise BoundError(f"batches: must be an int >= 1, got {batches!r}")
    if warmup is None:
        warmup = batches // 5
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise BoundError(f"warmup: must be an int >= 0, got {warmup!r}")
    first = warmup if 0 < warmup < batches else 0  # as steady_throughput
    groups = window_groups(workload, batch_size, batches, first)
    terms = bound_terms(groups, cost, eta=eta, batch_size=batch_size,
                        group_size=workload.group_size)
    binding = min(terms, key=terms.get)
    best, best_label, best_stale = -1.0, "", 0
    for policy, options in SCHEDULE_CANDIDATES:
        tok_s, sim = run_schedule(workload, cost, policy, options, eta=eta,
                                  batch_size=batch_size, batches=batches, warmup=warmup)
        if tok_s > best:
            best, best_label = tok_s, _label(policy, options)
            best_stale = max((max(b.staleness) for b in sim.ledger.batches), default=0)
    notes = (f"binding: {binding} ({terms[binding]:.0f} tok/s; trainer {terms['trainer']:.0f}, "
             f"rollout {terms['rollout']:.0f}, window {terms['window']:.0f}, inflight "
             f"{terms['inflight']:.0f}); best schedule: "
             f"{best_label}")
    return Bound(eta=eta, upper_tok_s=terms[binding], schedule_tok_s=best, notes=notes,
                 trainer_tok_s=terms["trainer"], rollout_tok_s=terms["rollout"],
                 window_tok_s=terms["window"], inflight_tok_s=terms["inflight"],
                 schedule_policy=best_label,
                 schedule_max_staleness=best_stale, batches=batches, warmup=warmup)


# --------------------------------------------------------------------------- the table ------

TABLE_POLICIES = ("reserve_occupy", "nemo_in_order", "nemo_weight_fifo", "verl_drop", "trl",
                  "roll", "areal", "synchronous", "unbounded")


def table_rows(seeds: list[int], etas: list[int], *, cost: CostModel, batches: int,
               batch_size: int) -> list[dict]:
    """The table's numbers, one dict per eta: the bound (``upper``), its binding terms, the
    best schedule as a fraction of the bound (``schedule``), and per policy of
    ``TABLE_POLICIES`` its steady-state throughput as a fraction of its own seed's bound
    (``frac``: one per seed) and the largest staleness it trained (``stale``)."""
    from ..model.runner import RunSpec, simulate

    out = []
    for eta in etas:
        ups, scheds, frac = [], [], {p: [] for p in TABLE_POLICIES}
        stale = {p: 0 for p in TABLE_POLICIES}
        binding = set()
        for seed in seeds:
            wl = generate(seed)
            b = clairvoyant_bound(wl, cost, eta=eta, batch_size=batch_size, batches=batches)
            ups.append(b.upper_tok_s)
            scheds.append(b.schedule_tok_s / b.upper_tok_s)
            binding.add(b.notes.split(" ", 2)[1])
            for p in TABLE_POLICIES:
                res, _ = simulate(RunSpec(p, eta, batches, batch_size=batch_size), wl, cost)
                frac[p].append(res.steady_throughput / b.upper_tok_s)
                stale[p] = max(stale[p], res.max_staleness)
        out.append({"eta": eta, "upper": ups, "binding": sorted(binding), "schedule": scheds,
                    "frac": frac, "stale": stale})
    return out


def render_table(rows: list[dict]) -> list[str]:
    """Markdown lines of ``table_rows``: per eta, the bound and every policy as a fraction of
    it, mean over seeds, the largest staleness trained in parentheses."""
    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    lines = ["| η | upper bound tok/s | binding term | best schedule tok/s (÷ bound) | "
             + " | ".join(TABLE_POLICIES) + " |",
             "|---|---|---|---|" + "---|" * len(TABLE_POLICIES)]
    for r in rows:
        ups, scheds = r["upper"], r["schedule"]
        cells = [f"{mean(r['frac'][p]):.2f} ({r['stale'][p]})" for p in TABLE_POLICIES]
        lines.append(f"| {r['eta']} | {mean(ups):.0f} | {'/'.join(r['binding'])} | "
                     f"{mean(scheds) * mean(ups):.0f} ({mean(scheds):.2f}) | "
                     + " | ".join(cells) + " |")
    return lines


def table(seeds: list[int], etas: list[int], *, cost: CostModel, batches: int,
          batch_size: int) -> list[str]:
    """Markdown lines: per eta, the bound and every policy as a fraction of it, mean over seeds
    (each policy's steady-state throughput divided by its own seed's bound): ``table_rows``
    computed, ``render_table`` written."""
    return render_table(table_rows(seeds, etas, cost=cost, batches=batches,
                                   batch_size=batch_size))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reserve_occupy_sim.studies.bound",
        description="The clairvoyant limit per eta: the provable upper bound on steady-state "
                    "throughput of strictly bounded drop-free policies, the best schedule "
                    "constructed, and every policy as a fraction of the bound (cells: mean "
                    "fraction over seeds, max staleness trained in parentheses).")
    parser.add_argument("--seeds", default="0,1,2", help="workload seeds (default 0,1,2)")
    parser.add_argument("--eta", default="1,2,3", help="eta values (default 1,2,3)")
    parser.add_argument("--batches", default="40", help="batches per run (default 40)")
    parser.add_argument("--batch-size", default="16", help="groups per batch (default 16)")
    parser.add_argument("--preset", default="qwen3-8b-h20", help="cost preset")
    parser.add_argument("--results-dir", default=None,
                        help="also write the table as the 'bound' section of DIR/tables.md "
                             "(docs/results: and into the docs pages that show it; make "
                             "sim-bound does this)")
    args = parser.parse_args(argv)
    try:
        seeds = seed_list("--seeds", args.seeds)
        etas = int_list("--eta", args.eta)
        int_in("--eta", max(etas), 0, MAX_STALENESS)
        batches = sim_limit("--batches", one_int("--batches", args.batches, 1))
        batch_size = sim_limit("--batch-size", one_int("--batch-size", args.batch_size, 1))
        cost = preset(args.preset)
        from .pages import TABLES

        results = None if args.results_dir is None else \
            output_dir(args.results_dir, "--results-dir",  # before the runs, not after them
                       files=(TABLES,))  # rewritten in place: not a link, not a fifo
    except (InputError, BoundError, CostError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lines = []
    for line in table(seeds, etas, cost=cost, batches=batches, batch_size=batch_size):
        print(line, flush=True)
        lines.append(line)
    if results is not None:
        from . import pages
        from .report import merge_tables

        merge_tables(results / pages.TABLES, {"bound": "\n".join(lines)})
        print(f"wrote the 'bound' section of {results / pages.TABLES}")
        for page in pages.update(pages.fed_by(pages.TABLES), results):  # docs/results only
            print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.bound")
