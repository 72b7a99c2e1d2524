"""Scale: the controller's cost per operation from B = 16 to 4,096, and a 1,000-GPU deployment simulated with every peer.

Two parts (issue 38, item 4), each written to its own block of docs/scale.md from
docs/results/scale.json (``--write``; tests/sim/test_scale_doc.py holds the page to the file):

* ``core``: ns per call of the pure core's operations at each batch size B of
  ``--batch-sizes`` and each eta of ``--etas`` (capacity B, max_concurrency 2.5 B, as
  bench/core_bench.py). ``reserve``, ``occupy`` and ``consume+publish`` (per batch) come from
  core_bench's steady-state loop (admit while allowed, finish a random in-flight unit, consume
  and publish whenever the head is READY); ``stream`` from the same loop with
  ``Config.streaming``, calling ``stream`` after every ``occupy`` (what a streaming runtime
  does); ``release_stuck`` from a STUCK head built on purpose (every slot reserved, then B - 8
  occupied: the head holds B - 8 OCCUPIED units and 8 reservations), per unit it aborts; beside
  them, the caller's share of a batch (``caller_times``: reading ``batch.units`` once, and
  freeing the batch, which keeps the consumed buffer, once nothing else holds it). Each round
  takes every operation's median; the table gives the median of the rounds' medians and their
  range (min-max), so a preempted round shows as spread, not as cost.
* ``sim``: a deployment of ``--nodes`` nodes of 8 H20 (128: 1,024 GPUs), the preset
  ``qwen3-8b-h20`` scaled as docs/simulator.md says (``cost.scale_nodes``: 2 rollout engines
  and 6 training GPUs a node), a batch of ``--sim-batch`` groups, ``--sim-steps`` steps, each
  policy of ``--policies`` at ``--sim-eta``: throughput against Reserve–Occupy's, trained
  staleness, what was dropped, and the simulator's own cost: simulated events per CPU second,
  and from it what a simulated week of training costs. The few knobs a peer ships sized for a
  small deployment are scaled by batch / 16 (``scaled_options``; ``--as-shipped``: not). Rows
  are merged into the results file by (policy, eta, options) when the settings match, so the
  peers can run one process each.

Prints numbers; asserts nothing about time (the host is shared).
"""

from __future__ import annotations

import gc
import json
import platform
import random
import statistics
import sys as _sys
import time
from pathlib import Path as _Path
from typing import Any

if str(_Path(__file__).resolve().parents[1]) not in _sys.path:
    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

from bench.cli import Parser, bad, int_in, int_list, out_path  # noqa: E402
from bench.core_bench import bare_trigger, drive  # noqa: E402
from bench.docblock import between, splice  # noqa: E402
from reserve_occupy import Config, StalenessController  # noqa: E402

ROOT = _Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "scale.json"
DOC = ROOT / "docs" / "scale.md"
CORE_BEGIN, CORE_END = "<!-- begin: scale-core (generated) -->", "<!-- end: scale-core -->"
SIM_BEGIN, SIM_END = "<!-- begin: scale-sim (generated) -->", "<!-- end: scale-sim -->"

CORE_OPS = ("reserve", "occupy", "consume+publish", "stream", "release_stuck")
CALLER_OPS = ("batch read", "batch free")  # the caller's, per batch (caller_times)
WEEK_S = 7 * 24 * 3600


# ------------------------------------------------------------------------- the core --------

def steady_loop(c: Any, units: int, seed: int) -> Any:
    """core_bench's steady-state loop on controller ``c``, untimed, as a generator: admit
    while allowed, then consume (and publish) a READY head or finish a random in-flight unit,
    until ``units`` units finished. It yields ``("batch", batch)`` after each consume that
    handed a batch, before its publish, and ``("occupy", placement)`` after each occupy: the
    caller times what it does there (``stream_times``, ``caller_times``)."""
    rng = random.Random(seed)
    in_flight: list[int] = []
    next_id = done = 0
    while done < units:
        while c.reserve(next_id) is not None:
            in_flight.append(next_id)
            next_id += 1
        b = c.consume()
        if b is not None:
            yield "batch", b
            c.publish()
            continue
        i = rng.randrange(len(in_flight))
        in_flight[i], in_flight[-1] = in_flight[-1], in_flight[i]
        p = c.occupy(in_flight.pop())
        done += 1
        for a in p.aborted:
            in_flight.remove(a)
        yield "occupy", p


