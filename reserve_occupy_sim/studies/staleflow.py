"""StaleFlow (arXiv 2601.12784) beside the simulator: the shape PSRL's own example scripts name.

The paper (Li, Lin, Fu et al., "Unleashing Efficient Asynchronous RL Post-Training via
Staleness-Constrained Rollout Coordination", submitted 2026-01-19) states in its abstract "up to
1.42–2.68× (1.17–2.01× on average) higher throughput than state-of-the-art systems". Its setup
(models, GPUs, batch and group sizes, response lengths, the eta values swept, the baselines and
their settings, per-setting figures) is not readable in any corpus this project can reach: only
the abstract is. So this study does **not** reproduce the paper's comparison; docs/sim/staleflow.md
says what is missing. What it runs instead is the closest shape that *is* readable: PSRL's own
example script for the model this simulator's preset is calibrated for,
``examples/dapo_trainer/qwen3_8b_megatron.sh`` in ``Somoku/psrl`` (a mirror of the authors'
open-sourced code; file read at commit 0b1c13e0, the version the store holds):

* Qwen3-8B; ``GEN_NNODES=2`` x 8 GPUs, ``GEN_TP=1``: 16 rollout instances of one GPU each;
  ``TRAIN_NNODES=2`` x 8 GPUs, Megatron TP 4, PP 1: 16 training GPUs;
* ``train_batch_size=64`` prompts x ``rollout_N=8`` responses; ``psrl.staleness=2`` (eta; the
  Qwen2.5-3B script's default and the Qwen3-30B script use 3, so both are run);
* ``data.max_prompt_length=1024``, ``data.max_response_length=10240``.

The GPU type is not in the script; the cost model is the ``qwen3-8b-h20`` preset (H20 numbers)
with the script's layout: 16 instances, and the per-token training costs scaled by 6/16 (the
preset trains on 6 GPUs at the same MFU) with no pipeline (PP 1). Concurrency per instance stays
the preset's 40. The workload is the synthetic math shape with the script's prompt and response
caps. Every row is a rule as this project models it (``streaming_compute.FRAMEWORKS``): Reserve–
Occupy as PSRL ships it by default (whole-batch consume, partial rollout that re-prefills), and
streamed on the in-flight engine; each peer on its framework's trainer and the in-flight engine.

``python -m reserve_occupy_sim.studies.staleflow`` writes ``staleflow.json`` into
``--results-dir`` (docs/results) and the table into docs/sim/staleflow.md (``pages``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from reserve_occupy.config import MAX_STALENESS

from runtime import atomic_io, inputs

from ..model.core import SimulationStalled
from ..model.cost import CostModel, preset
from ..model.runner import RunSpec, simulate
from ..model.workload import MathReasoningShape, generate
from .report import markdown
from .streaming_compute import FRAMEWORKS, framework_cost

# PSRL's example (file and values above); nothing here is the paper's.
EXAMPLE = {"repo": "Somoku/psrl", "commit": "0b1c13e053adc44188b70325e46514c2b4ac326e",
           "file": "examples/dapo_trainer/qwen3_8b_megatron.sh", "model": "Qwen3-8B",
           "rollout_instances": 16, "rollout_tp": 1, "train_gpus": 16, "train_tp": 4,
           "train_pp": 1, "prompts_per_step": 64, "responses_per_prompt": 8, "staleness": 2,
           "max_prompt_length": 1024, "max_response_length": 10240}
ETAS = (2, 3)
PRESET_TRAIN_GPUS = 6  # qwen3-8b-h20: Megatron TP2 PP3 on 6 GPUs
# The rows: Reserve–Occupy twice, then the peers (as in the streaming study) and the ceiling.
RO_ROWS = ("RO full", "RO stream in-flight")
ROWS = RO_ROWS + ("NeMo in_order stream", "NeMo weight_fifo stream", "NeMo windowed stream",
                  "NeMo ready_first stream", "verl V1 drop", "verl V1 wait", "prime-rl",
                  "TRL async", "tinker", "window FIFO", "AReaL", "unbounded stream in-flight")
PAPER = {"arxiv": "2601.12784",
         "claim": "up to 1.42–2.68× (1.17–2.01× on average) higher throughput than "
                  "state-of-the-art systems, without compromising convergence",
         "readable": "title, authors and abstract only"}


def example_cost(base: CostModel | None = None) -> CostModel:
    """The preset with the example's layout (see the module docstring)."""
    base = base or preset("qwen3-8b-h20")
    share = PRESET_TRAIN_GPUS / EXAMPLE["train_gpus"]
    t = base.train
    train = dataclasses.replace(t, per_token_s=t.per_token_s * share,
                                per_token_sq_s=t.per_token_sq_s * share,
                                pipeline_stages=EXAMPLE["train_pp"])
    return dataclasses.replace(base, train=train, instances=EXAMPLE["rollout_instances"],
                               name=f"{base.name} as {EXAMPLE['file'].rsplit('/', 1)[1]}")


