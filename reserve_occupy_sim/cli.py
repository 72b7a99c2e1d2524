"""``reserve-occupy simulate``: run policies over eta values on a workload, or the experiments.

    reserve-occupy simulate [run] --policy all --eta 1,2,3 --batches 10 [--workload FILE.jsonl]
                            [--preset NAME | --cost FILE.json] [--out DIR]
                            [--filter-rate R [--filter-skew S]] [--stuck-timeout SECONDS]
                            [--capacity C] [--candidates K] [--progress-close]
                            [--idle-surplus] [--head-priority] [--lookahead N]
                            [--chunk-groups N [--chunk-overhead S] [--chunk-share X]
                             [--streaming]] [--no-reprefill]
    reserve-occupy simulate experiments [--results-dir DIR] [--img-dir DIR] [--only 1,...,6]
    reserve-occupy simulate regimes [--tiny] [--seeds N] [--batches N]
    reserve-occupy simulate regimes --add-peers [--tiny] [--results-dir DIR]
    reserve-occupy simulate list

``run`` prints one row per (eta, policy) with Reserve–Occupy's speed-up over each and writes
``results.json`` plus PNG figures to ``--out``. Bad input (a malformed workload line, an unknown
cost field or policy, a number outside ``LIMITS``, an unreadable file, an output directory that
cannot be created) is reported in one line naming what is wrong, exit status 2, before anything
runs; a policy that stalls (``SimulationStalled``) or breaks a check exits with status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from reserve_occupy import ConfigError
from reserve_occupy.config import MAX_SLOTS, MAX_STALENESS

from runtime import inputs
from runtime.inputs import InputError
from runtime import atomic_io
from reserve_occupy_peers import POLICIES, UnknownPolicy, policy_names

from .model.checks import CheckFailed
from .model.core import PolicyError, SimulationStalled
from .model.cost import DEFAULT_PRESET, PRESETS, CostError, CostModel, load_cost, preset
from .model.filtering import FilterError, RewardFilter
from .model.workload import MathReasoningShape, Workload, WorkloadError, generate, load_workload

PROG = "reserve-occupy simulate"


UsageError = InputError  # bad arguments: one line, exit status 2

LIMITS = inputs.SIM_LIMITS  # option -> (lowest, highest)
MAX_STUCK_TIMEOUT_S = 1e9
MAX_CHUNK_OVERHEAD_S = 1e6


def _int_list(text: str, what: str) -> list[int]:
    values = inputs.int_list(f"--{what}", text)
    if what == "eta" and max(values) > MAX_STALENESS:
        raise UsageError(f"--eta values must be <= {MAX_STALENESS}, got {max(values)}")
    return values


OUT_FILES = ("results.json", "throughput.png")  # and staleness_*.png: what a run writes


def _fresh_out(out: Path, overwrite: bool) -> None:
    """``--out`` never mixes two runs' files: an earlier run's results are refused, or with
    ``--overwrite`` moved aside whole (as ``train --overwrite`` moves a run directory)."""
    held = [n for n in OUT_FILES if (out / n).exists()] + sorted(
        p.name for p in out.glob("staleness_*.png"))
    if not held:
        return
    here = Path.cwd().resolve()
    if out.resolve() in (here, *here.parents):  # `--out .`: no rename can move it aside
        raise UsageError(f"--out {out} holds an earlier run's results ({', '.join(held)}) and "
                         f"is the current directory or holds it, so --overwrite cannot move "
                         f"it aside: choose another --out")
    if not overwrite:
        raise UsageError(f"--out {out} holds an earlier run's results ({', '.join(held)}): add "
                         f"--overwrite (moves them aside to {out}.replaced-N) or choose "
                         f"another --out")
    from runtime.recovery.rundir import RunDirError, move_aside

    try:
        moved = move_aside(out)
    except RunDirError as exc:
        raise UsageError(str(exc)) from None
    out.mkdir()
    print(f"{PROG}: moved the earlier results in {out} aside to {moved}")


# The options each mode uses (by argparse dest); an option given to a mode that does not use
# it is refused (``_check_used``) rather than accepted and ignored (before: ``simulate run
# --results-dir DIR`` ran and wrote nothing there).
_WORKLOAD_COST = {"workload", "seed", "groups", "preset", "cost", "instances", "concurrency",
                  "chunk_groups", "chunk_overhead", "chunk_share", "no_reprefill",
                  "no_progress"}
MODE_OPTIONS: dict[str, frozenset[str]] = {
    "run": frozenset(_WORKLOAD_COST | {
        "policy", "eta", "batches", "batch_size", "filter_rate", "filter_skew",
        "stuck_timeout", "capacity", "candidates", "progress_close", "idle_surplus",
        "head_priority", "lookahead", "streaming", "out", "overwrite"}),
    "experiments": frozenset(_WORKLOAD_COST | {"results_dir", "img_dir", "only", "seeds",
                                               "tiny", "batches"}),
    "regimes": frozenset(_WORKLOAD_COST | {"results_dir", "img_dir", "seeds", "tiny",
                                           "batches", "add_peers"}),
    "list": frozenset(),
}


def _check_used(args: argparse.Namespace) -> None:
    """``UsageError`` naming the first option given that ``args.mode`` does not use (a value
    other than the option's default)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    for action in parser._actions:
        dest = action.dest
        if dest == "mode" or dest in MODE_OPTIONS[args.mode] or not hasattr(args, dest):
            continue
        if getattr(args, dest) != action.default:
            users = [m for m, used in MODE_OPTIONS.items() if dest in used]
            raise UsageError(f"{action.option_strings[0]} is not used by `simulate "
                             f"{args.mode}` (only by {', '.join(users) or 'no mode'}): leave "
                             f"it out")


def _check(args: argparse.Namespace) -> None:
    """Every option and input file, before any work (docs/cli.md lists these checks)."""
    _check_used(args)
    for name, (lo, hi) in LIMITS.items():
        inputs.int_in("--" + name.replace("_", "-"), getattr(args, name), lo, hi)
    inputs.number_in("--stuck-timeout", args.stuck_timeout, 0.0, MAX_STUCK_TIMEOUT_S,
                     open_low=True)
    inputs.number_in("--chunk-overhead", args.chunk_overhead, 0.0, MAX_CHUNK_OVERHEAD_S)
    inputs.number_in("--chunk-share", args.chunk_share, 0.0, 1.0)
    if args.streaming and not args.chunk_groups:
        raise UsageError("--streaming needs a streaming trainer (--chunk-groups >= 1)")
    if args.streaming and args.stuck_timeout is not None:
        raise UsageError("--streaming with --stuck-timeout is not modelled")
    if args.mode == "run":
        etas = _int_list(args.eta, "eta")
        names = policy_names(args.policy)
        # validates both, also at rate 0 (a NaN or inf skew was taken then, unread)
        RewardFilter(args.filter_rate, args.filter_skew, args.seed)
        slots = args.capacity or args.batch_size
        worst = (max(etas) + 1) * slots
        if "reserve_occupy" in names and worst > MAX_SLOTS:  # its controller's (eta + 1) * C
            what = "--capacity" if args.capacity else "--batch-size"
            raise UsageError(f"{what} {slots} at eta {max(etas)} needs {worst:,} slots, more "
                             f"than the controller's limit of {MAX_SLOTS:,}")
    if args.workload is not None:  # '' too: refused, not taken for "not given"
        inputs.readable_file(args.workload, "--workload")
    if args.cost is not None:
        inputs.text_file(args.cost, "--cost", inputs.COST_FILE_BYTES)
    if args.mode == "run" and args.out is not None:  # '' too: refused, not "no --out"
        inputs.output_dir(args.out, "--out", files=(
            *OUT_FILES, *(f"staleness_{n}.png" for n in policy_names(args.policy))))
        _fresh_out(Path(args.out), args.overwrite)
    if args.mode in ("experiments", "regimes"):
        # A tiny sweep must never overwrite the shipped results of the full one in docs/.
        base = Path("out/sim-tiny") if args.tiny else Path("docs")
        if args.results_dir is None:  # '' is refused below, not taken for the default
            args.results_dir = str(base / "results")
        if args.img_dir is None:
            args.img_dir = str(base / "img")
        inputs.output_dir(args.results_dir, "--results-dir")
        inputs.output_dir(args.img_dir, "--img-dir")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", nargs="?", default="run",
                        choices=["run", "experiments", "regimes", "list"],
                        help="run policies (default), run the experiments, run only the regime "
                             "map (experiment 6), or list policies and cost presets")
    g = parser.add_argument_group("what to run")
    g.add_argument("--policy", default="all",
                   help=f"comma-separated policies or 'all' ({', '.join(POLICIES)})")
    g.add_argument("--eta", default="1,2,3", help="comma-separated staleness bounds (1,2,3)")
    g.add_argument("--batches", type=int, default=None,
                   help="training batches per run (10; regimes: 60)")
    g.add_argument("--batch-size", type=int, default=16, help="groups per batch (16)")
    w = parser.add_argument_group("workload")
    w.add_argument("--workload", "--trace", metavar="FILE.jsonl",  # --trace: its older name
                   help="JSONL workload file, one group per line: "
                        '{"group": id, "prompt_len": n, "response_lens": [n, ...]}')
    w.add_argument("--seed", type=int, default=0, help="seed of the synthetic workload (0)")
    w.add_argument("--groups", type=int, default=1024, help="groups the generator makes (1024)")
    w.add_argument("--filter-rate", type=float, default=0.0,
                   help="reward filtering: mean share of groups with no gradient (0 = off)")
    w.add_argument("--filter-skew", type=float, default=1.0,
                   help="tilt of the no-gradient share toward long (>0) or short (<0) groups (1)")
    g.add_argument("--stuck-timeout", type=float, default=None, metavar="SECONDS",
                   help="reserve_occupy: release a STUCK head buffer after the trainer waited "
                        "this long (spec §6.2; off)")
    v = parser.add_argument_group("oversampling and extensions (reserve_occupy unless noted)")
    v.add_argument("--capacity", type=int, default=None,
                   help="slots per buffer, > batch size: batch-level oversampling (spec §6.6)")
    v.add_argument("--candidates", type=int, default=None,
                   help="every policy: samples admitted per group; the first group-size to "
                        "finish commit, the rest are aborted (spec §6.5)")
    v.add_argument("--progress-close", action="store_true",
                   help="at closure abort the reservations that decoded least (needs --capacity)")
    v.add_argument("--idle-surplus", action="store_true",
                   help="surplus reservations only into free engine slots (needs --capacity)")
    v.add_argument("--head-priority", action="store_true",
                   help="the head buffer's groups first in the engine queue")
    v.add_argument("--lookahead", type=int, default=0,
                   help="admit the longest earlier-epoch prompt of the next N first (0: off)")
    t = parser.add_argument_group("trainer and engine (every policy; override the cost model)")
    t.add_argument("--chunk-groups", type=int, default=None,
                   help="streaming trainer: train chunks of at least this many finished groups "
                        "(NeMo-RL's min_groups_for_streaming_train); 0: whole batches "
                        "(the cost model's; default 0)")
    t.add_argument("--chunk-overhead", type=float, default=None, metavar="SECONDS",
                   help="streaming trainer: seconds every chunk pays besides its tokens (1)")
    t.add_argument("--chunk-share", type=float, default=None,
                   help="streaming trainer: share of the per-token work a chunk runs, in "
                        "[0, 1] (1: forward+backward per chunk; PSRL's recompute scope 0.2)")
    t.add_argument("--streaming", action="store_true",
                   help="reserve_occupy: hand the trainer the head buffer's finished units "
                        "before it is READY (needs --chunk-groups)")
    t.add_argument("--no-reprefill", action="store_true",
                   help="engines keep the KV cache across a weight update (in-flight refit, "
                        "as NeMo-RL's default); default: running contexts re-prefill")
    c = parser.add_argument_group("cost model")
    c.add_argument("--preset", default=DEFAULT_PRESET,
                   help=f"named cost preset ({', '.join(PRESETS)})")
    c.add_argument("--cost", metavar="FILE.json",
                   help="cost model JSON; fields it omits keep the default preset's")
    c.add_argument("--instances", type=int, help="rollout instances (override)")
    c.add_argument("--concurrency", type=int, help="max running requests per instance (override)")
    o = parser.add_argument_group("output")
    o.add_argument("--out", metavar="DIR", help="write results.json and PNG figures here")
    o.add_argument("--overwrite", action="store_true",
                   help="--out holds an earlier run's results: move them aside to "
                        "DIR.replaced-N (nothing is deleted) and write anew")
    o.add_argument("--results-dir", default=None,
                   help="experiments: JSON goes here (default docs/results; out/sim-tiny/results "
                        "with --tiny)")
    o.add_argument("--img-dir", default=None,
                   help="experiments: PNGs go here (default docs/img; out/sim-tiny/img with --tiny)")
    o.add_argument("--only", default="1,2,3,4,5,6",
                   help="experiments: which ones (1 correctness, 2 throughput, 3 ceiling, "
                        "4 filtering, 5 timeout, 6 regime map; default all)")
    o.add_argument("--tiny", action="store_true",
                   help="regimes: a tiny sweep (seconds), for a quick look or a test")
    o.add_argument("--add-peers", action="store_true",
                   help="regimes: keep the stored regimes.json of --results-dir and run only the "
                        "peers of issue 38 its cells lack (each cell's Reserve–Occupy runs are "
                        "made again and must equal the stored ones), and filtered cells stored "
                        "before the same-prompts measure (run again whole)")
    o.add_argument("--seeds", type=int, default=None,
                   help="experiments: workload seeds (experiment 2's spread: 8; the regime map: "
                        "3)")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")