def stream_times(cfg: Config, units: int, seed: int) -> list[int]:
    """ns of every ``stream`` call in core_bench's steady-state loop run with streaming on: one
    call after each ``occupy`` (the trainer is idle between batches here)."""
    c = StalenessController(cfg)
    out: list[int] = []
    clock = time.perf_counter_ns
    for what, _ in steady_loop(c, units, seed):
        if what == "occupy":
            t0 = clock()
            c.stream()
            out.append(clock() - t0)
    return out


def caller_times(cfg: Config, units: int, seed: int) -> dict[str, list[int]]:
    """What a caller pays for the batches ``consume`` hands out, ns per batch: ``read``, one
    pass over ``batch.units`` right after consume (core_bench's steady-state loop), each unit
    fetched and nothing done with it (what the copy into a tuple did at consume before);
    ``free``, dropping a batch once nothing else holds it, which frees its units' entries and
    the consumed buffer the batch keeps (``BatchUnits``). The controller's event log holds
    every batch, so a batch is freed when the controller is: the batches are freed one by one,
    timed, after it was dropped."""
    c = StalenessController(cfg)
    read: list[int] = []
    batches: list[Any] = []
    clock = time.perf_counter_ns
    for what, b in steady_loop(c, units, seed):
        if what == "batch":
            t0 = clock()
            for _ in b.units:  # each unit fetched, as any loop over the batch does
                pass
            read.append(clock() - t0)
            batches.append(b)
    del c, b
    gc.collect()
    free = []
    while batches:
        t0 = clock()
        batches.pop()
        free.append(clock() - t0)
    return {"read": read, "free": free}


STUCK_RESERVED = 8  # reservations left in the STUCK head that release_stuck aborts per call


