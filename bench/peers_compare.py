"""Every staleness rule the runtime drives (``staleness.policy``) on the real vLLM CPU engine,
on a long-tail workload, side by side in one process: ``make bench-peers``.

The grid: each policy x trainer streaming off/on x ``rollout.refit`` abort/keep x eta, per
seed. Streaming on runs for the rules that stream: ``reserve_occupy`` and the peers whose
simulator policy streams (``runtime.peers.peer_streams``: ``nemo_in_order``,
``nemo_weight_fifo``, ``unbounded``); the runtime refuses ``trainer.streaming`` with the others.
Every row shows its ratio to the reference of the same seed and eta, ``nemo_in_order``
whole-batch with ``keep`` (in-flight refit; ``REF``), and, when the grid ran it, to NeMo-RL as
shipped, ``nemo_in_order`` streaming with ``keep`` (``SHIPPED``; ``ratio_shipped``).

Workload. The runtime gives one ``rollout.max_tokens`` to every request, so the long tail is
made here, in the bench, with no runtime option: ``LongTail`` wraps the engine and gives each
candidate (a unit's sample, the same one across its resumed segments) its own length cap, drawn
from a lognormal (median ``--median`` tokens, sigma ``--sigma``, at most ``rollout.max_tokens``),
seeded by (seed, unit, candidate), with ``rollout.ignore_eos`` so every answer runs to its cap.
The same seed gives every policy the same lengths for the same unit ids. A resumed segment
(``refit: abort`` ends running requests; the driver resumes them) keeps its candidate's cap.
The evaluation requests are not capped (``rollout.max_tokens``). ``--workload`` picks the
shape and the lognormal (``WORKLOADS``): ``bench``, the first one (4 groups of 4, median 12,
sigma 1), or ``separating`` (12 groups of 4, median 8, sigma 1.5, 8 steps), the one
bench/workload_predict.py's simulation chose (docs/peers.md, "The workload"; a prediction).
The results file and the table carry the workload and its per-seed answer-length quantiles
(``length_quantiles``), and per row the trainer's wait and its part attributable to a
straggler (``straggler_wait``). ``--headline`` runs only the headline comparisons
(``headline()``): ``make bench-peers``.

The filtering workload (``--workload filtering``, docs/peers.md "The filtering workload"):
DAPO-style dynamic sampling. A seeded share (``--no-gradient``) of the prompts scores every
answer 0.0 (``NoGradientReward``), so their groups carry no gradient; the rules handle such a
group as their source does: Reserve-Occupy and verl filter it (the runtime's
``staleness.filter_zero_variance``: Reserve-Occupy's driver drops it before ``occupy``; verl's
rule gets it placed and marked and evicts it, refilling 1:1, at its trainer's next sample, as
verl does: ``runtime.peers``, ``occupy_no_gradient``), NeMo-RL as shipped trains it with zero
advantage (``TRAINS_NO_GRADIENT``: its runs have the filter off). A row records when its rule
filtered (``no_gradient_at``: ``"finish"`` or ``"sample"``); a results file whose rows lack it
ran before the runtime gave verl its own timing (its verl refilled when the group finished).
Every ratio is of *useful* trained tok/s (the tokens of the trained groups that carry a
gradient). ``--headline`` runs its comparisons (``filtering_headline()``); ``--write`` writes
docs/results/peers_filtering.json and its own table: ``make bench-peers-filtering``.

Task. The shipped arithmetic prompts on the tiny model; the reward is the fraction of the digit
1 in the answer (length-free, so it does not itself pay a long or a short answer, and it varies
inside every group, so every step moves the weights). Held-out evaluation: the last
``run.eval_prompts`` prompts, never trained on (``run.eval_holdout``), scored before and after.

Per run: generated tokens/s, trained tokens/s (tokens trained / wall time), steps/s, trained
staleness (max, mean over trained units), units dropped (units aborted by the rule or the run,
not those in flight at the end), wasted tokens (the tokens of those units' samples), length bias
(mean trained / mean admitted length), trainer idle (fraction of the wall time), eval reward
before / after and reward gained per wall-clock minute. The runs of a seed and eta follow each
other in the grid's order, seeds in turn, so load drifts across the grid; each run is short.
``--write`` stores docs/results/peers_compare.json and the table of docs/peers.md (means over the
seeds; ratios are the mean of each seed's ratio to its own reference).

    python bench/peers_compare.py --seeds 0 --etas 1,2 --steps 6 --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from refit_compare import SETTINGS as REFIT_SETTINGS  # noqa: E402  (configures vLLM's env)
from refit_compare import _g  # noqa: E402

import instrument  # noqa: E402
from bench.cli import Parser, float_in, int_in, read_json  # noqa: E402

from runtime.peers import POLICY_CHOICES, RESERVE_OCCUPY, peer_streams  # noqa: E402
from reserve_occupy_peers import PEERS_2026  # noqa: E402

# The default grid: the rules the published table measured (issue 38's rules are run when named)
DEFAULT_POLICIES = tuple(p for p in POLICY_CHOICES if p not in {c.name for c in PEERS_2026})

REF = ("nemo_in_order", False, "keep")  # (policy, streaming, refit) every row is compared to
SHIPPED = ("nemo_in_order", True, "keep")  # NeMo-RL as shipped: each row's second ratio
REFITS = ("abort", "keep")
SETTINGS = {**{k: v for k, v in REFIT_SETTINGS.items() if k not in ("run.seed",
                                                                    "run.eval_prompts")},
            "rollout.max_tokens": 96, "run.eval_prompts": 16, "run.eval_holdout": True,
            "run.eval_samples": 4, "run.trace": True}
MEDIAN, SIGMA = 12.0, 1.0
# The workloads ``--workload`` names (docs/peers.md, "The workload"): groups per step
# (staleness.batch_size), samples per group (staleness.group_size), the lognormal's median and
# sigma, and the steps of a run. "bench": the grid's first workload, on which Reserve-Occupy
# and nemo_in_order trained exactly the same units (issue 37), kept for the provenance of the
# tables it made. "separating": the one the simulator, with the cost terms calibrate fitted to
# this engine, predicts separates the rules most evenly on every headline comparison
# (bench/workload_predict.py; 32 groups of 2 put 128 slots at eta 1 before an engine of 64).
WORKLOADS = {
    "bench": {"batch_size": 4, "group_size": 4, "median": MEDIAN, "sigma": SIGMA, "steps": 6},
    "separating": {"batch_size": 12, "group_size": 4, "median": 8.0, "sigma": 1.5,
                   "steps": 8},
    # "filtering": DAPO-style reward filtering (docs/peers.md, "The filtering workload"): a
    # seeded share ``no_gradient`` of the prompts gets one reward for every answer, so its
    # groups carry no gradient (``NoGradientReward``); the shape, lognormal and share are the
    # ones bench/workload_predict.py --filtering predicts separate the filtering comparisons
    "filtering": {"batch_size": 16, "group_size": 4, "median": 8.0, "sigma": 1.5,
                  "steps": 6, "no_gradient": 0.2},
}
SHAPE = (SETTINGS["staleness.batch_size"], SETTINGS["staleness.group_size"])
QUANTILES = (0.5, 0.9, 0.99)

DOC = ROOT / "docs" / "peers.md"
RESULTS = ROOT / "docs" / "results" / "peers_compare.json"
BEGIN, END = "<!-- begin: peers-compare (generated) -->", "<!-- end: peers-compare -->"
# ``--ranking``'s results and its table's markers in docs/peers.md ("The ranking")
RANKING_RESULTS = ROOT / "docs" / "results" / "peers_ranking.json"
RANKING_BEGIN = "<!-- begin: peers-ranking (generated) -->"
RANKING_END = "<!-- end: peers-ranking -->"
# The ranking's rules (issue 37, item 3), each at its best settings on this engine: the ones
# that stream with the trainer streaming (NeMo-RL's ``_train_pump``; ``unbounded``), the others
# whole batch; every one ``refit: keep`` (in-flight refit; the rules' decisions do not change
# with it, and abort only loses work: the ranking's keep-against-abort row measures it)
RANKED = (("nemo_in_order", False), ("nemo_in_order", True), ("nemo_weight_fifo", True),
          ("verl_drop", False), ("areal", False), ("synchronous", False), ("unbounded", True))
# The filtering workload's results and its table's markers in docs/peers.md ("The filtering
# workload")
FILTERING_RESULTS = ROOT / "docs" / "results" / "peers_filtering.json"
FILTERING_BEGIN = "<!-- begin: peers-filtering (generated) -->"
FILTERING_END = "<!-- end: peers-filtering -->"
# The rules whose source trains a group without gradient rather than filtering it
# (docs/sim/filtering.md, "What each framework does"): NeMo-RL's asynchronous GRPO
# (``async_grpo_train``, ``_advantage_stage``) trains every selected group. On the filtering
# workload they run as shipped, with ``staleness.filter_zero_variance`` false; every other rule
# with the runtime's filter (Reserve-Occupy's ``filter``, verl's evict-and-refill 1:1, ...)
TRAINS_NO_GRADIENT = frozenset({"nemo_in_order", "nemo_weight_fifo"})


def ones_fraction(prompt: Any, completion: str) -> float:
    return completion.count("1") / max(1, len(completion))


class NoGradientReward:
    """The filtering workload's reward: a seeded share ``rate`` of the prompts carries no
    gradient, and every answer to one of them is scored 0.0 (all wrong: the hard prompts of
    DAPO's dynamic sampling), so its group's rewards are all equal; every other answer is scored
    ``ones_fraction``. Whether a prompt is one of them is a Bernoulli(``rate``) draw seeded by
    (``seed``, the prompt's position in its data file, ``Prompt.index``): the same for every run
    of a seed, whatever the rule, and since every rule draws the same prompt for the same unit
    (``draw_positions``), a pair's two runs see the same groups without gradient. Per prompt,
    not per unit: a prompt's difficulty is the prompt's, so a prompt drawn again in a later
    epoch is again without gradient (84 training prompts; a 16-step run draws about four
    epochs)."""

    def __init__(self, seed: int, rate: float) -> None:
        if isinstance(rate, bool) or not (isinstance(rate, (int, float))
                                          and math.isfinite(rate) and 0.0 <= rate < 1.0):
            raise ValueError(f"the no-gradient share must be a number in [0, 1) (got {rate!r})")
        self.seed, self.rate = seed, float(rate)

    def no_gradient(self, prompt: Any) -> bool:
        return random.Random(f"{self.seed}:no-gradient:{prompt.index}").random() < self.rate

    def __call__(self, prompt: Any, completion: str) -> float:
        return 0.0 if self.no_gradient(prompt) else ones_fraction(prompt, completion)


def train_prompts() -> list[Any]:
    """The prompts the bench's runs train on: the shipped arithmetic prompts less the last
    ``run.eval_prompts`` (``run.eval_holdout``), as ``run_training`` splits them."""
    from runtime.data import load_prompts
    from runtime.session import split_prompts

    return split_prompts(load_prompts(), SETTINGS["run.eval_prompts"],
                         SETTINGS["run.eval_holdout"])[0]


def draw_positions(seed: int, size: int, n: int) -> list[int]:
    """The positions, in a run's ``size`` training prompts, of the prompts of a fresh run's
    first ``n`` units (``g0``, ``g1``, ...: unit ``g{k}`` is draw ``k``), as the driver draws
    them (``Driver._next_prompt``: each epoch of ``size`` draws is a shuffle of the positions
    seeded by ``seed * 7919 + epoch``, taken from its end). The same for every rule; the
    simulator's prediction of the filtering workload uses it to give each group the outcome of
    its unit's prompt. tests/runtime/test_peers_filtering.py checks it against a real run's
    ``reserve`` records."""
    out: list[int] = []
    order: list[int] = []
    for k in range(n):
        epoch, i = divmod(k, size)
        if i == 0:
            order = list(range(size))
            random.Random(seed * 7919 + epoch).shuffle(order)
        out.append(order[size - 1 - i])
    return out


def no_gradient_share(seed: int, rate: float, prompts: list[Any]) -> float:
    """The share of ``prompts`` whose groups carry no gradient in a run of ``seed``."""
    reward = NoGradientReward(seed, rate)
    return sum(reward.no_gradient(p) for p in prompts) / len(prompts) if prompts else 0.0


def filters(policy: str, rate: float) -> bool:
    """``staleness.filter_zero_variance`` of a run of ``policy``: the runtime's filter (on), but
    on a workload with groups without gradient (``rate`` > 0) off for the rules whose source
    trains them (``TRAINS_NO_GRADIENT``: NeMo-RL as shipped)."""
    return not (rate > 0 and policy in TRAINS_NO_GRADIENT)


def useful_rows(metrics: list[dict[str, Any]], events: list[dict[str, Any]],
                lengths: dict[Any, dict[str, Any]], no_grad: set[str]
                ) -> tuple[list[dict[str, Any]], int]:
    """A run's ``metrics.jsonl`` rows (in step order), each with ``tokens_useful``: its
    cumulative ``tokens_trained`` less the committed tokens (``lengths.jsonl``) of the units of
    ``no_grad`` (the groups without gradient) consumed up to its step (the k-th ``consume`` of
    ``events.jsonl`` is the k-th step); and how many such units were trained. A run that
    filters them trains none: its ``tokens_useful`` is its ``tokens_trained``."""
    rows = sorted(metrics, key=lambda r: r["step"])
    batches = [[str(u["unit"]) for u in r["batch"]["units"]] for r in events
               if r.get("op") == "consume"]
    if len(batches) != len(rows):
        raise ValueError(f"{len(batches)} consume records for {len(rows)} metrics rows")
    tokens = {str(u): sum(n for n, role in zip(r["lengths"], r["roles"]) if role == "committed")
              for u, r in lengths.items()}
    out, lost, trained = [], 0, 0
    for m, units in zip(rows, batches):
        for u in units:
            if u in no_grad:
                if u not in tokens:
                    raise ValueError(f"unit {u} was trained but has no lengths record")
                lost += tokens[u]
                trained += 1
        out.append({**m, "tokens_useful": m["tokens_trained"] - lost})
    return out, trained


class LongTail:
    """The engine, with each candidate's answer capped at its own lognormal length."""

    def __init__(self, engine: Any, max_tokens: int, seed: int, median: float, sigma: float):
        self.engine, self.max_tokens, self.seed = engine, max_tokens, seed
        self.median, self.sigma = median, sigma
        self.caps: dict[str, int] = {}

    def cap(self, key: str) -> int:
        if key not in self.caps:
            z = random.Random(f"{self.seed}:{key}").gauss(0.0, 1.0)
            self.caps[key] = max(1, min(self.max_tokens,
                                        round(self.median * math.exp(self.sigma * z))))
        return self.caps[key]

    async def generate(self, request: Any) -> Any:
        from dataclasses import replace

        key, sep, _ = request.request_id.rpartition("-s")  # unit-cI-sN: the candidate
        if not sep or request.request_id.startswith("eval"):
            return await self.engine.generate(request)
        kept = self.max_tokens - request.max_tokens  # the driver resumes with the rest
        left = max(1, self.cap(key) - kept)
        return await self.engine.generate(replace(request, max_tokens=min(left,
                                                                          request.max_tokens)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def length_quantiles(seed: int, median: float, sigma: float, max_tokens: int, units: int,
                     group_size: int) -> dict[str, float]:
    """The answer lengths (tokens) ``LongTail`` gives the first ``units`` units of a run of
    ``seed`` (``g0`` ...; ``group_size`` candidates each): the nearest-rank quantiles
    ``QUANTILES`` (the smallest length with at least that fraction of the lengths at or below
    it), the largest and the mean."""
    tail = LongTail(None, max_tokens, seed, median, sigma)
    xs = sorted(tail.cap(f"g{u}-c{j}") for u in range(units) for j in range(group_size))
    out: dict[str, float] = {f"p{round(q * 100)}": float(xs[max(0, math.ceil(q * len(xs)) - 1)])
                             for q in QUANTILES}
    return {**out, "max": float(xs[-1]), "mean": fmean(xs)}


def straggler_wait(metrics: list[dict[str, Any]], notes: list[dict[str, Any]],
                   events: list[dict[str, Any]], warmup_steps: int = 0) -> dict[str, float]:
    """The trainer's wait over a run's steps after the first ``warmup_steps`` (``wait_s``, from
    ``metrics.jsonl``: the idle part of each step's wait) and the part of it attributable to a
    straggler (``straggler_s``): per step, the time the trainer was waiting while every unit of
    its batch but the last was already final, i.e. the overlap of the step's wait
    ``[time_s - step_s, time_s - step_s + wait_s + stream_s]`` with ``[t_second_last, t_last]``
    (the ``occupy`` times of the batch's units in ``driver_notes.jsonl``; the batch's units
    from the ``consume`` records of ``events.jsonl``), at most the step's ``wait_s``."""
    final = {str(n["unit"]): n["t"] for n in notes if n.get("event") == "occupy"}
    batches = [[str(u["unit"]) for u in r["batch"]["units"]] for r in events
               if r.get("op") == "consume"]
    wait = straggler = 0.0
    rows = sorted(metrics, key=lambda r: r["step"])  # the k-th row is the k-th consume's step
    for k, (m, units) in enumerate(zip(rows, batches)):
        if k < warmup_steps:
            continue
        wait += m["wait_s"]
        ts = sorted(final[u] for u in units if u in final)
        if len(ts) < 2:
            continue
        start = m["time_s"] - m["step_s"]
        end = start + m["wait_s"] + m.get("stream_s", 0.0)
        straggler += min(m["wait_s"], max(0.0, min(end, ts[-1]) - max(start, ts[-2])))
    return {"wait_s": wait, "straggler_s": straggler}


def grid(policies: list[str], etas: list[int], refits: list[str],
         streaming: list[bool]) -> list[tuple[str, bool, str, int]]:
    """(policy, streaming, refit, eta) in the table's order; streaming on only for the rules
    that stream (reserve_occupy, and a peer whose simulator policy streams)."""
    return [(p, s, r, eta) for eta in etas for p in policies
            for s in (streaming if p == RESERVE_OCCUPY or peer_streams(p)
                      else [m for m in streaming if not m])
            for r in refits]


def trained_data(s: dict[str, Any]) -> dict[str, Any]:
    """What a run trained, from its summary (``RunResult.summary``): the staleness max and
    mean over its trained samples (the ``staleness`` histogram), the units it dropped
    (``units_dropped``: filtered, or aborted for a reason of the rule's: not a shutdown or a
    crash) and, of those, the ones filtered for zero reward variance (``units_filtered``)."""
    hist = {int(k): v for k, v in s["staleness"].items()}
    n = sum(hist.values())
    by_reason = s.get("aborted_by_reason", {})
    return {"staleness_max": max(hist, default=0),
            "staleness_mean": sum(k * v for k, v in hist.items()) / n if n else 0.0,
            "units_filtered": s["filtered"],
            "units_dropped": s["filtered"] + sum(v for k, v in by_reason.items()
                                                 if k not in ("shutdown", "lost_in_crash",
                                                              "recovered",
                                                              "trajectory_missing"))}


def _row(result: Any, policy: str, streaming: bool, refit: str, eta: int, seed: int
         ) -> dict[str, Any]:
    s = result.summary
    fates = s.get("length_by_fate") or {}
    lost = {f: v for f, v in fates.items() if f != "trained" and not f.startswith("unsettled")}
    wall = s["wall_s"]
    before, after = result.eval_before["reward"], result.eval_after["reward"]
    return {
        "policy": policy, "streaming": streaming, "refit": refit, "eta": eta, "seed": seed,
        "steps": s["steps"], "wall_s": wall,
        "gen_tok_s": s["tokens_per_s"], "trained_tok_s": s["tokens_trained"] / wall,
        "steps_per_s": s["steps_per_s"], **trained_data(s),
        "wasted_tokens": round(sum(v["samples"] * v["mean"] for v in lost.values())),
        "tokens_generated": s["tokens_generated"], "tokens_trained": s["tokens_trained"],
        "length_ratio": s.get("length_ratio"), "trainer_idle": s["trainer_idle"],
        "eval_before": before, "eval_after": after,
        "reward_gain_per_min": (after - before) / (wall / 60.0),
    }


RATIO_KEYS = ("gen_tok_s", "trained_tok_s", "steps_per_s")


def add_ratios(runs: list[dict[str, Any]]) -> None:
    """Each run's ratio to the reference run of its seed and eta (``ratio``) and to NeMo-RL as
    shipped (``ratio_shipped``); None where the grid has no such run."""
    for field, which in (("ratio", REF), ("ratio_shipped", SHIPPED)):
        ref = {(r["seed"], r["eta"]): r for r in runs
               if (r["policy"], r["streaming"], r["refit"]) == which}
        for r in runs:
            base = ref.get((r["seed"], r["eta"]))
            r[field] = {k: (r[k] / base[k] if base and base[k] else None) for k in RATIO_KEYS}


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return fmean(xs) if xs else None


def render(results: dict[str, Any]) -> str:
    """The table docs/peers.md shows, from the results file: one row per (eta, policy,
    streaming, refit), means over the seeds. A results file whose grid ran NeMo-RL as shipped
    (``SHIPPED``) gets one more column: each row's ratios to it."""
    if "comparisons" in results:  # a grid the instrument ran (paired, with intervals)
        return render_compared(results)
    shipped = any((r["policy"], r["streaming"], r["refit"]) == SHIPPED for r in results["runs"])
    lines = ["| eta | policy | streaming | refit | seeds | gen tok/s (x ref) "
             "| trained tok/s (x ref) | steps/s (x ref) | staleness max / mean | units dropped "
             "| wasted tokens | length bias | trainer idle | eval before -> after "
             "| reward gain / min |" + (" x shipped: gen / trained / steps |" if shipped else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
             + ("---|" if shipped else "")]
    keys: list[tuple[Any, ...]] = []
    for r in results["runs"]:
        k = (r["eta"], r["policy"], r["streaming"], r["refit"])
        if k not in keys:
            keys.append(k)
    for eta, policy, streaming, refit in keys:
        rs = [r for r in results["runs"] if (r["eta"], r["policy"], r["streaming"],
                                             r["refit"]) == (eta, policy, streaming, refit)]

        def m(key: str) -> float | None:
            return _mean([r[key] for r in rs])

        def x(key: str) -> str:
            return _g(_mean([r["ratio"][key] for r in rs]), ".2f")

        def xs(key: str) -> str:
            return _g(_mean([(r.get("ratio_shipped") or {}).get(key) for r in rs]), ".2f")

        ref = (" (ref)" if (policy, streaming, refit) == REF else
               " (shipped)" if shipped and (policy, streaming, refit) == SHIPPED else "")
        last = (f" {xs('gen_tok_s')} / {xs('trained_tok_s')} / {xs('steps_per_s')} |"
                if shipped else "")
        lines.append(
            f"| {eta} | {policy}{ref} | {'on' if streaming else 'off'} | {refit} | {len(rs)} | "
            f"{m('gen_tok_s'):.0f} ({x('gen_tok_s')}) | {m('trained_tok_s'):.0f} "
            f"({x('trained_tok_s')}) | {m('steps_per_s'):.2f} ({x('steps_per_s')}) | "
            f"{max(r['staleness_max'] for r in rs)} / {m('staleness_mean'):.2f} | "
            f"{m('units_dropped'):.1f} | {m('wasted_tokens'):.0f} | "
            f"{_g(m('length_ratio'), '.2f')} | {m('trainer_idle'):.2f} | "
            f"{m('eval_before'):.3f} -> {m('eval_after'):.3f} | "
            f"{m('reward_gain_per_min'):+.3f} |" + last)
    return "\n".join(lines)


def doc_block(text: str, begin: str = BEGIN, end: str = END) -> str:
    """What stands between the markers of the doc (the headline grid's, or ``--ranking``'s:
    ``RANKING_BEGIN``, ``RANKING_END``)."""
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[start:stop].strip("\n")


def write(results: dict[str, Any], results_path: Path = RESULTS, doc: Path = DOC,
          begin: str = BEGIN, end: str = END) -> None:
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    text = doc.read_text()
    start, stop = text.index(begin) + len(begin), text.index(end)
    doc.write_text(text[:start] + "\n" + render(results) + "\n" + text[stop:])


async def _one(engine: Any, model: Path, prompts: list[Any], policy: str, streaming: bool,
               refit: str, eta: int, seed: int, steps: int, out: Path, median: float,
               sigma: float, warmup_steps: int = 0, tail_class: Any = None,
               shape: tuple[int, int] = SHAPE, no_gradient: float = 0.0) -> dict[str, Any]:
    """One run: its row, with the instrument's steady-state rates (``steady_trained_tok_s``,
    ``steady_gen_tok_s``: the steps after ``warmup_steps``) and ``placements`` (each trained
    unit's step, from its ``events.jsonl``), the trainer's wait over the same steps and its
    part attributable to a straggler (``wait_s``, ``straggler_s``: ``straggler_wait``).
    ``tail_class``: the engine wrapper (``LongTail``, or calibrate's timing one; its instance is
    the row's ``_tail``); ``shape``: (groups per step, samples per group). ``no_gradient`` > 0:
    the filtering workload: the reward is ``NoGradientReward`` (that share of the prompts
    without gradient), the rule filters as it ships (``filters``), and the row has
    ``steady_useful_tok_s`` (the tokens of groups with a gradient, per second of the same
    window), ``no_gradient_trained`` (groups without gradient it trained) and
    ``filtered_other`` (groups it filtered whose prompt is not one of the share: rewards equal
    by chance)."""
    from runtime.accounting import LENGTHS_NAME, LengthLog
    from runtime.config import load_config
    from runtime.session import run_training, split_prompts

    cfg = load_config(None, config_settings(policy, streaming, refit, eta, seed, steps, out,
                                            shape, filters(policy, no_gradient)))
    tail = (tail_class or LongTail)(engine, cfg.rollout.max_tokens, seed, median, sigma)
    reward = NoGradientReward(seed, no_gradient) if no_gradient > 0 else ones_fraction
    result = await run_training(cfg, model, prompts, reward, out, rollout=tail,
                                log=lambda _: None)
    row = _row(result, policy, streaming, refit, eta, seed)
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()
               if x.strip()]
    row["warmup_steps"] = warmup_steps
    row["steady_trained_tok_s"] = instrument.steady_rate(metrics, warmup_steps)
    row["steady_gen_tok_s"] = instrument.steady_rate(metrics, warmup_steps, "tokens_generated")
    events = instrument.read_events(out / "events.jsonl")
    row["placements"] = instrument.placements(events)
    if no_gradient > 0:
        train = split_prompts(prompts, cfg.run.eval_prompts, cfg.run.eval_holdout)[0]
        units = {str(r["unit"]): r["meta"]["prompt"] for r in events
                 if r.get("op") == "reserve" and "prompt" in (r.get("meta") or {})}
        no_grad = {u for u, pos in units.items() if reward.no_gradient(train[pos])}
        useful, row["no_gradient_trained"] = useful_rows(
            metrics, events, LengthLog.read(out / LENGTHS_NAME).records, no_grad)
        row["steady_useful_tok_s"] = instrument.steady_rate(useful, warmup_steps,
                                                            "tokens_useful")
        row["tokens_useful"] = useful[-1]["tokens_useful"]
        row["filtered"] = result.summary["filtered"]
        row["no_gradient_admitted"] = len(no_grad)
        row["filter_zero_variance"] = cfg.staleness.filter_zero_variance
        if cfg.staleness.filter_zero_variance:  # when the rule discards such a group
            row["no_gradient_at"] = ("sample" if result.driver.controller.keeps_no_gradient
                                     else "finish")
        filtered = {str(r["unit"]) for r in events if r.get("op") in ("abort", "filter")
                    and (r.get("meta") or {}).get("reason") == "no_gradient"}
        row["filtered_other"] = len(filtered - no_grad)
    notes = [json.loads(x) for x in (out / "driver_notes.jsonl").read_text().splitlines()
             if x.strip()]
    row.update(straggler_wait(metrics, notes, events, warmup_steps))
    row["_tail"], row["_out"] = tail, out
    return row


def config_settings(policy: str, streaming: bool, refit: str, eta: int, seed: int, steps: int,
                    out: Path | str, shape: tuple[int, int] = SHAPE,
                    filter_zero_variance: bool = True) -> dict[str, Any]:
    """The ``--set`` settings of one run of the grid (``shape``: groups per step, samples per
    group; ``filter_zero_variance``: the runtime's filter of groups without gradient, off only
    for NeMo-RL as shipped on the filtering workload: ``filters``)."""
    return {**SETTINGS, "run.steps": steps, "run.seed": seed, "run.output_dir": str(out),
            "staleness.batch_size": shape[0], "staleness.group_size": shape[1],
            "staleness.policy": policy, "staleness.max_staleness": eta,
            "staleness.filter_zero_variance": filter_zero_variance,
            "trainer.streaming": streaming, "rollout.refit": refit}


Config = tuple[str, bool, str, int]  # (policy, streaming, refit, eta)


def comparisons(runs_grid: list[Config]) -> list[dict[str, Any]]:
    """The comparisons a grid makes, per eta: first the A/A one (the reference against itself,
    the noise floor), then every other row against the reference (``against: ref``), then
    every Reserve-Occupy row against NeMo-RL as shipped where the grid holds it (``against:
    shipped``). The reference is run whether or not the grid names it."""
    out: list[dict[str, Any]] = []
    for eta in dict.fromkeys(e for *_, e in runs_grid):
        ref, shipped = (*REF, eta), (*SHIPPED, eta)
        out.append({"a": ref, "b": ref, "against": "ref", "aa": True})
        out += [{"a": c, "b": ref, "against": "ref", "aa": False} for c in runs_grid
                if c[3] == eta and c != ref]
        if shipped in runs_grid:
            out += [{"a": c, "b": shipped, "against": "shipped", "aa": False}
                    for c in runs_grid if c[3] == eta and c[0] == RESERVE_OCCUPY]
    return out


def headline() -> list[dict[str, Any]]:
    """The headline comparisons (issue 37), in the order run and printed: the A/A one (the
    reference against itself at eta 1, the noise floor); Reserve-Occupy as it ships (streaming,
    keep) against NeMo-RL as shipped at eta 1 and 2, against ``nemo_in_order`` whole batch
    (the reference) and ``verl_drop`` at eta 1, and at eta 1 against itself at eta 0; and
    Reserve-Occupy whole batch against the reference at eta 1: the rules' decisions alone,
    which the first workload left identical."""
    ro = (RESERVE_OCCUPY, True, "keep")
    ref1 = (*REF, 1)
    return [{"a": ref1, "b": ref1, "against": "ref", "aa": True},
            {"a": (*ro, 1), "b": (*SHIPPED, 1), "against": "shipped", "aa": False},
            {"a": (*ro, 2), "b": (*SHIPPED, 2), "against": "shipped", "aa": False},
            {"a": (*ro, 1), "b": ref1, "against": "ref", "aa": False},
            {"a": (*ro, 1), "b": ("verl_drop", False, "keep", 1), "against": "verl_drop",
             "aa": False},
            {"a": (*ro, 1), "b": (*ro, 0), "against": "itself at eta 0", "aa": False},
            {"a": (RESERVE_OCCUPY, False, "keep", 1), "b": ref1, "against": "ref", "aa": False}]


def ranking(etas: tuple[int, ...] = (1, 2)) -> list[dict[str, Any]]:
    """The ranking (issue 37, item 3), in the order run and printed: per eta of ``etas``, the
    A/A comparison (the reference against itself), then Reserve-Occupy as it ships (streaming,
    keep) against each rule of ``RANKED`` at its best settings; then, at the first eta,
    Reserve-Occupy's own levers: keep against abort, streaming against whole batch, and the
    eta against eta 0."""
    ro = (RESERVE_OCCUPY, True, "keep")
    out: list[dict[str, Any]] = []
    for eta in etas:
        ref = (*REF, eta)
        out.append({"a": ref, "b": ref, "against": "ref", "aa": True})
        out += [{"a": (*ro, eta), "b": (policy, streaming, "keep", eta),
                 "against": policy + (" stream" if streaming else " whole"), "aa": False}
                for policy, streaming in RANKED]
    eta = etas[0]
    # (``lever``: the same rule on both sides, so the same decisions are expected and the ratio
    # is printed anyway: it is the lever's cost or gain, not the rules')
    out += [{"a": (*ro, eta), "b": (RESERVE_OCCUPY, True, "abort", eta), "against": "itself, abort",
             "aa": False, "lever": True},
            {"a": (*ro, eta), "b": (RESERVE_OCCUPY, False, "keep", eta),
             "against": "itself, whole batch", "aa": False, "lever": True},
            {"a": (*ro, eta), "b": (*ro, 0), "against": "itself at eta 0", "aa": False}]
    return out


def filtering_headline() -> list[dict[str, Any]]:
    """The filtering workload's comparisons (issue 37: "against the same rules on a filtering
    workload"), in the order run and printed: the A/A one (the reference, ``nemo_in_order``
    whole batch as shipped: it trains the groups without gradient, against itself at eta 1),
    then Reserve-Occupy as it ships (streaming, keep, the runtime's filter) against NeMo-RL as
    shipped (streaming, keep, no filter), ``nemo_in_order`` whole batch (no filter) and
    ``verl_drop`` (its filter: evict and refill 1:1), all at eta 1."""
    ro = (RESERVE_OCCUPY, True, "keep", 1)
    ref1 = (*REF, 1)
    return [{"a": ref1, "b": ref1, "against": "ref", "aa": True},
            {"a": ro, "b": (*SHIPPED, 1), "against": "shipped", "aa": False},
            {"a": ro, "b": ref1, "against": "ref", "aa": False},
            {"a": ro, "b": ("verl_drop", False, "keep", 1), "against": "verl_drop",
             "aa": False}]


def comps_grid(comps: list[dict[str, Any]]) -> list[Config]:
    """Every configuration ``comps`` run, in first-seen order."""
    return list(dict.fromkeys(x for c in comps for x in (c["a"], c["b"])))


def headline_grid() -> list[Config]:
    """Every configuration the headline comparisons run, in first-seen order."""
    return comps_grid(headline())


def summarize_pairs(comps: list[dict[str, Any]], pairs: list[dict[str, Any]], method: str,
                    level: float, seed: int = 0,
                    rate_key: str = "steady_trained_tok_s") -> dict[str, Any]:
    """Each comparison's pairs summarized by the instrument (trained and generated tok/s over
    the steady-state window), and the A/A false-positive rates of every interval method
    (``instrument.METHODS``) from the grid's A/A pairs, at the grid's number of pairs.
    ``rate_key``: the runs' figure the pairs' ratios are of (the filtering workload's:
    ``steady_useful_tok_s``), whose means per pair the rows' ``trained_tok_s`` hold."""
    rows = []
    for j, c in enumerate(comps):
        mine = [p for p in pairs if p["comparison"] == j]
        rows.append({
            "eta": c["a"][3], "policy": c["a"][0], "streaming": c["a"][1], "refit": c["a"][2],
            "against": c["against"], "aa": c["aa"], "against_config": list(c["b"]),
            "seeds": [p["seed"] for p in mine], "first": [p["first"] for p in mine],
            "diff": [p["diff"] for p in mine],
            "same_decisions": bool(mine) and all(p["diff"] == 0 for p in mine),
            "lever": bool(c.get("lever")),
            **_ratio_summaries(mine, method, level, seed),
            "trained_tok_s": [_mean([p[x][rate_key] for x in ("a", "a2")
                                     if x in p]) for p in mine],
            "staleness_max": max((p["a"]["staleness_max"] for p in mine), default=0),
            "staleness_mean": _mean([p["a"]["staleness_mean"] for p in mine]),
            "units_dropped": _mean([p["a"]["units_dropped"] for p in mine]),
            **({"no_gradient_trained": [[p[x]["no_gradient_trained"] for x in "ab"]
                                        for p in mine],
                "filtered_other": [[p[x]["filtered_other"] for x in "ab"] for p in mine]}
               if mine and "no_gradient_trained" in mine[0]["a"] else {}),
            "wait_s": [[p[x].get("wait_s") for x in "ab"] for p in mine],
            "straggler_s": [[p[x].get("straggler_s") for x in "ab"] for p in mine],
        })
    return {"rows": rows, "false_positive": _false_positive(comps, pairs, rows, level, seed)}


def _ratio_summaries(mine: list[dict[str, Any]], method: str, level: float, seed: int
                     ) -> dict[str, Any]:
    """A comparison's ``trained`` and ``gen``: its pairs' ratios of trained and of generated
    tok/s summarized by the instrument."""
    gen = [r for r in (instrument.pair_ratio(p, "steady_gen_tok_s") for p in mine)
           if r is not None]
    return {"trained": instrument.summarize([p["ratio"] for p in mine if p["ratio"] is not None],
                                            method, level, seed),
            "gen": instrument.summarize(gen, method, level, seed)}


def aa_ratios(comps: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> list[float]:
    """The grid's A/A pair ratios: those of the pairs of its A/A comparisons (``comps``, each
    with ``aa``), in the pairs' order."""
    return [p["ratio"] for p in pairs if comps[p["comparison"]]["aa"] and p["ratio"] is not None]


def _false_positive(comps: list[dict[str, Any]], pairs: list[dict[str, Any]],
                    rows: list[dict[str, Any]], level: float, seed: int) -> dict[str, Any] | None:
    """The results' ``false_positive``: from the grid's A/A pair ratios (``aa_ratios``), how
    often each interval method calls an A/A comparison of the grid's number of pairs (the most
    of its ``rows``) resolved (1000 trials)."""
    aa = aa_ratios(comps, pairs)
    if len(aa) < 2:
        return None
    n = max((r["trained"]["pairs"] for r in rows), default=0)
    fp: dict[str, Any] = {"aa_ratios": aa, "pairs": n, "nominal": round(1 - level, 6),
                          "min_pairs": instrument.min_pairs(level)}
    for m in instrument.METHODS:
        fp[m] = instrument.false_positive_rate(aa, n, m, level, trials=1000, seed=seed)
    return fp


def resummarize(results: dict[str, Any], method: str, level: float) -> dict[str, Any]:
    """A grid's results (``main``'s, or a results file of it) with every comparison's
    ``trained`` and ``gen`` summarized again by ``method`` at ``level`` from its stored pairs,
    and its ``false_positive`` rates again: another interval without another grid. The results
    themselves when the method and level are the grid's own (its file as written)."""
    ins = results["instrument"]
    if (method, level) == (ins["interval"], ins["level"]):
        return results
    seed, pairs = ins["order_seed"], results["pairs"]
    comps = results["comparisons"]
    rows = [{**c, **_ratio_summaries([p for p in pairs if p["comparison"] == j], method, level,
                                     seed)} for j, c in enumerate(comps)]
    return {**results, "instrument": {**ins, "interval": method, "level": level},
            "comparisons": rows,
            "false_positive": _false_positive(comps, pairs, rows, level, seed)}


async def main(runs_grid: list[Config], seeds: list[int], steps: int, median: float,
               sigma: float, rows: Path | None = None, engine: Any = None,
               warmup_steps: int = 1, order: str = "alternate", order_seed: int = 0,
               method: str = "sign", level: float = instrument.LEVEL, pin: bool = False,
               tail_class: Any = None, on_row: Any = None,
               comps: list[dict[str, Any]] | None = None, shape: tuple[int, int] = SHAPE,
               no_gradient: float = 0.0) -> dict[str, Any]:
    """The grid as the instrument runs it (``bench/instrument.py``): per seed, each
    comparison's two runs one after the other in alternating (or seeded random) order, on one
    warm engine (``engine``, or a new one closed at the end), after one discarded warm-up run
    of the reference. Returns the results: ``runs`` (every run's row, in the order run),
    ``comparisons`` (per row: its pairs' ratios, interval and verdict) and the A/A
    ``false_positive`` rates. ``tail_class`` and ``on_row`` are bench/calibrate.py's: its
    timing engine wrapper, and a call with each kept run's row (with ``_tail``, the wrapper,
    and ``_out``, the run's directory, while it still exists). ``comps``: the comparisons to
    run (``headline()``; default: ``comparisons(runs_grid)``); ``shape``: (groups per step,
    samples per group); ``no_gradient`` > 0: the filtering workload (``_one``): the pairs'
    ratios are of useful trained tok/s (``steady_useful_tok_s``)."""
    from runtime.data import load_prompts
    from runtime.models.tiny import ensure_tiny_model
    from runtime.rollout.vllm_engine import VLLMRollout

    model = ensure_tiny_model(log=None)
    prompts = load_prompts()
    owned = engine is None
    if owned:
        engine = VLLMRollout(model, max_model_len=128, max_num_seqs=64, seed=0)
    comps = comparisons(runs_grid) if comps is None else comps
    rate_key = "steady_useful_tok_s" if no_gradient > 0 else "steady_trained_tok_s"
    runs: list[dict[str, Any]] = []
    total = 1 + (4 if order == "crossover" else 2) * len(comps) * len(seeds)
    t0 = time.perf_counter()
    placed = None
    try:
        if pin:
            placed = instrument.place()
        with tempfile.TemporaryDirectory() as tmp:
            count = [0]

            async def run(config: Config, seed: int) -> dict[str, Any]:
                count[0] += 1
                policy, streaming, refit, eta = config
                out = Path(tmp) / f"run-{count[0]}"
                row = await _one(engine, model, prompts, policy, streaming, refit, eta, seed,
                                 steps, out, median, sigma, warmup_steps, tail_class, shape,
                                 no_gradient)
                row["run"], row["rate"] = count[0], row[rate_key]
                if on_row is not None and count[0] > 1:  # not the discarded warm-up
                    on_row(row)
                print(f"[{count[0]}/{total} {time.perf_counter() - t0:.0f}s] {policy} "
                      f"streaming={'on' if streaming else 'off'} refit={refit} eta={eta} "
                      f"seed={seed}: {row[rate_key]:.0f} "
                      f"{'useful ' if no_gradient > 0 else ''}trained tok/s (steps "
                      f"after {warmup_steps}), staleness max {row['staleness_max']}, dropped "
                      f"{row['units_dropped']}, {row['wall_s']:.1f} s"
                      + (" (warm-up, discarded)" if count[0] == 1 else ""), flush=True)
                return row

            def keep(row: dict[str, Any]) -> None:
                row.pop("_tail", None)
                row.pop("_out", None)
                runs.append(row)
                if rows is not None:  # each run as it ends (a cut grid keeps its runs)
                    with rows.open("a") as f:
                        f.write(json.dumps(row) + "\n")

            pairs = await instrument.run_pairs(
                [(c["a"], c["b"]) for c in comps], seeds, run, order, order_seed,
                warmup=comps[0]["b"], on_run=keep)
    finally:
        if owned:
            await engine.close()
    for p in pairs:
        for which in ("a", "b", "a2", "b2"):  # (a2, b2: a crossover pair's second half)
            if which in p:
                p[which] = {k: p[which][k] for k in PAIR_KEYS if k in p[which]}
    summary = summarize_pairs(comps, pairs, method, level, order_seed, rate_key)
    return {"instrument": {"order": order, "order_seed": order_seed, "interval": method,
                           "level": level, "warmup_steps": warmup_steps, "pin": placed,
                           "warmup_run": 1, "rate": rate_key},
            "runs": runs, "pairs": pairs, "comparisons": summary["rows"],
            "false_positive": summary["false_positive"]}


PAIR_KEYS = ("run", "rate", "steady_trained_tok_s", "steady_gen_tok_s", "staleness_max",
             "staleness_mean", "units_dropped", "wait_s", "straggler_s",
             # the filtering workload's (``_one``)
             "steady_useful_tok_s", "no_gradient_trained", "no_gradient_admitted",
             "filtered_other")


def _cell(s: dict[str, Any]) -> str:
    """``ratio [lo, hi]`` of an instrument summary: the median of the pairs' ratios, or with
    the signed-rank interval the Hodges-Lehmann estimate it is around
    (``instrument.estimate``)."""
    x = instrument.estimate(s)
    return "n/a" if x is None else interval_text(x, s["lo"], s["hi"])


def interval_text(x: float, lo: float | None, hi: float | None) -> str:
    """``x [lo, hi]`` to three decimals; an open end (None or infinite) as ``-inf`` / ``inf``."""
    def end(v: float | None, inf: str) -> str:
        return f"{v:.3f}" if v is not None and math.isfinite(v) else inf
    return f"{x:.3f} [{end(lo, '-inf')}, {end(hi, 'inf')}]"


# what the table's header calls each interval method, and the ratio it prints
INTERVAL_NAMES = {"sign": "exact order-statistic (sign)", "bootstrap": "percentile bootstrap",
                  "wilcoxon": "exact signed-rank (Wilcoxon), of the log ratios"}
RATIO_NAMES = {"sign": "the median of the pairs' ratios",
               "bootstrap": "the median of the pairs' ratios",
               "wilcoxon": "the Hodges-Lehmann estimate of the pairs' ratios (the median of "
                           "the Walsh averages of their logs, exp'd back)"}


def render_compared(results: dict[str, Any]) -> str:
    """The table of a grid run by the instrument: the A/A row of each eta first (the noise
    floor), then every row against the reference (and against NeMo-RL as shipped); a row whose
    every pair made the same decisions as its baseline says so instead of a ratio."""
    ins, fp = results["instrument"], results.get("false_positive")
    pct = f"{ins['level']:.0%}"
    head = [f"Pairs per row: {max((len(c['seeds']) for c in results['comparisons']), default=0)}"
            f", order {ins['order']} (seed {ins['order_seed']})"
            + (": each pair runs A and B in both orders, its ratio the geometric mean of the two"
               if ins["order"] == "crossover" else "") + ", one discarded warm-up run, "
            f"trained and generated tok/s over the steps after the first "
            f"{ins['warmup_steps']}; ratio: "
            f"{RATIO_NAMES[ins['interval']]}"
            f", {pct} interval ({INTERVAL_NAMES[ins['interval']]}), resolved when it excludes 1; cores "
            + ("pinned (engine " + ",".join(map(str, ins["pin"]["engine_cores"]))
               + ", driver and trainer " + ",".join(map(str, ins["pin"]["driver_cores"])) + ")"
               if ins.get("pin") else "not pinned") + "."]
    if fp:
        head.append(f"A/A check of the interval: with {fp['pairs']} pairs, an A/A comparison "
                    f"drawn from this grid's {len(fp['aa_ratios'])} A/A pair ratios is called "
                    f"resolved {fp['sign']:.1%} of the time with the sign interval"
                    + (f", {fp['bootstrap']:.1%} with the percentile bootstrap and "
                       f"{fp['wilcoxon']:.1%} with the signed-rank interval"
                       if "wilcoxon" in fp else  # (a grid from before it: as it printed)
                       f" and {fp['bootstrap']:.1%} with the percentile bootstrap")
                    + f" (nominal "
                    f"{fp['nominal']:.0%}; the sign interval needs {fp['min_pairs']} pairs).")
    head += workload_lines(results.get("workload"))
    useful = ins.get("rate") == "steady_useful_tok_s"  # the filtering workload
    if useful:
        head.append("Useful trained tok/s: the tokens of the trained groups that carry a "
                    "gradient, per second of the window (a rule that filters trains only "
                    "those); the rules marked \"no filter\" train the groups without gradient "
                    "(NeMo-RL's asynchronous GRPO, as shipped), the others filter them "
                    "(staleness.filter_zero_variance). Units dropped: the row's run, filtered "
                    "groups included.")
    what = "useful trained tok/s" if useful else "trained tok/s"
    lines = head + ["", "| eta | policy | streaming | refit | against | pairs "
                    f"| {what} ratio [interval] | resolved | gen tok/s ratio [interval] "
                    f"| units in another step (per pair) | {what} | staleness max / mean "
                    "| units dropped | trainer wait, s: row / baseline (straggler's part) |"
                    + (" groups without gradient trained: row / baseline |" if useful else ""),
                    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
                    + ("---|" if useful else "")]
    rows = sorted(results["comparisons"], key=lambda c: (c["eta"], not c["aa"]))
    for c in rows:
        t = c["trained"]
        same = c["same_decisions"] and not c["aa"] and not c.get("lever")
        if same:
            ratio, verdict, gen = "same decisions", "-", "same decisions"
        else:
            ratio, gen = _cell(t), _cell(c["gen"])
            verdict = "resolved" if t["resolved"] else "not resolved"
        name = ("A/A: " if c["aa"] else "") + c["policy"] + (
            " (no filter)" if useful and c["policy"] in TRAINS_NO_GRADIENT else "")
        if c.get("lever") and c["same_decisions"]:
            verdict += " (same decisions)"
        lines.append(
            f"| {c['eta']} | {name} | {'on' if c['streaming'] else 'off'} | {c['refit']} | "
            f"{'itself' if c['aa'] else c['against']} | {t['pairs']} | {ratio} | {verdict} | "
            f"{gen} | {', '.join(map(str, c['diff']))} | "
            f"{_g(_mean(c['trained_tok_s']), '.0f')} | {c['staleness_max']} / "
            f"{_g(c['staleness_mean'], '.2f')} | {_g(c['units_dropped'], '.1f')} | "
            f"{_waits(c)} |" + (f" {_no_grad(c)} |" if useful else ""))
    return "\n".join(lines)


def _no_grad(c: dict[str, Any]) -> str:
    """The groups without gradient the row's run and its baseline's trained (means over the
    pairs), and the groups filtered whose rewards were equal by chance, if any."""
    ng, other = c.get("no_gradient_trained"), c.get("filtered_other")
    if not ng:
        return "n/a"
    cell = f"{_mean([p[0] for p in ng]):.1f} / {_mean([p[1] for p in ng]):.1f}"
    chance = sum(x for p in other or [] for x in p)
    return cell + (f" ({chance} filtered by chance)" if chance else "")


def _waits(c: dict[str, Any]) -> str:
    """Per pair mean over the row's pairs: the trainer's wait in the window, the row's run /
    the baseline's, each with its straggler's part; "n/a" for a results file without them
    (either of them: a hand-edited file with ``wait_s`` alone was a TypeError)."""
    w, st = c.get("wait_s"), c.get("straggler_s")
    if not w or not st or any(x is None for p in w + st for x in p):
        return "n/a"
    a, b = _mean([p[0] for p in w]), _mean([p[1] for p in w])
    sa, sb = _mean([p[0] for p in st]), _mean([p[1] for p in st])
    return f"{a:.2f} ({sa:.2f}) / {b:.2f} ({sb:.2f})"


def workload_lines(w: dict[str, Any] | None) -> list[str]:
    """The workload's line above the table: its shape and lognormal, and per seed the answer
    lengths' quantiles (``length_quantiles``); none for a results file without it."""
    if not w:
        return []
    qs = "; ".join(f"seed {seed}: " + " / ".join(f"{q[k]:g}" for k in (*(
        f"p{round(x * 100)}" for x in QUANTILES), "max")) + f", mean {q['mean']:.1f}"
        for seed, q in w["length_quantiles"].items())
    line = (f"Workload {w['name']!r}: {w['batch_size']} groups of {w['group_size']} per step, "
            f"answer lengths lognormal (median {w['median']:g}, sigma {w['sigma']:g}, at most "
            f"{w['max_tokens']} tokens); per seed, over the answers of its first "
            f"{w['units']} units, p50 / p90 / p99 / max tokens: {qs}.")
    if w.get("no_gradient"):
        shares = ", ".join(f"seed {seed}: {x:.2f}" for seed, x in w["no_gradient_share"].items())
        line += (f" Groups without gradient: each training prompt is one with probability "
                 f"{w['no_gradient']:g} (every answer scored 0.0); the share of the "
                 f"{w['prompts']} training prompts that are, per seed: {shares}.")
    return [line]


def workload_record(name: str, shape: tuple[int, int], median: float, sigma: float,
                    steps: int, seeds: list[int], no_gradient: float = 0.0) -> dict[str, Any]:
    """The results file's ``workload``: what ``workload_lines`` prints. The quantiles are
    over the units of a run's steps (``steps`` x groups per step); with ``no_gradient`` (the
    filtering workload), per seed the share of the training prompts without gradient."""
    units = steps * shape[0]
    mt = SETTINGS["rollout.max_tokens"]
    out = {"name": name, "batch_size": shape[0], "group_size": shape[1], "median": median,
           "sigma": sigma, "max_tokens": mt, "units": units,
           "length_quantiles": {str(seed): length_quantiles(seed, median, sigma, mt, units,
                                                            shape[1]) for seed in seeds}}
    if no_gradient > 0:
        prompts = train_prompts()
        out.update({"no_gradient": no_gradient, "prompts": len(prompts),
                    "no_gradient_share": {str(seed): no_gradient_share(seed, no_gradient,
                                                                       prompts)
                                          for seed in seeds}})
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_grid_options(parser: argparse.ArgumentParser, steps: int) -> None:
    """The grid's and the instrument's options, shared with bench/calibrate.py."""
    parser.add_argument("--seeds", default="0,1,2,3,4",
                        help="comma-separated run seeds, one pair per seed and row (default "
                             "0-4: the sign interval needs 5 pairs at 90 %%)")
    parser.add_argument("--etas", default="1,2", help="comma-separated max staleness values")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                        help=f"comma-separated, of: {', '.join(POLICY_CHOICES)} (default: all "
                             f"but issue 38's rules, which docs/peers.md's table does not "
                             f"have yet)")
    parser.add_argument("--refits", default=",".join(REFITS), help="abort, keep or both")
    parser.add_argument("--streaming", default="off,on",
                        help="off, on or both (on: the rules that stream only)")
    parser.add_argument("--steps", type=int_in(1, 10**6), default=steps, help=f"steps per run (default "
                        f"{steps})")
    parser.add_argument("--warmup-steps", type=int_in(0, 10**6), default=1,
                        help="steps of each run left out of its throughput (default 1)")
    parser.add_argument("--median", type=float, default=MEDIAN,
                        help=f"median answer length (tokens) of the lognormal, at most "
                             f"rollout.max_tokens ({SETTINGS['rollout.max_tokens']})")
    parser.add_argument("--sigma", type=float, default=SIGMA,
                        help=f"the lognormal's sigma (0 to {MAX_SIGMA:g})")
    parser.add_argument("--order", default="alternate", choices=instrument.ORDERS,
                        help="each pair's order: alternate (default), random, or crossover "
                             "(A and B in both orders per pair: twice the runs)")
    parser.add_argument("--order-seed", type=int_in(0, 2**32 - 1), default=0,
                        help="the random order's seed, and the bootstrap's (default 0)")
    parser.add_argument("--interval", default="sign", choices=instrument.METHODS,
                        help="the median's interval: sign (exact order statistics, default) or "
                             "bootstrap (percentile)")
    parser.add_argument("--level", type=float, default=instrument.LEVEL,
                        help="the interval's coverage (default 0.9)")
    parser.add_argument("--pin", action="store_true",
                        help="the engine's process on one core, this process (driver, "
                             "trainer) on the others, torch at one thread")


MAX_SIGMA = 5.0  # exp(5 * 6 sd) ~ 1e13: larger overflows nothing useful (every cap is 1 or max)


def _writable(path: Path, what: str, bad: Any) -> None:
    """A file the bench will write (or append to): refused when it is a directory or not a
    regular file, or its folder does not exist or cannot be written."""
    if str(path) == "":
        bad(f"{what}: an empty path")
    if path.exists() and (path.is_dir() or not path.is_file()):
        bad(f"{what} {path}: not a regular file")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        bad(f"{what} {path}: no such folder {parent}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        bad(f"{what} {path}: cannot be written")


def check_write(args: argparse.Namespace, bad: Any, begin: str, end: str) -> None:
    """``--write``'s outputs checked before the grid starts: the results file writable, the
    doc a readable file holding the generated block's markers."""
    if not args.write:
        return
    _writable(args.results, "--results", bad)
    _writable(args.doc, "--doc", bad)
    try:
        text = args.doc.read_text()
    except (OSError, UnicodeDecodeError) as e:
        bad(f"--doc {args.doc}: cannot be read ({e.__class__.__name__})")
    if begin not in text or end not in text:
        bad(f"--doc {args.doc}: has no generated block ({begin} ... {end})")


def check_grid(args: argparse.Namespace, bad: Any) -> None:
    """Every grid and instrument option checked (``bad`` says one line and exits 2): sets
    ``seed_list``, ``eta_list``, ``policy_list``, ``refit_list``, ``streaming_list`` and
    ``grid``; each run's config is validated as the runtime will (``load_config``)."""
    from runtime.config import load_config

    try:
        args.seed_list, args.eta_list = _ints(args.seeds), _ints(args.etas)
    except ValueError:
        bad(f"--seeds and --etas take comma-separated whole numbers (got {args.seeds!r}, "
            f"{args.etas!r})")
    args.policy_list = [p.strip() for p in args.policies.split(",") if p.strip()]
    args.refit_list = [r.strip() for r in args.refits.split(",") if r.strip()]
    modes = [m.strip() for m in args.streaming.split(",") if m.strip()]
    unknown = [p for p in args.policy_list if p not in POLICY_CHOICES]
    if unknown:
        bad(f"unknown policy {unknown[0]!r}; one of {', '.join(POLICY_CHOICES)}")
    if [r for r in args.refit_list if r not in REFITS]:
        bad(f"--refits takes abort and/or keep (got {args.refits!r})")
    if [m for m in modes if m not in ("off", "on")]:
        bad(f"--streaming takes off and/or on (got {args.streaming!r})")
    args.streaming_list = [m == "on" for m in modes]
    if [e for e in args.eta_list if e < 0]:
        bad(f"eta must be >= 0 (got {args.etas!r})")
    if [s for s in args.seed_list if s < 0]:
        bad(f"seeds must be >= 0 (got {args.seeds!r})")
    if len(set(args.seed_list)) != len(args.seed_list):
        bad(f"--seeds names a seed twice (got {args.seeds!r}): one pair per seed")
    if not (math.isfinite(args.median) and 0 < args.median <= SETTINGS["rollout.max_tokens"]):
        bad(f"--median must be a number in (0, {SETTINGS['rollout.max_tokens']}] (the answer "
            f"cap, rollout.max_tokens) (got {args.median})")
    if not (math.isfinite(args.sigma) and 0 <= args.sigma <= MAX_SIGMA):
        bad(f"--sigma must be a number in [0, {MAX_SIGMA:g}] (got {args.sigma})")
    if args.steps < 1:
        bad(f"--steps must be >= 1 (got {args.steps})")
    if not 0 <= args.warmup_steps < args.steps:
        bad(f"--warmup-steps must be >= 0 and less than --steps (got {args.warmup_steps}, "
            f"steps {args.steps}): the window needs a step after it")
    if not (math.isfinite(args.level) and 0 < args.level < 1):
        bad(f"--level must be a number in (0, 1) (got {args.level})")
    if args.order_seed < 0:
        bad(f"--order-seed must be >= 0 (got {args.order_seed})")
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        bad(f"--pin needs two usable cores (this process may use "
            f"{len(os.sched_getaffinity(0))})")
    if not (args.seed_list and args.eta_list and args.policy_list and args.refit_list
            and modes):
        bad("--seeds, --etas, --policies, --refits and --streaming must each name one or more")
    args.grid = grid(args.policy_list, args.eta_list, args.refit_list, args.streaming_list)
    if not args.grid:
        bad("the grid is empty (streaming on alone runs only the rules that stream: "
            "reserve_occupy, " + ", ".join(p for p in POLICY_CHOICES if peer_streams(p)) + ")")
    for policy, streaming, refit, eta in [*args.grid, *((*REF, e) for e in args.eta_list)]:
        for seed in (min(args.seed_list), max(args.seed_list)):
            _check_config(bad, policy, streaming, refit, eta, seed, args.steps,
                          getattr(args, "shape", SHAPE), getattr(args, "no_gradient", 0.0))


def _check_config(bad: Any, policy: str, streaming: bool, refit: str, eta: int, seed: int,
                  steps: int, shape: tuple[int, int], no_gradient: float = 0.0) -> None:
    """One run's config validated as the runtime will (``load_config``); ``bad`` if not."""
    from runtime.config import load_config

    try:
        load_config(None, config_settings(policy, streaming, refit, eta, seed, steps, "out",
                                          shape, filters(policy, no_gradient)))
    except ValueError as e:  # ConfigFileError: the settings' problems, a line each
        why = "; ".join(x.strip() for x in str(e).splitlines()[1:]) or str(e)
        bad(f"{policy} streaming={'on' if streaming else 'off'} refit={refit} "
            f"eta={eta} seed={seed}: {why}")


def _filtering_help() -> str:
    w = WORKLOADS["filtering"]
    return (f"{w['batch_size']} groups of {w['group_size']}, median {w['median']:g}, sigma "
            f"{w['sigma']:g}, {w['steps']} steps, a share {w['no_gradient']:g} of the prompts "
            f"without gradient")


MAX_NO_GRADIENT = 0.8  # a larger share leaves a seed's 84 training prompts all without
# gradient too often (0.8^84 ~ 7e-9 per seed; a seed with no prompt to train is refused)


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    """``--workload`` and ``--headline``, shared with bench/calibrate.py (``apply_workload``
    reads them)."""
    parser.add_argument("--workload", default="bench", choices=sorted(WORKLOADS),
                        help="the workload: groups per step, samples per group, the "
                             "lognormal's median and sigma, steps (docs/peers.md, \"The "
                             "workload\"); --median, --sigma, --steps override its own. bench "
                             "(default): 4 groups of 4, median 12, sigma 1, 6 steps; separating: "
                             "12 groups of 4, median 8, sigma 1.5, 8 steps; filtering: "
                             + _filtering_help() + " (peers_compare.py only)")
    parser.add_argument("--headline", action="store_true",
                        help="run the headline comparisons only (A/A; Reserve-Occupy against "
                             "NeMo-RL as shipped at eta 1 and 2, nemo_in_order whole batch, "
                             "verl_drop, eta 0; Reserve-Occupy whole batch against "
                             "nemo_in_order; with --workload filtering its own: A/A, "
                             "Reserve-Occupy against NeMo-RL as shipped, nemo_in_order whole "
                             "batch and verl_drop at eta 1): --policies, --etas, --refits, "
                             "--streaming are not taken with it")
    parser.set_defaults(median=None, sigma=None, steps=None)  # the workload's, unless given


def apply_workload(args: argparse.Namespace, raw: list[str], bad: Any) -> None:
    """The workload's median, sigma and steps where not given, ``args.shape``; with
    ``--headline`` (or peers_compare's ``--ranking``), its etas, ``args.comps`` and
    ``args.grid`` (after ``check_grid``), each of its configurations checked as the runtime
    would (``bad``: one line, exit 2). ``raw``: the command line (to tell a given option from
    its default)."""
    w = WORKLOADS[args.workload]
    for key in ("median", "sigma", "steps"):
        if getattr(args, key) is None:
            setattr(args, key, w[key])
    args.shape = (w["batch_size"], w["group_size"])
    ranked = getattr(args, "ranking", False)
    if args.headline and ranked:
        bad("--headline and --ranking are two grids: name one")
    given_rate = getattr(args, "no_gradient", None)
    filtering = "no_gradient" in w
    if given_rate is not None and not filtering:
        bad(f"--no-gradient is the filtering workload's: name --workload filtering (got "
            f"--workload {args.workload})")
    if filtering and ranked:
        bad("--ranking runs on a workload without groups without gradient: the filtering "
            "workload's comparisons are --headline's (--workload filtering --headline)")
    args.no_gradient = (w["no_gradient"] if given_rate is None else given_rate) if filtering \
        else 0.0
    args.comps = None
    if args.headline or ranked:
        mode = "--headline" if args.headline else "--ranking"
        own = ("--policies", "--refits", "--streaming") + (("--etas",) if args.headline else ())
        given = [o for o in own if any(x == o or x.startswith(o + "=") for x in raw)]
        if given:
            bad(f"{mode} runs its own comparisons: {given[0]} is not taken with it")
        if args.headline:
            own_grid = comps_grid(filtering_headline()) if filtering else headline_grid()
            args.etas = ",".join(str(e) for e in dict.fromkeys(c[3] for c in own_grid))
    check_grid(args, bad)
    if filtering:
        prompts = train_prompts()
        for seed in args.seed_list:
            if no_gradient_share(seed, args.no_gradient, prompts) == 1.0:
                bad(f"seed {seed}: every one of the {len(prompts)} training prompts is without "
                    f"gradient at --no-gradient {args.no_gradient:g}: no group could train")
    if ranked:
        if 0 in args.eta_list:
            bad("--ranking compares each eta against eta 0 itself: --etas takes etas >= 1 "
                f"(got {args.etas!r})")
        args.comps = ranking(tuple(args.eta_list))
    elif args.headline:
        args.comps = filtering_headline() if filtering else headline()
    if args.comps is not None:
        args.grid = comps_grid(args.comps)
        for policy, streaming, refit, eta in args.grid:
            for seed in (min(args.seed_list), max(args.seed_list)):
                _check_config(bad, policy, streaming, refit, eta, seed, args.steps, args.shape,
                              args.no_gradient)


def read_results(path: Path, bad: Any) -> dict[str, Any]:
    """A results file of a grid the instrument ran, checked before it is summarized again
    (``bad``: one line, exit 2)."""
    results = read_json(path, "--from-results", "a JSON results file", bad)
    if not (isinstance(results, dict) and isinstance(results.get("instrument"), dict)
            and all(isinstance(results.get(k), list) for k in ("pairs", "comparisons"))):
        bad(f"--from-results {path}: not the results of a grid the instrument ran (no "
            f"instrument, pairs and comparisons)")
    ok = all(isinstance(p, dict) and isinstance(p.get("comparison"), int)
             and 0 <= p["comparison"] < len(results["comparisons"])
             and (p.get("ratio") is None or isinstance(p["ratio"], (int, float))
                  and not isinstance(p["ratio"], bool) and math.isfinite(p["ratio"])
                  and p["ratio"] >= 0)
             for p in results["pairs"])
    if not ok:
        bad(f"--from-results {path}: a pair without a valid comparison index or ratio")
    return results


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog="peers_compare.py",
                                     description=__doc__.split("\n\n")[0])
    add_grid_options(parser, steps=6)
    add_workload_options(parser)
    parser.add_argument("--write", action="store_true",
                        help=f"write {RESULTS.relative_to(ROOT)} and the table of "
                             f"{DOC.relative_to(ROOT)} (--workload filtering: "
                             f"{FILTERING_RESULTS.relative_to(ROOT)} and its table)")
    parser.add_argument("--ranking", action="store_true",
                        help="run the ranking (docs/peers.md, \"The ranking\"): per eta of "
                             "--etas (default 1,2) an A/A comparison and Reserve-Occupy "
                             "(streaming, keep) against every rule at its best settings; at the "
                             "first eta, keep against abort, streaming against whole batch, and "
                             "eta 0; --write writes docs/results/peers_ranking.json and its "
                             "table")
    parser.add_argument("--no-gradient", type=float_in(0.0, MAX_NO_GRADIENT, lo_open=True),
                        default=None, metavar="SHARE",
                        help=f"the filtering workload's share of prompts without gradient, in "
                             f"(0, {MAX_NO_GRADIENT:g}] (default "
                             f"{WORKLOADS['filtering']['no_gradient']:g}); only with "
                             f"--workload filtering")
    parser.add_argument("--rows", type=Path, default=None,
                        help="append each run's row to this JSONL file as it ends")
    parser.add_argument("--from-results", type=Path, default=None, metavar="RESULTS",
                        help="run nothing: print the table of a results file of a grid (e.g. "
                             "docs/results/peers_compare.json) with its pairs summarized again "
                             "by --interval and --level")
    parser.add_argument("--results", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    def bad(msg: str) -> None:
        print(f"peers_compare: {msg}", file=sys.stderr)
        raise SystemExit(2)

    if args.from_results is not None:
        if args.write:
            bad("--from-results prints only: --write is for a grid that ran (the committed "
                "tables are the grids' as run)")
        if not (math.isfinite(args.level) and 0 < args.level < 1):
            bad(f"--level must be a number in (0, 1) (got {args.level})")
        args.stored = read_results(args.from_results, bad)
        return args
    apply_workload(args, raw, bad)
    if args.results is None:
        args.results = (RANKING_RESULTS if args.ranking else
                        FILTERING_RESULTS if args.no_gradient > 0 else RESULTS)
    args.begin, args.end = ((RANKING_BEGIN, RANKING_END) if args.ranking else
                            (FILTERING_BEGIN, FILTERING_END) if args.no_gradient > 0 else
                            (BEGIN, END))
    if args.rows is not None:
        _writable(args.rows, "--rows", bad)
    check_write(args, bad, args.begin, args.end)
    return args


if __name__ == "__main__":
    args = parse()
    if args.from_results is not None:
        try:
            print(render(resummarize(args.stored, args.interval, args.level)))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            print(f"peers_compare: --from-results {args.from_results}: not a results file of "
                  f"this version ({e.__class__.__name__}: {e})", file=sys.stderr)
            raise SystemExit(2)
        raise SystemExit(0)
    t0 = time.perf_counter()
    workload = workload_record(args.workload, args.shape, args.median, args.sigma, args.steps,
                               args.seed_list, args.no_gradient)
    print("\n".join(workload_lines(workload)), flush=True)
    results = asyncio.run(main(args.grid, args.seed_list, args.steps, args.median, args.sigma,
                               args.rows, warmup_steps=args.warmup_steps, order=args.order,
                               order_seed=args.order_seed, method=args.interval,
                               level=args.level, pin=args.pin,
                               comps=args.comps,
                               shape=args.shape, no_gradient=args.no_gradient))
    results = {"settings": {**SETTINGS, "staleness.batch_size": args.shape[0],
                            "staleness.group_size": args.shape[1]},
               "steps": args.steps, "seeds": args.seed_list, "workload": workload,
               "headline": args.headline, "ranking": args.ranking,
               "no_gradient": args.no_gradient,
               "etas": args.eta_list, "lognormal": {"median": args.median, "sigma": args.sigma},
               "reference": dict(zip(("policy", "streaming", "refit"), REF)),
               "shipped": dict(zip(("policy", "streaming", "refit"), SHIPPED)),
               "grid_wall_s": round(time.perf_counter() - t0, 1), **results}
    print(render(results))
    if args.write:
        write(results, args.results, args.doc, args.begin, args.end)
