"""Runtime throughput: eta=0 (synchronous) against eta=1 on the embedded default, one engine.

``wait``/``train``/``sync`` are seconds per step the trainer spent waiting for its batch,
training, and syncing weights into the engine. Both runs use the same vLLM engine (its weights reset to the base model before each), the same
tiny model, task and settings; only ``staleness.eta`` differs. Prints, per run, generated
tokens/s, trained samples/s, seconds per step and the trainer/rollout idle fractions, then the
eta=1 / eta=0 ratios. Asserts nothing about time: the numbers depend on the machine and its
load (on a shared 2-core machine the trainer and the engine also compete for the cores).

    python bench/runtime_bench.py [--steps 30] [--set KEY=VALUE ...] [--etas 0,1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.rollout.env import configure

configure()


async def bench(etas: list[int], steps: int, overrides: dict, out: Path) -> list[dict]:
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.models.tiny import ensure_tiny_model
    from runtime.recovery.rundir import move_aside, run_files
    from runtime.session import build_rollout, run_training
    from runtime.tasks.base import load_reward

    base = load_config(None, {**overrides, "run.steps": steps, "run.progress": False,
                              "run.plot": False, "run.eval_prompts": 0, "run.trace": False})
    model = ensure_tiny_model()
    prompts = load_prompts(base.data.path)
    reward = load_reward(base.reward.name)
    t0 = time.perf_counter()
    rollout = build_rollout(base, model)
    print(f"engine start-up {time.perf_counter() - t0:.1f} s; {steps} steps per run, "
          f"{base.staleness.batch_size} groups x {base.staleness.group_size} per step")
    results = []
    try:
        for eta in etas:
            cfg = base.model_copy(update={"staleness": base.staleness.model_copy(
                update={"eta": eta})})
            run_dir = out / f"eta{eta}"
            if run_files(run_dir):  # an earlier bench's run: kept, under DIR.replaced-N
                move_aside(run_dir)
            r = await run_training(cfg, model, prompts, reward, run_dir,
                                   rollout=rollout, log=lambda _: None)
            s = r.summary
            samples = steps * cfg.staleness.batch_size * cfg.staleness.group_size
            results.append({
                "eta": eta, "wall_s": s["wall_s"], "tokens_per_s": s["tokens_per_s"],
                "samples_per_s": samples / s["wall_s"], "s_per_step": s["wall_s"] / steps,
                "trainer_idle": s["trainer_idle"], "rollout_idle": s["rollout_idle"],
                "wait_s": sum(x["wait_s"] for x in r.rows) / steps,
                "train_s": sum(x["train_s"] for x in r.rows) / steps,
                "sync_s": sum(x["sync_s"] for x in r.rows) / steps,
                "reward_last": s["reward_last"], "staleness": s["staleness"]})
    finally:
        await rollout.close()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--etas", default="0,1")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "runtime")
    args = ap.parse_args()
    import yaml

    overrides = {}
    for item in args.overrides:
        k, _, v = item.partition("=")
        overrides[k] = yaml.safe_load(v)
    etas = [int(x) for x in args.etas.split(",")]
    rows = asyncio.run(bench(etas, args.steps, overrides, args.out))
    head = (f"{'eta':>3}  {'tokens/s':>9}  {'samples/s':>9}  {'s/step':>7}  {'wait':>6}  "
            f"{'train':>6}  {'sync':>6}  {'trainer idle':>12}  {'rollout idle':>12}  "
            f"staleness (groups)")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['eta']:>3}  {r['tokens_per_s']:>9.0f}  {r['samples_per_s']:>9.1f}  "
              f"{r['s_per_step']:>7.3f}  {r['wait_s']:>6.3f}  {r['train_s']:>6.3f}  "
              f"{r['sync_s']:>6.3f}  {r['trainer_idle']:>12.2f}  {r['rollout_idle']:>12.2f}"
              f"  {r['staleness']}")
    if len(rows) >= 2 and rows[0]["eta"] == 0:
        for r in rows[1:]:
            print(f"eta={r['eta']} / eta=0: tokens/s x{r['tokens_per_s'] / rows[0]['tokens_per_s']:.2f}"
                  f", samples/s x{r['samples_per_s'] / rows[0]['samples_per_s']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
