"""Run one simulation, or a grid of policies x eta values, with checks and progress.

``simulate`` is the one entry point the CLI, the experiments and the tests share: it builds the
policy, runs the loop, verifies the run (``checks.check_run``) and summarizes it. Progress is a
callback per published batch so that callers choose how to show it (tqdm in the CLI).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable
from reserve_occupy_peers import make_policy

from .checks import check_run
from .core import Simulator
from .cost import CostModel
from .filtering import RewardFilter
from .metrics import RunResult, summarize
from .workload import Workload


@dataclass(frozen=True)
class RunSpec:
    policy: str
    eta: int
    batches: int
    batch_size: int = 16
    options: tuple[tuple[str, object], ...] = ()
    filtering: RewardFilter | None = None  # reward filtering (None: off)
    warmup: int | None = None  # batches left out of steady_throughput (None: a fifth)
    candidates: int | None = None  # group-level oversampling: samples admitted per group
    # count ``batches`` and ``warmup`` in batches' worth (``batch_size``) of groups that carry a
    # gradient (``gradient_window``): every rule then covers the same prompts, whether it
    # filters its no-gradient groups or trains them
    gradient_batches: bool = False


# The name a study stores with a result measured over ``gradient_batches`` (a regime map's
# filtered cell: ``measure``), here beneath both maps that use it (studies.streaming_compute,
# studies.regimes_compute), so neither imports the other for it.
FILTERED_MEASURE = "gradient groups"

# With ``gradient_batches`` a run may take at most this many times the batches a rule would
# need if the share of groups without gradient were exactly the filter's rate (the run is
# ``SimulationStalled`` beyond it; the shares over a run's stretch are far closer than 2x).
GRADIENT_BATCHES_SLACK = 2.0


def gradient_window(spec: RunSpec) -> tuple[int | None, int]:
    """(the most batches, the goal in groups with a gradient) of a ``gradient_batches`` run.

    A rule that filters trains ``batch_size`` groups with a gradient per batch, so it takes
    exactly ``spec.batches``; one that trains its no-gradient groups takes about ``batches / (1 -
    rate)``, up to ``GRADIENT_BATCHES_SLACK`` times that. Without filtering every group has a
    gradient and the goal is ``spec.batches`` batches' groups; without ``gradient_batches``
    (None, ...): the plain run."""
    if not spec.gradient_batches:
        return None, 0
    rate = spec.filtering.rate if spec.filtering is not None else 0.0
    most = math.ceil(GRADIENT_BATCHES_SLACK * spec.batches / (1.0 - rate))
    return most, spec.batches * spec.batch_size


def gradient_warmup(sim: Simulator, warmup: int) -> int:
    """The batches that trained the first ``warmup`` batches' worth of groups with a gradient
    (``warmup * batch_size`` of them): the warm-up of a ``gradient_batches`` run."""
    goal, have = warmup * sim.batch_size * sim.group_size, 0
    if goal <= 0:
        return 0
    for i, b in enumerate(sim.ledger.batches[: sim.n_batches], 1):
        have += b.useful
        if have >= goal:
            return i
    return sim.n_batches


def simulate(spec: RunSpec, workload: Workload, cost: CostModel, *, verify: bool = True,
             progress: Callable[[int], None] | None = None) -> tuple[RunResult, Simulator]:
    policy = make_policy(spec.policy, spec.eta, **dict(spec.options))
    most, useful = gradient_window(spec)
    sim = Simulator(policy, workload, cost, batches=most or spec.batches,
                    batch_size=spec.batch_size, progress=progress, filtering=spec.filtering,
                    candidates=spec.candidates, useful_groups=useful or None)
    sim.run()
    if verify:
        check_run(sim)
    warmup = spec.warmup
    if most is not None:
        warmup = gradient_warmup(sim, spec.batches // 5 if warmup is None else warmup)
    result = summarize(sim, warmup)
    result.settings = {**result.settings, "workload": workload.name, "cost": cost.name}
    if spec.candidates is not None:
        result.settings["candidates"] = spec.candidates
    if spec.filtering is not None:
        result.settings["filtering"] = spec.filtering.to_json()
    return result, sim


def run_grid(specs: Iterable[RunSpec], workload: Workload, cost: CostModel, *,
             show_progress: bool = True, verify: bool = True) -> list[RunResult]:
    """Run every spec in order; with ``show_progress`` a tqdm bar counts batches on stderr."""
    specs = list(specs)
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(s.batches for s in specs), unit="batch", leave=False,
                   dynamic_ncols=True)
    results = []
    try:
        for spec in specs:
            if bar is not None:
                bar.set_description(f"{spec.policy} eta={spec.eta}")
            step = (lambda _n: bar.update(1)) if bar is not None else None
            result, _ = simulate(spec, workload, cost, verify=verify, progress=step)
            results.append(result)
    finally:
        if bar is not None:
            bar.close()
    return results
