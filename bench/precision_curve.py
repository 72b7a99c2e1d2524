"""The demo's learning curve per trainer precision: fp32 against bf16-mixed (and bf16).

Each precision runs the embedded default (``configs/demo.yaml``: 60 steps of single-digit
addition, the tiny model, one vLLM engine on CPU) from the same base weights and seed; only
``trainer.precision`` differs. Prints, per run, the evaluation reward before and after training
(100 prompts x 4 samples, fixed seeds, and greedy), the training reward in windows of 10 steps,
the on-policy log-probability error between engine and trainer and seconds per step; writes the
same as JSON (``--out``, default ``out/bench/precision_curve.json``). Asserts nothing: one run
per precision, and asynchronous timing moves each curve a little.

    python bench/precision_curve.py [--precisions fp32,bf16-mixed,bf16] [--steps 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.rollout.env import configure

configure()

WINDOW = 10


async def bench(precisions: list[str], steps: int, out: Path) -> list[dict]:
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.models.tiny import ensure_tiny_model
    from runtime.recovery.rundir import move_aside, run_files
    from runtime.session import build_rollout, run_training
    from runtime.tasks.base import load_reward

    base = load_config(None, {"run.steps": steps, "run.progress": False, "run.plot": False})
    model = ensure_tiny_model()
    prompts = load_prompts(base.data.path)
    reward = load_reward(base.reward.name)
    rollout = build_rollout(base, model)
    results = []
    try:
        for precision in precisions:
            cfg = load_config(None, {"run.steps": steps, "run.progress": False,
                                     "run.plot": False, "trainer.precision": precision})
            run_dir = out.parent / "precision_curve" / precision
            if run_files(run_dir):  # an earlier bench's run: kept, under DIR.replaced-N
                move_aside(run_dir)
            r = await run_training(cfg, model, prompts, reward, run_dir, rollout=rollout,
                                   log=lambda _: None)
            curve = [round(fmean(x["reward"] for x in r.rows[i:i + WINDOW]
                                 if x["reward"] is not None), 3)
                     for i in range(0, len(r.rows), WINDOW)]
            results.append({
                "precision": precision, "steps": steps,
                "eval_before": r.eval_before["reward"], "eval_after": r.eval_after["reward"],
                "greedy_before": r.eval_before["greedy_reward"],
                "greedy_after": r.eval_after["greedy_reward"],
                "train_reward_windows": curve,
                "onpolicy_logprob_err": fmean(x["train/onpolicy_logprob_err"] for x in r.rows),
                "train_s_per_step": fmean(x["train_s"] for x in r.rows),
                "s_per_step": r.summary["wall_s"] / steps,
            })
            print(_line(results[-1]), flush=True)
    finally:
        await rollout.close()
    return results


def _line(r: dict) -> str:
    return (f"{r['precision']:>10}: eval {r['eval_before']:.3f} -> {r['eval_after']:.3f} "
            f"(greedy {r['greedy_before']:.3f} -> {r['greedy_after']:.3f}); training reward "
            f"per {WINDOW} steps {r['train_reward_windows']}; on-policy logprob err "
            f"{r['onpolicy_logprob_err']:.1e}; train {r['train_s_per_step']:.2f} s/step, "
            f"{r['s_per_step']:.2f} s/step in all")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precisions", default="fp32,bf16-mixed,bf16")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "precision_curve.json")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = asyncio.run(bench(args.precisions.split(","), args.steps, args.out))
    args.out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