def _cost(args: argparse.Namespace) -> CostModel:
    model = load_cost(args.cost) if args.cost else preset(args.preset)
    for field in ("instances", "concurrency"):
        value = getattr(args, field)
        if value is not None:
            model = dataclasses.replace(model, **{field: value})
    train = {name: getattr(args, arg) for name, arg in (
        ("chunk_groups", "chunk_groups"), ("chunk_overhead_s", "chunk_overhead"),
        ("chunk_share", "chunk_share")) if getattr(args, arg) is not None}
    if train:
        model = dataclasses.replace(model, train=dataclasses.replace(model.train, **train))
    if args.no_reprefill:
        model = dataclasses.replace(model, rollout=dataclasses.replace(
            model.rollout, reprefill_on_update=False))
    return model


def _workload(args: argparse.Namespace) -> Workload:
    if args.workload:
        return load_workload(args.workload)
    return generate(args.seed, MathReasoningShape(groups=args.groups))


def _list() -> int:
    print("policies:")
    for name, cls in POLICIES.items():
        bound = "bounded" if cls.bounded else "not bounded"
        print(f"  {name:<18} {cls.label:<18} {bound:<12} {cls.source}")
    print("\ncost presets:")
    for name, model in PRESETS.items():
        r, t = model.rollout, model.train
        print(f"  {name:<14} {model.instances} instances x {model.concurrency}; decode "
              f"max({r.floor_s}, {r.step_s} + {r.per_request_s}*k + {r.per_ctx_token_s}*ctx) s; "
              f"train {t.fixed_s} + {t.per_token_s}*tokens s; sync {t.sync_s} s")
    return 0