def stuck_times(cfg: Config, reps: int, seed: int) -> list[float]:
    """ns per aborted unit of ``release_stuck`` on a head made STUCK: every slot of the window
    reserved, then B - 8 random units occupied (each lands in the head, shifting a reservation
    out of it), so the head holds B - 8 OCCUPIED units and 8 reservations (B/2 each below
    B = 16). A call that aborts a fixed few units is short at every B, so the host's
    preemptions land in few of them and the median sheds them (a call aborting B/2 units at
    B = 4,096 runs for milliseconds and is always preempted on a shared host). Each timed call
    starts after a full garbage collection, which the set-up would otherwise owe it."""
    rng = random.Random(seed)
    out: list[float] = []
    clock = time.perf_counter_ns
    keep = min(STUCK_RESERVED, max(1, cfg.batch_size // 2))
    for _ in range(reps):
        c = StalenessController(cfg)
        n = 0
        while c.reserve(n) is not None:
            n += 1
        for u in rng.sample(range(n), cfg.batch_size - keep):
            c.occupy(u)
        gc.collect()
        t0 = clock()
        aborted = c.release_stuck()
        dt = clock() - t0
        if not aborted:
            raise RuntimeError(f"B={cfg.batch_size} eta={cfg.max_staleness}: head not STUCK")
        out.append(dt / len(aborted))
    return out


def core_round(b: int, eta: int, units: int, min_batches: int, seed: int) -> dict[str, float]:
    """One round at (B, eta): the median ns of each operation."""
    cfg = Config(eta, b, b, max(1, round(2.5 * b)))
    times = drive(lambda: StalenessController(cfg), max(units, min_batches * b), seed=seed)
    med = {op: float(statistics.median(times[op])) for op in ("reserve", "occupy",
                                                                "consume+publish")}
    scfg = Config(eta, b, b, max(1, round(2.5 * b)), streaming=True)
    med["stream"] = float(statistics.median(stream_times(scfg, max(units, min_batches * b) // 2,
                                                         seed)))
    stuck_cfg = Config(eta, b, b)
    med["release_stuck"] = float(statistics.median(
        stuck_times(stuck_cfg, 15, seed)))
    caller = caller_times(cfg, max(units, min_batches * b) // 2, seed)
    for op in CALLER_OPS:
        med[op] = float(statistics.median(caller[op.split()[-1]]))
    return med


def run_core(batch_sizes: list[int], etas: list[int], rounds: int, units: int,
             min_batches: int, trigger_calls: int, echo: bool = True) -> dict[str, Any]:
    per: dict[tuple[int, int], list[dict[str, float]]] = {(e, b): [] for e in etas
                                                          for b in batch_sizes}
    trigger: list[int] = []
    for rnd in range(rounds):
        trigger += bare_trigger(trigger_calls)
        for eta in etas:
            for b in batch_sizes:  # rounds alternate the configurations (core_bench's reason)
                per[eta, b].append(core_round(b, eta, units, min_batches, seed=rnd))
                if echo:
                    print(f"  round {rnd + 1}/{rounds} eta={eta} B={b}: " + ", ".join(
                        f"{op} {per[eta, b][-1][op]:.0f}" for op in CORE_OPS), flush=True)
    rows = []
    for (eta, b), meds in per.items():
        ops, caller = ({op: {"median": statistics.median(m[op] for m in meds),
                             "lo": min(m[op] for m in meds), "hi": max(m[op] for m in meds)}
                        for op in group} for group in (CORE_OPS, CALLER_OPS))
        rows.append({"eta": eta, "B": b, "ops": ops, "caller": caller})
    return {"settings": {"batch_sizes": batch_sizes, "etas": etas, "rounds": rounds,
                         "units": units, "min_batches": min_batches,
                         "max_concurrency": "2.5 B", "python": platform.python_version()},
            "bare_trigger_ns": float(statistics.median(trigger)), "rows": rows}


def _ns(x: float) -> str:
    return f"{x:,.0f}"


def render_core(results: dict[str, Any]) -> str:
    core = results["core"]
    rows = core["rows"]
    s = core["settings"]
    lines = [f"ns per call, median of {s['rounds']} rounds' medians (their range in brackets); "
             f"`consume+publish` per batch, `release_stuck` per unit it aborts; "
             f"capacity B, max_concurrency {s['max_concurrency']}; Python {s['python']}; "
             f"a bare `transitions` trigger took {core['bare_trigger_ns']:,.0f} ns. "
             f"The caller's share, per batch: `batch read`, one bare pass over `batch.units`; "
             f"`batch free`, dropping a batch nobody else holds (`caller_times`).", "",
             "| eta | B | " + " | ".join(CORE_OPS) + " | consume+publish ÷ B | "
             + " | ".join(CALLER_OPS) + " |",
             "|---:|---:|" + "---:|" * (len(CORE_OPS) + 1 + len(CALLER_OPS))]
    for r in rows:
        cells = [f"{_ns(cell['median'])} [{_ns(cell['lo'])}–{_ns(cell['hi'])}]"
                 for cell in (*(r["ops"][op] for op in CORE_OPS),
                              *(r["caller"][op] for op in CALLER_OPS))]
        per_unit = r["ops"]["consume+publish"]["median"] / r["B"]
        lines.append(f"| {r['eta']} | {r['B']:,} | " + " | ".join(cells[:len(CORE_OPS)])
                     + f" | {per_unit:,.1f} | " + " | ".join(cells[len(CORE_OPS):]) + " |")
    by = {(r["eta"], r["B"]): r for r in rows}
    sizes = sorted({r["B"] for r in rows})
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        lines += ["", f"Largest over smallest B (B = {hi:,} ÷ B = {lo:,}, medians):", "",
                  "| eta | " + " | ".join(CORE_OPS) + " |", "|---:|" + "---:|" * len(CORE_OPS)]
        for eta in sorted({r["eta"] for r in rows}):
            if (eta, lo) in by and (eta, hi) in by:
                cells = [f"{by[eta, hi]['ops'][op]['median'] / by[eta, lo]['ops'][op]['median']:.2f}"
                         for op in CORE_OPS]
                lines.append(f"| {eta} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------- the simulator ---

REFERENCE_BATCH = 16  # the batch the preset and every other study use


def scaled_options(name: str, batch: int) -> dict[str, int]:
    """The knobs a peer ships sized for a small deployment, scaled by batch / 16 (the preset's
    batch), so that they do not throttle a large one where the framework's user would raise
    them: NeMo-RL's ``max_inflight_prompts`` (32) and ``max_buffered_rollouts`` (64),
    prime-rl's ``max_inflight`` episodes (1,024) and TRL's ``queue_maxsize`` samples (1,024).
    Every other rule's limits are already in units of the batch. ``{}`` at batch <= 16."""
    f = batch // REFERENCE_BATCH
    if f <= 1:
        return {}
    if name.startswith("nemo_"):
        return {"max_inflight_prompts": 32 * f, "max_buffered_rollouts": 64 * f}
    if name == "prime_rl":
        return {"max_inflight": 1024 * f}
    if name == "trl":
        return {"queue_maxsize": 1024 * f}
    return {}


def run_sim(policies: list[str], eta: int, nodes: int, batch: int, steps: int, seed: int,
            echo: bool = True, as_shipped: bool = False) -> dict[str, Any]:
    from reserve_occupy_sim.model.cost import preset, scale_nodes
    from reserve_occupy_sim.model.runner import RunSpec, simulate
    from reserve_occupy_sim.model.workload import generate

    cost = scale_nodes(preset("qwen3-8b-h20"), nodes)
    workload = generate(seed)
    rows = []
    for name in policies:
        options = {} if as_shipped else scaled_options(name, batch)
        c0, w0 = time.process_time(), time.perf_counter()
        result, sim = simulate(RunSpec(name, eta, steps, batch_size=batch,
                                       options=tuple(options.items())), workload, cost)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        trained = [s for counts in result.staleness_counts for s, n in enumerate(counts)
                   for _ in range(n)]
        row = {"policy": name, "label": result.label, "eta": eta, "options": options,
               "bounded": result.bounded,
               "throughput": result.throughput, "sim_s": result.wall_s,
               "staleness_mean": statistics.fmean(trained) if trained else 0.0,
               "staleness_max": result.max_staleness,
               "dropped": result.fates["dropped"], "aborted": result.fates["aborted"],
               "trained": result.fates["trained"], "events": sim.events,
               "cpu_s": cpu, "wall_s": wall}
        rows.append(row)
        if echo:
            print(f"  {name} eta={eta}: {result.throughput:,.0f} tok/s, {sim.events:,} events "
                  f"in {cpu:.1f} CPU s ({sim.events / cpu:,.0f}/s), dropped "
                  f"{row['dropped']:,}, staleness mean {row['staleness_mean']:.2f} max "
                  f"{row['staleness_max']}", flush=True)
    return {"settings": {"nodes": nodes, "gpus": 8 * nodes, "engines": cost.instances,
                         "concurrency": cost.concurrency,
                         "training_gpus": 6 * nodes, "batch": batch, "group_size":
                         workload.group_size, "steps": steps, "seed": seed,
                         "cost": cost.name, "python": platform.python_version()},
            "rows": rows}


def _duration(hours: float) -> str:
    return f"{hours:.1f} h" if hours >= 1 or hours != hours else f"{hours * 60:.0f} min"


def _options(row: dict[str, Any]) -> dict[str, int]:
    return row.get("options") or {}


def _key(row: dict[str, Any]) -> tuple[str, int, str]:
    return row["policy"], row["eta"], json.dumps(_options(row), sort_keys=True)


def _order(name: str) -> int:
    from reserve_occupy_peers import POLICIES

    names = list(POLICIES)
    return names.index(name) if name in names else len(names)


def render_sim(results: dict[str, Any]) -> str:
    sim = results["sim"]
    s = sim["settings"]
    rows = sorted(sim["rows"], key=lambda r: (r["eta"], _order(r["policy"]),
                                              bool(_options(r))))
    ro = {r["eta"]: r for r in rows if r["policy"] == "reserve_occupy" and not _options(r)}
    lines = [f"{s['nodes']} nodes of 8 H20 ({s['gpus']:,} GPUs: {s['engines']} rollout engines "
             f"of concurrency {s['concurrency']}, {s['training_gpus']} training GPUs), "
             f"cost `{s['cost']}`; a batch of {s['batch']:,} groups of {s['group_size']}, "
             f"{s['steps']} steps, workload seed {s['seed']}; Python {s['python']}. "
             f"RO ÷ it: Reserve–Occupy's throughput over the row's; a week: the CPU time "
             f"to simulate 7 days of this training (simulated events per second of simulated "
             f"time × 604,800 s ÷ events per CPU second).", "",
             "| policy | eta | tokens/s | RO ÷ it | staleness mean / max | dropped | aborted "
             "| simulated h | events | CPU s | events / CPU s | a week |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        base = ro.get(r["eta"])
        ratio = f"{base['throughput'] / r['throughput']:.3f}" if base and r["throughput"] else "–"
        rate = r["events"] / r["cpu_s"] if r["cpu_s"] else float("nan")
        week_h = r["events"] / r["sim_s"] * WEEK_S / rate / 3600 if r["sim_s"] else float("nan")
        label = r["label"] + ("".join(f", {k} {v:,}" for k, v in _options(r).items())
                              if _options(r) else (" (as shipped)" if scaled_options(
                                  r["policy"], s["batch"]) else ""))
        lines.append(
            f"| {label} | {r['eta']} | {r['throughput']:,.0f} | {ratio} | "
            f"{r['staleness_mean']:.2f} / {r['staleness_max']} | {r['dropped']:,} | "
            f"{r['aborted']:,} | {r['sim_s'] / 3600:.1f} | {r['events']:,} | {r['cpu_s']:.1f} | "
            f"{rate:,.0f} | {_duration(week_h)} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------- files -----------

def load(path: _Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def merge_sim(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s rows over ``old``'s, by (policy, eta, options), when the deployment is the same (the
    settings but the Python version); otherwise ``new`` alone."""
    def key(s: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in s.items() if k != "python"}

    if not old or key(old["settings"]) != key(new["settings"]):
        return new
    rows = {_key(r): r for r in old["rows"]}
    rows.update({_key(r): r for r in new["rows"]})
    return {"settings": new["settings"], "rows": list(rows.values())}


def write(results: dict[str, Any], results_path: _Path, doc: _Path) -> None:
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    if "core" in results:
        splice(doc, CORE_BEGIN, CORE_END, render_core(results))
    if "sim" in results:
        splice(doc, SIM_BEGIN, SIM_END, render_sim(results))


def doc_blocks(text: str) -> dict[str, str]:
    return {"core": between(text, CORE_BEGIN, CORE_END), "sim": between(text, SIM_BEGIN, SIM_END)}


def main(argv: list[str] | None = None) -> None:
    ap = Parser(prog="scale.py", description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("core", "sim", "both"), default="both")
    ap.add_argument("--batch-sizes", type=int_list(1, 1 << 16), default=[16, 64, 256, 1024, 4096])
    ap.add_argument("--etas", type=int_list(0, 64), default=[1, 2])
    ap.add_argument("--rounds", type=int_in(1, 1000), default=3)
    ap.add_argument("--units", type=int_in(1, 10**8), default=20_000,
                    help="finished units per configuration and round, at the least")
    ap.add_argument("--min-batches", type=int_in(1, 10**6), default=30,
                    help="raise --units where a configuration would consume fewer batches")
    ap.add_argument("--trigger-calls", type=int_in(100, 10**8), default=20_000)
    ap.add_argument("--policies", default="all",
                    help="comma list of the simulator's policies, or all")
    ap.add_argument("--sim-eta", type=int_in(0, 64), default=1)
    ap.add_argument("--nodes", type=int_in(1, 4096), default=128,
                    help="nodes of 8 H20 (2 rollout engines, 6 training GPUs each)")
    ap.add_argument("--sim-batch", type=int_in(1, 1 << 16), default=1024)
    ap.add_argument("--sim-steps", type=int_in(1, 10**6), default=100)
    ap.add_argument("--as-shipped", action="store_true",
                    help="the peers' defaults unscaled (scaled_options: NeMo-RL's in-flight and "
                         "buffered prompts, prime-rl's in-flight episodes, TRL's queue)")
    ap.add_argument("--seed", type=int_in(0, 2**31), default=0)
    ap.add_argument("--results", type=out_path, default=RESULTS)
    ap.add_argument("--doc", type=out_path, default=DOC)
    ap.add_argument("--write", action="store_true",
                    help="write --results and the page's blocks (else print only)")
    args = ap.parse_args(argv)
    from reserve_occupy_peers import UnknownPolicy, policy_names

    try:
        policies = policy_names(args.policies)
    except UnknownPolicy as exc:
        bad("scale.py", f"--policies: {exc}")
    if args.write and not args.doc.is_file():
        bad("scale.py", f"--doc {args.doc}: no such file (the page with the markers)")
    try:
        results = load(args.results) if args.write else {}
    except (OSError, ValueError) as exc:
        bad("scale.py", f"--results {args.results}: cannot read it ({exc})")
    if args.part in ("core", "both"):
        print(f"core: B = {args.batch_sizes}, eta = {args.etas}, {args.rounds} rounds", flush=True)
        results["core"] = run_core(args.batch_sizes, args.etas, args.rounds, args.units,
                                   args.min_batches, args.trigger_calls)
        print(render_core(results))
    if args.part in ("sim", "both"):
        print(f"sim: {args.nodes} nodes, batch {args.sim_batch}, {args.sim_steps} steps, "
              f"eta {args.sim_eta}: {', '.join(policies)}", flush=True)
        new = run_sim(policies, args.sim_eta, args.nodes, args.sim_batch, args.sim_steps,
                      args.seed, as_shipped=args.as_shipped)
        results["sim"] = merge_sim(results.get("sim"), new)
        print(render_sim(results))
    if args.write:
        write(results, args.results, args.doc)
        print(f"wrote {args.results} and {args.doc}")


if __name__ == "__main__":
    main()
