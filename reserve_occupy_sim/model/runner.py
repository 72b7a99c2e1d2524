"""Run one simulation, or a grid of policies x eta values, with checks and progress.

``simulate`` is the one entry point the CLI, the experiments and the tests share: it builds the
policy, runs the loop, verifies the run (``checks.check_run``) and summarizes it. Progress is a
callback per published batch so that callers choose how to show it (tqdm in the CLI).
"""

from __future__ import annotations

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


def simulate(spec: RunSpec, workload: Workload, cost: CostModel, *, verify: bool = True,
             progress: Callable[[int], None] | None = None) -> tuple[RunResult, Simulator]:
    policy = make_policy(spec.policy, spec.eta, **dict(spec.options))
    sim = Simulator(policy, workload, cost, batches=spec.batches, batch_size=spec.batch_size,
                    progress=progress, filtering=spec.filtering, candidates=spec.candidates)
    sim.run()
    if verify:
        check_run(sim)
    result = summarize(sim, spec.warmup)
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
