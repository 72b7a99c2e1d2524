"""The STUCK release's options against the release (spec/PROTOCOL.md §6.2, "Options of the
release"; issue 38 item 3): Reserve–Occupy with the STUCK timeout at ``TIMEOUT_S`` and each
``stuck_action`` (``release``, ``retry``, ``truncate``; the latter two also with PSRL's example
threshold 4), against the same seeds with no timeout, on two regimes:

* **long-tail**: the straggler-heavy workload of experiment 5 (10 % of responses run to the
  cap), where the release fires most;
* **filtering**: the shipped workload with 40 % of groups carrying no gradient, tilted toward
  long groups (``RewardFilter(0.4, 1.0)``, experiment 4's harshest setting): filtered groups
  leave holes the head waits to refill. ``retry`` is left out here: the simulator draws a
  group's no-gradient outcome by its admission number against the probability of the prompt
  at that position (``FilterOutcomes.no_gradient``), so a re-admitted prompt would be judged
  with another prompt's probability (measured: trained responses 1.4x longer than with no
  timeout, an artefact, not an effect of retry).

Each row: steady effective throughput (tokens of groups with a gradient per second) and time per
batch, both ÷ the run with no timeout; the tokens lost (L2 waste: what aborts threw away, as a
share of every token the run produced); the groups each release ended, per batch; the mean
trained response length ÷ no timeout (the length bias: below 1 training saw shorter answers);
for ``truncate`` the mean share of its planned response a cut trajectory kept; the largest
staleness trained (the bound held in every run: ``check_run`` checks it).

``python -m reserve_occupy_sim.studies.stuck_options`` runs it (a few minutes here), writes
docs/results/stuck_options.json and rewrites the ``stuck_options`` block of docs/sim/timeout.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from runtime import atomic_io

from ..model.cost import DEFAULT_PRESET, preset
from ..model.filtering import RewardFilter
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, generate
from . import pages
from .report import markdown

TIMEOUT_S = 300.0  # experiment 5's setting where the release fires often (docs/sim/timeout.md)
# (label, stuck_action, stuck_threshold); None as the action: no timeout (the baseline)
SETTINGS: tuple[tuple[str, str | None, int | None], ...] = (
    ("no timeout", None, None),
    ("release", "release", None),
    ("retry", "retry", None),
    ("retry, threshold 4", "retry", 4),
    ("truncate", "truncate", None),
    ("truncate, threshold 4", "truncate", 4),
)
# regime -> (fraction of responses at the cap, reward filter or None, actions left out)
REGIMES: dict[str, tuple[float, tuple[float, float] | None, tuple[str, ...]]] = {
    "long-tail (10 % at the cap)": (0.10, None, ()),
    "filtering (40 % no gradient, long-tilted)": (0.03, (0.4, 1.0), ("retry",)),
}
RESULTS = pages.RESULTS / "stuck_options.json"


def measure(cost, etas=(1, 2), seeds: int = 2, batches: int = 40, groups: int = 1024,
            batch_size: int = 16, timeout_s: float = TIMEOUT_S, settings=SETTINGS,
            regimes=REGIMES, say=None) -> dict:
    """Run every (regime, eta, setting, seed); return the JSON-ready payload."""
    cells = []
    for rname, (at_cap, filt, left_out) in regimes.items():
        for eta in etas:
            for label, action, threshold in settings:
                if action in left_out:
                    continue
                runs = []
                for seed in range(seeds):
                    workload = generate(seed, MathReasoningShape(groups=groups,
                                                                 truncated=at_cap))
                    options: tuple = ()
                    if action is not None:
                        options = (("stuck_timeout_s", timeout_s), ("stuck_action", action),
                                   ("stuck_threshold", threshold))
                    spec = RunSpec("reserve_occupy", eta, batches, batch_size, options=options,
                                   filtering=None if filt is None else RewardFilter(*filt, seed))
                    r, sim = simulate(spec, workload, cost)
                    total = (r.tokens_trained + r.waste_l2_tokens + r.waste_l3_tokens
                             + r.waste_filtered_tokens)
                    cut = [kept / planned for _, planned, kept in sim.ledger.truncated
                           if planned > 0]
                    st = r.settings
                    runs.append({
                        "seed": seed, "steady": r.steady_throughput,
                        "seconds_per_batch": r.seconds_per_batch,
                        "lost": r.waste_l2_tokens / total if total else 0.0,
                        "ended_groups": (st.get("released_groups", 0)
                                         + st.get("truncated_groups", 0)),
                        "retried_groups": st.get("retried_groups", 0),
                        "truncated_groups": st.get("truncated_groups", 0),
                        "truncated_kept": float(np.mean(cut)) if cut else None,
                        "trained_len": r.trained_response_mean,
                        "max_staleness": r.max_staleness})
                cells.append({"regime": rname, "eta": eta, "setting": label,
                              "stuck_action": action, "stuck_threshold": threshold,
                              "runs": runs})
                if say is not None:
                    say(f"{rname} eta={eta} {label}: steady "
                        f"{np.mean([x['steady'] for x in runs]):.0f} tok/s")
    return {"timeout_s": timeout_s, "seeds": seeds, "batches": batches,
            "batch_size": batch_size, "groups": groups, "cost": cost.to_json(),
            "cells": cells}


def table(payload: dict) -> str:
    """The Markdown table of a ``measure`` payload (each row against the same regime, eta and
    seeds with no timeout)."""
    rows = []
    base: dict = {}
    for cell in payload["cells"]:
        runs = cell["runs"]
        key = (cell["regime"], cell["eta"])
        if cell["stuck_action"] is None:
            base[key] = runs
        ref = base[key]
        ratio = lambda k, rs=runs, ref=ref: float(np.mean([a[k] / b[k]
                                                            for a, b in zip(rs, ref)]))
        mean = lambda k, rs=runs: float(np.mean([x[k] for x in rs]))
        kept = [x["truncated_kept"] for x in runs if x["truncated_kept"] is not None]
        rows.append([cell["regime"], cell["eta"], cell["setting"], round(mean("steady")),
                     f"{ratio('steady'):.2f}", f"{ratio('seconds_per_batch'):.2f}",
                     f"{mean('lost'):.1%}",
                     f"{mean('ended_groups') / payload['batches']:.2f}",
                     f"{ratio('trained_len'):.2f}",
                     f"{np.mean(kept):.0%}" if kept else "-",
                     max(x["max_staleness"] for x in runs)])
    return markdown(["regime", "η", "STUCK action", "steady tok/s", "÷ no timeout",
                     "s/batch ÷ no timeout", "tokens lost (L2)", "groups ended per batch",
                     "trained response length ÷ no timeout", "truncated: share kept",
                     "max staleness"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reserve_occupy_sim.studies.stuck_options",
        description="Measure the STUCK release's options (retry, truncate) against the release "
                    "in the simulator; write docs/results/stuck_options.json and the "
                    "stuck_options block of docs/sim/timeout.md.")
    parser.add_argument("--seeds", type=int, default=2, choices=range(1, 11), metavar="1..10")
    parser.add_argument("--batches", type=int, default=40, choices=range(10, 201),
                        metavar="10..200")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="results JSON (default: docs/results/stuck_options.json; "
                             "elsewhere, the docs are left alone)")
    args = parser.parse_args(argv)
    payload = measure(preset(DEFAULT_PRESET), seeds=args.seeds, batches=args.batches,
                      say=lambda s: print(s, file=sys.stderr))
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_io.write_text(args.out, json.dumps(payload, indent=1) + "\n")
    except OSError as exc:
        print(f"stuck_options: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 74
    print(table(payload))
    pages.update(["stuck_options"], results_dir=args.out.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
