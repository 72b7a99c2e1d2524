"""Streaming training: every policy as its framework ships it, on the trainer its framework has.

``python -m reserve_occupy_sim.studies.streaming`` (``make sim-streaming``) runs the rows of
``FRAMEWORKS`` on the shipped setting (synthetic workload seeds 0, 1, 2; the ``qwen3-8b-h20``
preset; 40 batches of 16 groups) at eta 1, 2, 3 and prints one row per (eta, framework), the
mean over seeds of:

* steady-state effective throughput (``metrics.steady_throughput``);
* its ratio to NeMo-RL in_order *as NeMo-RL ships it* on the same seed (``IN_ORDER_AS_SHIPPED``: the
  streaming trainer, in-flight refit);
* its fraction of the clairvoyant upper bound for its trainer (``bound.clairvoyant_bound`` on
  the row's cost model: the whole-batch bound for a whole-batch trainer, the restated one for a
  streaming trainer);
* the largest staleness trained (over seeds) and the length ratio (mean trained ÷ mean
  settled-admitted response length, ``runtime/lengthbias.py``).

A row is a framework's *shipped* setting, and where what ships is uncertain both settings are
rows (the page, docs/sim/streaming.md, says which and why):

* trainer: ``full`` trains a step once its batch is whole; ``stream`` is the chunked trainer of
  ``cost.TrainCost`` with ``CHUNK_GROUPS`` (NeMo-RL's ``min_groups_for_streaming_train``) and,
  for PSRL, ``chunk_share = PSRL_SHARE``;
* engine: ``re-prefill`` (running contexts are re-prefilled on new weights: partial rollout as
  verl, ROLL, AReaL and PSRL do it, and this simulator's default) or ``in-flight`` (the KV cache
  is kept: NeMo-RL's ``recompute_kv_cache_after_weight_updates = False``).

It also runs a chunk-size sweep (``CHUNK_SWEEP``) at eta 1 for the two streaming policies the
targets compare, computes the bound per (seed, eta, trainer, engine) with its best constructed
schedule, checks the simulator targets (``targets``), and with ``regimes=True`` compares
Reserve–Occupy streaming with NeMo-RL in_order as shipped in every cell of the regime map
(``regimes.Sweep``). It writes ``streaming.json`` to ``results_dir``, ``sim_streaming.png`` to
``img_dir``, and the tables into docs/sim/streaming.md between its generated markers.

Issue 38's peers (``PEER_FRAMEWORKS``) are rows of the table and, in the regime map, columns of
their own (``MAP_PEERS``: RO stream in-flight ÷ each). ``--add`` keeps a stored
``streaming.json`` and runs only what it lacks (``add_frameworks``; ``run_regimes`` with
``base``), so the figures already there cannot move; ``--regime-etas`` and ``--regime-peers``
choose the cells and peers, ``--jobs`` runs cells in worker processes. A cell with reward
filtering measures every rule over the same prompts (``streaming_compute.FILTERED_MEASURE``);
one stored before that measure is what a stored map lacks, and ``--add`` runs it again whole.

The module is the command and two halves: ``streaming_compute`` simulates (the rows, bounds,
sweep, targets and regime map), ``streaming_render`` draws the tables, the page and the figure
from its payload. Every name of both imports from here, as before they were split.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reserve_occupy.config import MAX_STALENESS

from runtime import atomic_io, inputs

from .streaming_compute import (
    CHUNK_GROUPS,
    CHUNK_SWEEP,
    FRAMEWORKS,
    PSRL_SHARE,
    IN_ORDER_AS_SHIPPED,
    MAP_PEERS,
    MAP_RO,
    PEER_FRAMEWORKS,
    TARGET_CEILING,
    TARGET_FULL,
    TARGET_SHIPPED,
    Framework,
    _bound_of,
    _mean,
    _ratio,
    _run,
    add_frameworks,
    framework_cost,
    rows,
    run,
    run_regimes,
    targets,
)
from .streaming_render import (
    BLOCKS,
    PAGE,
    _f,
    bound_table,
    figure,
    regimes_block,
    regimes_losses_block,
    regimes_losses_table,
    regimes_peers_block,
    regimes_peers_table,
    regimes_table,
    sweep_table,
    table,
    targets_table,
    write_page,
)
from runtime._moved import renamed

__all__ = [
    "CHUNK_GROUPS",
    "CHUNK_SWEEP",
    "PSRL_SHARE",
    "IN_ORDER_AS_SHIPPED",
    "TARGET_FULL",
    "TARGET_SHIPPED",
    "TARGET_CEILING",
    "Framework",
    "FRAMEWORKS",
    "PEER_FRAMEWORKS",
    "MAP_PEERS",
    "MAP_RO",
    "add_frameworks",
    "framework_cost",
    "_run",
    "_mean",
    "run",
    "_bound_of",
    "rows",
    "_ratio",
    "targets",
    "run_regimes",
    "PAGE",
    "_f",
    "table",
    "bound_table",
    "sweep_table",
    "targets_table",
    "BLOCKS",
    "regimes_block",
    "regimes_table",
    "regimes_peers_block",
    "regimes_peers_table",
    "regimes_losses_block",
    "regimes_losses_table",
    "write_page",
    "figure",
]

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reserve_occupy_sim.studies.streaming",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--eta", default="1,2,3")
    parser.add_argument("--batches", default="40")
    parser.add_argument("--results-dir", default="docs/results")
    parser.add_argument("--img-dir", default="docs/img")
    parser.add_argument("--page", default=str(PAGE), help="docs page to fill ('' : none)")
    parser.add_argument("--regimes", action="store_true",
                        help="also compare across the regime map (slow: see the page)")
    parser.add_argument("--tiny", action="store_true",
                        help="seconds: one seed, 12 batches of 4, eta 1,2; the tiny regime map; "
                             "writes under out/sim-tiny, never the docs")
    parser.add_argument("--add", action="store_true",
                        help="keep the stored streaming.json of --results-dir and run only what "
                             "it lacks: the table's rows it has none of and, with --regimes, "
                             "the regime map's peers (its setting is the stored one), and "
                             "filtered cells stored before the same-prompts measure")
    parser.add_argument("--regime-peers", default="all",
                        help="with --regimes: the map's peers to run, comma-separated row names "
                             "or 'all' (default) or 'none'")
    parser.add_argument("--regime-etas", default="all",
                        help="with --regimes: run the peers only in the cells of these etas "
                             "(comma-separated; default all)")
    parser.add_argument("--jobs", default="1",
                        help="with --regimes: cells run at once in worker processes (1)")
    args = parser.parse_args(argv)
    try:
        seeds = tuple(inputs.int_list("--seeds", args.seeds))
        etas = tuple(inputs.int_list("--eta", args.eta))
        inputs.int_in("--eta", max(etas), 0, MAX_STALENESS)
        batches = inputs.one_int("--batches", args.batches, 2)
        jobs = inputs.one_int("--jobs", args.jobs, 1)
        if args.regime_peers.strip() == "all":
            peers = MAP_PEERS
        elif args.regime_peers.strip() == "none":
            peers = ()
        else:
            peers = tuple(p.strip() for p in args.regime_peers.split(",") if p.strip())
            bad = [p for p in peers if p not in MAP_PEERS]
            if bad or not peers:
                raise inputs.InputError(f"--regime-peers: not a peer of the map: "
                                        f"{', '.join(bad) or repr(args.regime_peers)} "
                                        f"(choose from {', '.join(MAP_PEERS)}, all, none)")
        map_etas = None if args.regime_etas.strip() == "all" else set(
            inputs.int_list("--regime-etas", args.regime_etas))
        if args.tiny:
            args.results_dir, args.img_dir, args.page = ("out/sim-tiny/results",
                                                         "out/sim-tiny/img", "")
        inputs.output_dir(args.results_dir, "--results-dir", files=("streaming.json",))
        inputs.output_dir(args.img_dir, "--img-dir", files=("sim_streaming.png",))
        stored = None
        if args.add:
            path = Path(args.results_dir) / "streaming.json"
            stored = _stored(path)
            st = stored.get("setting", {})
            for name, mine, theirs in (("--seeds", list(seeds), st.get("seeds")),
                                       ("--eta", list(etas), st.get("etas")),
                                       ("--batches", batches, st.get("batches"))):
                if not args.tiny and mine != theirs:
                    raise inputs.InputError(f"{name}: --add keeps the stored setting "
                                            f"({theirs}), not {mine}")
            if args.regimes and "regimes" not in stored:
                raise inputs.InputError(f"--add --regimes: {path} has no regime map to add to; "
                                        "run --regimes without --add")
        if args.page:  # before the runs: a missing marker must not cost a 30-minute run
            inputs.output_file(args.page, "--page")  # rewritten in place: not a link
            text = inputs.text_file(args.page, "--page")
            names = list(BLOCKS) + (["streaming-regimes", "streaming-regimes-peers",
                                     "streaming-regimes-losses", "streaming-window-edges"]
                                    if args.regimes else [])
            for name in names:
                if f"<!-- BEGIN generated:{name} -->" not in text \
                        or f"<!-- END generated:{name} -->" not in text:
                    raise inputs.InputError(f"--page {args.page}: no generated block {name!r}")
    except inputs.InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kw = dict(seeds=(0,), etas=(1, 2), batches=12, batch_size=4, groups=128,
              chunk_sweep=(1, 2)) if args.tiny else dict(seeds=seeds, etas=etas, batches=batches)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if stored is not None:
        payload = stored
        added = add_frameworks(payload, say=say)
        say(f"table rows added: {', '.join(added) or 'none'}")
    else:
        payload = run(say=say, **kw)
    blocks = {name: make(payload) for name, make in BLOCKS.items()}
    if args.regimes:
        from .regimes import TINY

        select = None if map_etas is None else (lambda cell: cell.eta in map_etas)
        payload["regimes"] = run_regimes(sweep=TINY if args.tiny else None, say=say,
                                         peers=peers, base=payload.get("regimes")
                                         if stored is not None else None,
                                         select=select, jobs=jobs)
        blocks["streaming-regimes"] = regimes_table(payload["regimes"])
        blocks["streaming-regimes-peers"] = regimes_peers_table(payload["regimes"])
        blocks["streaming-regimes-losses"] = regimes_losses_table(payload["regimes"])
        from .streaming_window import table as window_table

        blocks["streaming-window-edges"] = window_table(payload)
    results, img = Path(args.results_dir), Path(args.img_dir)
    results.mkdir(parents=True, exist_ok=True)
    img.mkdir(parents=True, exist_ok=True)
    atomic_io.write_text(results / "streaming.json", json.dumps(payload, indent=1) + "\n")
    figure(payload, img / "sim_streaming.png")
    for name, body in blocks.items():
        print(f"\n## {name}\n\n{body}")
    if args.page:
        write_page(Path(args.page), blocks)
        print(f"\nwrote {args.page}")
    print(f"wrote {results / 'streaming.json'} and {img / 'sim_streaming.png'}")
    return 0


def _stored(path: Path) -> dict:
    """The stored results --add keeps (a missing or unreadable file is the user's input)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise inputs.InputError(f"--add: no stored results {path}: run without --add first")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise inputs.InputError(f"--add: cannot read {path}: {exc}")
    if not isinstance(data, dict) or not {"setting", "frameworks", "runs", "bounds"} <= set(data):
        raise inputs.InputError(f"--add: {path} is not a streaming study's results")
    return data


# ``REFERENCE``, the old name of ``IN_ORDER_AS_SHIPPED`` here (the word also named other
# things), kept for one release; it warns (``DeprecationWarning``)
__getattr__ = renamed(__name__, {"REFERENCE": "IN_ORDER_AS_SHIPPED"}, globals())


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.streaming")