def _run(args: argparse.Namespace) -> int:
    from .studies import plots
    from .studies.report import comparison
    from .model.runner import RunSpec, run_grid

    batches = 10 if args.batches is None else args.batches
    names, etas = policy_names(args.policy), _int_list(args.eta, "eta")
    if "reserve_occupy" in names:  # first, so the speed-ups have their reference
        names.insert(0, names.pop(names.index("reserve_occupy")))
    cost, workload = _cost(args), _workload(args)
    filt = _filter(args)
    timeout = (("stuck_timeout_s", args.stuck_timeout),) if args.stuck_timeout else ()
    if args.capacity is not None and args.capacity < args.batch_size:
        raise UsageError(f"--capacity must be >= --batch-size ({args.batch_size}), "
                         f"got {args.capacity}")
    if (args.progress_close or args.idle_surplus) and args.capacity is None:
        raise UsageError("--progress-close and --idle-surplus need --capacity")
    if args.lookahead < 0:
        raise UsageError(f"--lookahead must be >= 0, got {args.lookahead}")
    if args.candidates is not None and args.candidates < workload.group_size:
        raise UsageError(f"--candidates must be >= the group size ({workload.group_size}), "
                         f"got {args.candidates}")
    extensions = tuple((k, getattr(args, k)) for k in ("capacity", "progress_close",
                                                        "idle_surplus", "head_priority",
                                                        "lookahead", "streaming")
                       if getattr(args, k))
    specs = [RunSpec(n, e, batches, args.batch_size,
                     options=timeout + extensions if n == "reserve_occupy" else (),
                     filtering=filt, candidates=args.candidates)
             for e in etas for n in names]
    start = time.perf_counter()
    results = run_grid(specs, workload, cost, show_progress=not args.no_progress)
    elapsed = time.perf_counter() - start
    print(f"{len(specs)} runs of {batches} batches on {workload.name} "
          f"({len(workload)} groups of {workload.group_size}), cost {cost.name}: {elapsed:.1f} s")
    print(comparison(results))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        payload = {"workload": workload.name, "workload_stats": workload.stats(),
                   "cost": cost.to_json(), "seconds": elapsed,
                   "runs": [r.to_json() for r in results]}
        atomic_io.write_text(out / "results.json", json.dumps(payload, indent=1) + "\n")
        plots.throughput_bars(results, out / "throughput.png")
        for name in names:
            mine = [r for r in results if r.policy == name]
            plots.staleness_composition(mine, out / f"staleness_{name}.png")
        print(f"wrote {out / 'results.json'} and PNG figures to {out}/")
    return 0


