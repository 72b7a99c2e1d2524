"""What a run measured: throughput, waste, staleness composition, idle fractions, time per batch.

Token counts are *trajectory tokens* (prompt + response) throughout, so that trained tokens and
wasted tokens are in the same unit: effective throughput = trained trajectory tokens / wall time,
where wall time ends when the last requested batch's weights are published. L2 waste counts the
prompt and the response tokens decoded so far of trajectories aborted in flight (a trajectory
that never started costs nothing); L3 waste counts finished trajectories that were discarded.

With reward filtering on, tokens of groups that carry no gradient are not *effective*: a policy
that filters them counts them as ``waste_filtered_tokens`` (generated, never trained), one that
trains them anyway counts them as ``no_gradient_tokens`` (trained with zero advantage). Effective
throughput counts neither, so policies stay comparable whichever they do; without filtering it is
all trained tokens, as before.

Length bias (``runtime/lengthbias.py``): the response lengths of trained trajectories against
those of every *settled* admitted trajectory (trained, aborted, dropped or filtered; trajectories
still live when the run ends are left out, since their fate is unknown and they are the long
ones). An aborted trajectory counts with the full length it would have had: it is what the model
produced that training never saw. ``length_ratio`` < 1 means training saw shorter answers; below ``SHORT_BIAS`` the studies label a
policy's gain "short answers" (it gains by training shorter answers than it admits).

``steady_throughput`` leaves out the start-up transient: effective tokens of batches after the
first ``warmup`` (default: a fifth of the run) over the time between their publishes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from runtime.lengthbias import length_bias

from .core import Simulator
from .engine import Request

SHORT_BIAS = 0.97  # mean trained / admitted length below this: "gains by short answers"


@dataclass
class RunResult:
    """The summary of one run, JSON-ready (``to_json``)."""

    policy: str
    label: str
    eta: int | None  # the bound the policy enforces (None: no bound)
    grid_eta: int  # the eta this run was requested with (groups rows and bars)
    bounded: bool
    batches: int
    batch_size: int
    group_size: int
    wall_s: float
    tokens_trained: int
    throughput: float  # trained tokens / s
    waste_l2_tokens: float
    waste_l3_tokens: float
    waste_l2_rate: float  # tokens / s, for the stacked bars
    waste_l3_rate: float
    decoded_tokens: float  # response tokens every engine produced
    trainer_idle: float  # fraction of wall time the trainer waited for a batch
    rollout_idle: float  # fraction of slot-time with no running request (pauses included)
    rollout_paused: float  # fraction of wall time the engines were paused for weight syncs
    seconds_per_batch: float
    batch_seconds: list[float]  # publish-to-publish intervals
    staleness_counts: list[list[int]]  # per batch: trajectories with staleness 0, 1, 2, ...
    max_staleness: int
    batch_sizes: list[int]
    fates: dict[str, int]  # trajectories: admitted, trained, aborted, dropped, filtered, live_*
    events: int
    tokens_useful: int = 0  # trained tokens of groups that carry a gradient
    waste_filtered_tokens: float = 0.0  # finished groups without gradient, never trained
    no_gradient_tokens: float = 0.0  # trained tokens of groups without gradient
    steady_throughput: float = 0.0  # effective tokens / s after the warm-up batches
    warmup_batches: int = 0
    admission: dict = field(default_factory=dict)  # fractions of wall: paused/engine_full/...
    trained_response_mean: float = 0.0  # mean response length of trained trajectories
    aborted_response_mean: float = 0.0  # mean full response length of aborted trajectories
    length_ratio: float = 1.0  # mean trained / mean settled-admitted response length
    length_ks: float = 0.0  # KS distance between the two length distributions
    settings: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def _aborted_tokens(req: Request, response: float) -> float:
    """Trajectory tokens an aborted trajectory cost: nothing if it never started decoding."""
    return 0.0 if math.isnan(req.t_start) else req.prompt + response


def steady_throughput(sim: Simulator, warmup: int) -> float:
    """Effective tokens per second of batches ``warmup+1 .. n`` (publish to publish)."""
    batches = sim.ledger.batches[: sim.n_batches]
    if warmup <= 0 or warmup >= len(batches):
        start, chosen = 0.0, batches
    else:
        start, chosen = batches[warmup - 1].t_published, batches[warmup:]
    span = chosen[-1].t_published - start if chosen else 0.0
    return sum(b.useful_tokens for b in chosen) / span if span > 0 else 0.0


def summarize(sim: Simulator, warmup: int | None = None) -> RunResult:
    ledger, policy = sim.ledger, sim.policy
    wall = sim.now
    trained = {tid for b in ledger.batches for tid in b.tids}
    dropped = set(ledger.dropped)
    aborted = {tid for tid, _ in ledger.aborted}
    filtered = set(ledger.filtered)
    by_tid = {r.tid: r for r in ledger.requests}
    waste_l2 = sum(_aborted_tokens(by_tid[tid], tok) for tid, tok in ledger.aborted)
    waste_l3 = sum(by_tid[tid].prompt + by_tid[tid].length for tid in ledger.dropped)
    waste_f = sum(by_tid[tid].prompt + by_tid[tid].length for tid in ledger.filtered)
    live = {"live_queued": 0, "live_running": 0, "live_finished": 0}
    for r in ledger.requests:
        if r.tid in trained or r.tid in dropped or r.tid in aborted or r.tid in filtered:
            continue
        key = ("live_queued", "live_running", "live_finished", "live_aborted")[r.state]
        live[key] = live.get(key, 0) + 1
    fates = {"admitted": len(ledger.requests), "trained": len(trained),
             "aborted": len(aborted), "dropped": len(dropped), "filtered": len(filtered),
             **live}

    width = max((max(b.staleness) for b in ledger.batches if b.staleness), default=0) + 1
    counts = [np.bincount(np.maximum(b.staleness, 0), minlength=width).tolist()
              for b in ledger.batches]
    capacity = sum(i.capacity for i in sim.instances)
    slot_time = sum(i.slot_time for i in sim.instances)
    paused = sum(i.paused_time for i in sim.instances) / max(len(sim.instances), 1)
    published = [b.t_published for b in ledger.batches[: sim.n_batches]]
    intervals = np.diff([0.0] + published).tolist()
    tokens = sum(b.tokens for b in ledger.batches[: sim.n_batches])
    useful = sum(b.useful_tokens for b in ledger.batches[: sim.n_batches])
    if warmup is None:
        warmup = sim.n_batches // 5
    gate = {k: v / wall if wall else 0.0 for k, v in sim.gate_time.items()}
    trained_lens = [by_tid[t].length for t in trained]
    aborted_lens = [by_tid[t].length for t in aborted]
    settled = trained | aborted | dropped | filtered
    bias = length_bias(trained_lens, [by_tid[t].length for t in settled])
    return RunResult(
        policy=policy.name, label=policy.label,
        eta=policy.eta if (policy.bounded or policy.uses_eta) else None,
        grid_eta=policy.requested_eta, bounded=policy.bounded, batches=sim.n_batches,
        batch_size=sim.batch_size,
        group_size=sim.group_size, wall_s=wall, tokens_trained=int(tokens),
        throughput=useful / wall if wall else 0.0,
        waste_l2_tokens=float(waste_l2), waste_l3_tokens=float(waste_l3),
        waste_l2_rate=waste_l2 / wall if wall else 0.0,
        waste_l3_rate=waste_l3 / wall if wall else 0.0,
        decoded_tokens=float(sum(i.decoded for i in sim.instances)),
        trainer_idle=sim.trainer_idle_time / wall if wall else 0.0,
        rollout_idle=1.0 - slot_time / (capacity * wall) if wall else 0.0,
        rollout_paused=paused / wall if wall else 0.0,
        seconds_per_batch=wall / sim.n_batches,
        batch_seconds=intervals,
        staleness_counts=counts,
        max_staleness=max((max(b.staleness) for b in ledger.batches if b.staleness), default=0),
        batch_sizes=[len(b.tids) for b in ledger.batches],
        fates=fates, events=sim.events,
        tokens_useful=int(useful), waste_filtered_tokens=float(waste_f),
        no_gradient_tokens=float(tokens - useful),
        steady_throughput=steady_throughput(sim, warmup), warmup_batches=warmup,
        admission=gate,
        trained_response_mean=float(np.mean(trained_lens)) if trained_lens else 0.0,
        aborted_response_mean=float(np.mean(aborted_lens)) if aborted_lens else 0.0,
        length_ratio=bias.ratio if trained_lens else 1.0,
        length_ks=bias.ks if trained_lens else 0.0,
        settings=policy.settings(),
    )
