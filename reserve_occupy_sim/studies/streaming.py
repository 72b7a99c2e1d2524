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
    REFERENCE,
    TARGET_CEILING,
    TARGET_FULL,
    TARGET_SHIPPED,
    Framework,
    _bound_of,
    _mean,
    _ratio,
    _run,
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
    regimes_table,
    sweep_table,
    table,
    targets_table,
    write_page,
)

__all__ = [
    "CHUNK_GROUPS",
    "CHUNK_SWEEP",
    "PSRL_SHARE",
    "IN_ORDER_AS_SHIPPED",
    "REFERENCE",
    "TARGET_FULL",
    "TARGET_SHIPPED",
    "TARGET_CEILING",
    "Framework",
    "FRAMEWORKS",
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
    args = parser.parse_args(argv)
    try:
        seeds = tuple(inputs.int_list("--seeds", args.seeds))
        etas = tuple(inputs.int_list("--eta", args.eta))
        inputs.int_in("--eta", max(etas), 0, MAX_STALENESS)
        batches = inputs.one_int("--batches", args.batches, 2)
        if args.tiny:
            args.results_dir, args.img_dir, args.page = ("out/sim-tiny/results",
                                                         "out/sim-tiny/img", "")
        inputs.output_dir(args.results_dir, "--results-dir", files=("streaming.json",))
        inputs.output_dir(args.img_dir, "--img-dir", files=("sim_streaming.png",))
        if args.page:  # before the runs: a missing marker must not cost a 30-minute run
            inputs.output_file(args.page, "--page")  # rewritten in place: not a link
            text = inputs.text_file(args.page, "--page")
            names = list(BLOCKS) + (["streaming-regimes"] if args.regimes else [])
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
    payload = run(say=say, **kw)
    blocks = {name: make(payload) for name, make in BLOCKS.items()}
    if args.regimes:
        from .regimes import TINY

        payload["regimes"] = run_regimes(sweep=TINY if args.tiny else None, say=say)
        blocks["streaming-regimes"] = regimes_table(payload["regimes"])
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


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.streaming")