def _filter(args: argparse.Namespace) -> RewardFilter | None:
    if not args.filter_rate:
        return None
    return RewardFilter(args.filter_rate, args.filter_skew, args.seed)


def _experiments(args: argparse.Namespace, only: tuple[int, ...] | None = None) -> int:
    from .studies.experiments import run_all

    if only is None:
        only = tuple(_int_list(args.only, "only"))
    bad = [x for x in only if x not in range(1, 7)]
    if bad:
        raise UsageError(f"--only takes experiments 1 to 6, got {bad}")
    run_all(_workload(args), _cost(args), args.results_dir, args.img_dir, only=only,
            progress=not args.no_progress, seeds=args.seeds, tiny=args.tiny,
            regime_batches=args.batches)
    print(f"\nwrote JSON to {args.results_dir}/ and PNGs to {args.img_dir}/")
    return 0


def _add_peers(args: argparse.Namespace) -> int:
    """``simulate regimes --add-peers``: the stored map, with the peers it lacks run into it."""
    from .studies import pages
    from .studies.experiments import redraw_remeasured
    from .studies.regimes import StoredFigureMoved, add_peers, peers_table, unmeasured

    if args.seeds is not None or args.batches is not None or args.workload or args.cost \
            or args.instances is not None or args.concurrency is not None:
        raise UsageError("--add-peers keeps the stored map's seeds, batches and cost model: "
                         "leave --seeds, --batches, --workload, --cost, --instances and "
                         "--concurrency out")
    path = Path(args.results_dir) / "regimes.json"
    try:  # the map names its preset ("cost"); its runs are checked against it below
        stored = json.loads(inputs.text_file(str(path), "--add-peers", 64 << 20))
        cost = preset(stored["cost"])
        if not isinstance(stored["cells"], list) or not isinstance(stored["sweep"], dict):
            raise TypeError("no cells or sweep")
    except (inputs.InputError, json.JSONDecodeError, KeyError, TypeError, CostError) as exc:
        raise UsageError(f"--add-peers: {path} is not a regime map this command wrote "
                         f"({exc})") from None
    say = (lambda m: None) if args.no_progress else (  # noqa: E731
        lambda m: print(m, file=sys.stderr, flush=True))
    stale = unmeasured(stored)  # filtered cells of the old measure: run again whole
    try:
        done = add_peers(stored, cost, say=say)
    except StoredFigureMoved as exc:
        print(f"{PROG}: the stored map is not what this simulator makes: {exc}",
              file=sys.stderr)
        return 1
    atomic_io.write_text(path, json.dumps(stored, indent=1) + "\n")  # added runs: compacted
    print(peers_table(stored))
    rewrote = pages.update(pages.fed_by("regimes.json"), Path(args.results_dir))
    if stale:
        rewrote += redraw_remeasured(stored, args.results_dir, args.img_dir, stale)
    for page in dict.fromkeys(rewrote):
        print(f"rewrote {page}")
    print(f"peers run in {len(done) - len(stale)} cells, {len(stale)} filtered cells measured "
          f"again over the same prompts; wrote {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        _check(args)
        if args.mode == "list":
            return _list()
        if args.mode == "experiments":
            return _experiments(args)
        if args.mode == "regimes" and args.add_peers:
            return _add_peers(args)
        if args.mode == "regimes":
            return _experiments(args, only=(6,))
        return _run(args)
    except (WorkloadError, CostError, UnknownPolicy, UsageError, FilterError, ConfigError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (SimulationStalled, CheckFailed, PolicyError) as exc:
        print(f"{PROG}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
