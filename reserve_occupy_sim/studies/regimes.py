"""The regime map: where Reserve–Occupy gains over NeMo-RL in_order, weight_fifo and verl drop.

What decides the regime is swept around the shipped setting (Qwen3-8B on H20, 2 x 40 concurrency,
the synthetic math workload, no filtering), in three two-dimensional slices, each at eta 1..4:

* ``hardware``: a multiplier on the training cost (trainer speed relative to rollout) x the
  engines' concurrency per instance;
* ``workload``: tail heaviness (share of responses that run to the length cap) x the reward
  filter rate;
* ``filter``: the training-cost multiplier x the reward filter rate.

Every cell runs each policy on ``seeds`` workloads (workload and filter seed ``s``) for
``batches`` batches and compares *steady-state* effective throughput (``metrics.steady_throughput``:
the first fifth of the batches is left out as start-up transient). A cell reports Reserve–Occupy's
ratio to each baseline (mean, min, max over seeds) and the regime its Reserve–Occupy runs are in.
With reward filtering every rule runs over the same prompts instead: until it has trained
``batches`` batches' worth of groups with a gradient (``FILTERED_MEASURE``, stored in the cell as
``measure``; a rule that trains its no-gradient groups takes more batches). A stored map's
filtered cells without it are run again whole by ``remeasure_filtered`` (``--add-peers``).

Each cell also runs Reserve–Occupy with both oversampling modes of the source (``OVERSAMPLING``):
batch-level with capacity B + 4 (spec §6.6) and group-level with group size + 2 candidates
(spec §6.5). For those a cell reports what turning the mode on does: tok/s and batches/s ÷
plain Reserve–Occupy, the L2 waste, and the length ratio (mean trained ÷ mean admitted
response length) relative to plain Reserve–Occupy's. A mode that is ahead of plain
Reserve–Occupy in tok/s or batches/s while that relative length ratio is below ``SHORT_BIAS``
is labelled "short answers": it gains only by training shorter answers.

Each cell also runs two references that do not depend on its eta, once per point of the map
(``REFERENCES``): the unbounded policy and AReaL at eta = 1 (which trains staleness up to 2).
``targets_table`` checks four targets at every point: Reserve–Occupy >= 1.10x in_order at
eta = 1, >= 0.95x unbounded at eta = 2, faster than AReaL at AReaL's achieved maximum staleness,
and never below a bounded baseline.

Regimes are defined from what the simulator measures over the run (``core.Simulator.gate_time``):

* ``trainer-bound``: the trainer waited for data less than ``TRAINER_IDLE_MAX`` of the wall time,
  so it, not rollout, sets the pace;
* otherwise ``slot-bound`` if admission was held by the staleness window (an engine slot free,
  nothing queued, yet Reserve–Occupy's ``reserve`` refused: no legal EMPTY slot) at least as long
  as it waited for the engines (every engine slot busy);
* otherwise ``engine-bound``.

The module is two: ``regimes_compute`` runs the map and derives its ratios, regimes and
targets; ``regimes_render`` draws the Markdown tables from those results. Every name of both
imports from here, as before they were split.
"""

from __future__ import annotations

from .regimes_compute import (
    BASELINES,
    CANDIDATES_EXTRA,
    CAPACITY_EXTRA,
    IN_ORDER_DROP,
    OVERSAMPLING,
    OVERSAMPLING_LABELS,
    PEERS,
    REFERENCES,
    StoredFigureMoved,
    REGIMES,
    TARGET_IN_ORDER,
    TARGET_UNBOUNDED,
    TIE,
    TINY,
    TRAINER_IDLE_MAX,
    Cell,
    Sweep,
    _ok,
    _oversampling,
    _point,
    _policies,
    _steady_batch_s,
    _summary,
    _unique,
    add_peers,
    classify,
    remeasure_filtered,
    unmeasured,
    FILTERED_MEASURE,
    classify_run,
    compact,
    distinct_cells,
    run_cell,
    run_sweep,
    scaled,
    targets,
    targets_summary,
)
from .regimes_render import (
    _TARGETS,
    _by_rate_and_regime,
    _met,
    _over,
    _range,
    cell_table,
    keep_rows,
    oversampling_table,
    peers_table,
    summary_table,
    targets_count_table,
    targets_table,
)

__all__ = [
    "TRAINER_IDLE_MAX",
    "REGIMES",
    "BASELINES",
    "PEERS",
    "StoredFigureMoved",
    "add_peers",
    "remeasure_filtered",
    "unmeasured",
    "FILTERED_MEASURE",
    "keep_rows",
    "peers_table",
    "IN_ORDER_DROP",
    "CAPACITY_EXTRA",
    "CANDIDATES_EXTRA",
    "OVERSAMPLING",
    "OVERSAMPLING_LABELS",
    "REFERENCES",
    "TARGET_IN_ORDER",
    "TARGET_UNBOUNDED",
    "TIE",
    "classify",
    "classify_run",
    "Cell",
    "Sweep",
    "TINY",
    "scaled",
    "_summary",
    "_policies",
    "_steady_batch_s",
    "_oversampling",
    "run_cell",
    "run_sweep",
    "compact",
    "distinct_cells",
    "_point",
    "_unique",
    "targets",
    "_ok",
    "targets_summary",
    "_range",
    "_by_rate_and_regime",
    "summary_table",
    "_over",
    "oversampling_table",
    "cell_table",
    "_met",
    "targets_table",
    "_TARGETS",
    "targets_count_table",
]