def example_shape(groups: int) -> MathReasoningShape:
    return MathReasoningShape(groups=groups, group_size=EXAMPLE["responses_per_prompt"],
                              max_prompt=EXAMPLE["max_prompt_length"],
                              max_response=EXAMPLE["max_response_length"])


def run(seeds=(0, 1), etas=ETAS, batches: int = 20, groups: int = 1024, say=print) -> dict:
    """Every row of ``ROWS`` at each eta and seed on the example's shape."""
    cost = example_cost()
    fws = {fw.key: fw for fw in FRAMEWORKS}
    batch = EXAMPLE["prompts_per_step"]
    start = time.perf_counter()
    runs = []
    for seed in seeds:
        workload = generate(seed, example_shape(groups))
        for eta in etas:
            for key in ROWS:
                fw = fws[key]
                c = framework_cost(cost, fw.trainer, fw.engine, fw.share)
                try:
                    r, _ = simulate(RunSpec(fw.policy, eta, batches, batch, options=fw.options),
                                    workload, c)
                    total = r.tokens_trained + r.waste_l2_tokens + r.waste_l3_tokens
                    out = {"steady": r.steady_throughput, "max_staleness": r.max_staleness,
                           "length_ratio": r.length_ratio, "trainer_idle": r.trainer_idle,
                           "waste": (r.waste_l2_tokens + r.waste_l3_tokens) / total
                           if total else 0.0}
                except SimulationStalled as exc:
                    out = {"stalled": str(exc).split(";")[0]}
                runs.append({"seed": seed, "eta": eta, "row": key, **out})
            say(f"seed {seed} eta {eta} done ({time.perf_counter() - start:.0f} s)")
    return {"paper": PAPER, "example": EXAMPLE, "cost": cost.to_json(),
            "setting": {"seeds": list(seeds), "etas": list(etas), "batches": batches,
                        "batch_size": batch, "groups": groups,
                        "workload": dataclasses.asdict(example_shape(groups))},
            "runs": runs, "seconds": time.perf_counter() - start}


def _mean(xs) -> float:
    xs = list(xs)
    return float(np.mean(xs)) if xs else float("nan")


def table(payload: dict) -> str:
    """Per eta and row: tok/s (mean over seeds), RO full ÷ it and RO stream in-flight ÷ it
    (same seed; mean [min]), the share of the run its trainer waited for data, its largest
    trained staleness, length ratio and waste."""
    by = {(r["seed"], r["eta"], r["row"]): r for r in payload["runs"]}
    seeds = payload["setting"]["seeds"]
    rows = []
    for eta in payload["setting"]["etas"]:
        for key in [r for r in ROWS if any((s, eta, r) in by for s in seeds)]:
            mine = [by[(s, eta, key)] for s in seeds]
            ok = [r for r in mine if "steady" in r]
            cells = [eta, key + (f" ({len(mine) - len(ok)} stalled)" if len(ok) < len(mine)
                                 else ""), f"{_mean(r['steady'] for r in ok):.0f}"]
            for ro in RO_ROWS:
                vals = [by[(s, eta, ro)]["steady"] / by[(s, eta, key)]["steady"] for s in seeds
                        if "steady" in by[(s, eta, ro)] and "steady" in by[(s, eta, key)]]
                cells.append(f"{_mean(vals):.2f} [{min(vals):.2f}]" if vals else "—")
            cells += [f"{100 * _mean(r['trainer_idle'] for r in ok):.0f} %",
                      max((r["max_staleness"] for r in ok), default="—"),
                      f"{_mean(r['length_ratio'] for r in ok):.3f}",
                      f"{100 * _mean(r['waste'] for r in ok):.1f} %"]
            rows.append(cells)
    return markdown(["η", "row", "tok/s", "RO full ÷ it", "RO stream in-flight ÷ it",
                     "trainer idle", "max staleness", "length ratio", "waste"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reserve_occupy_sim.studies.staleflow",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--eta", default=",".join(map(str, ETAS)))
    parser.add_argument("--batches", default="20")
    parser.add_argument("--results-dir", default="docs/results")
    args = parser.parse_args(argv)
    try:
        seeds = tuple(inputs.seed_list("--seeds", args.seeds))
        etas = tuple(inputs.int_list("--eta", args.eta))
        for eta in etas:
            inputs.int_in("--eta", eta, 0, MAX_STALENESS)
        batches = inputs.sim_limit("--batches", inputs.one_int("--batches", args.batches, 2))
        inputs.output_dir(args.results_dir, "--results-dir", files=("staleflow.json",))
    except inputs.InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    payload = run(seeds=seeds, etas=etas, batches=batches, say=say)
    path = Path(args.results_dir) / "staleflow.json"
    atomic_io.write_text(path, json.dumps(payload, indent=1) + "\n")
    print(table(payload))
    from . import pages

    for page in pages.update(pages.fed_by("staleflow.json"), Path(args.results_dir)):
        print(f"rewrote {page}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.staleflow")
