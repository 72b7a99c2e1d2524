"""``reserve-occupy train`` (``python -m runtime train``): async GRPO with vLLM rollout.

    reserve-occupy train                       # the embedded default (configs/demo.yaml)
    reserve-occupy train --config FILE.yaml    # your model, data and settings
    reserve-occupy train --set run.steps=10 --set staleness.eta=0
    reserve-occupy train --config FILE --check # validate the config and data, then exit

Exit status: 0 done, 2 invalid input (config, data, reward, model path; one clear message
naming what is wrong, before any engine starts), 1 the run failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .rollout.env import configure

PROG = "reserve-occupy train"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="YAML config (default: the embedded demo; see configs/demo.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override one setting, e.g. run.steps=10 "
                                                  "(VALUE is read as YAML); repeatable")
    parser.add_argument("--steps", type=int, help="shorthand for --set run.steps=N")
    parser.add_argument("--eta", type=int, help="shorthand for --set staleness.eta=N")
    parser.add_argument("--output-dir", help="shorthand for --set run.output_dir=DIR")
    parser.add_argument("--resume", metavar="DIR", help="start from a checkpoint directory "
                                                        "(weights and optimizer state)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--check", action="store_true",
                        help="validate the config, data and reward, print them, and exit")


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    import yaml

    out: dict[str, object] = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    for key, value in (("run.steps", args.steps), ("staleness.eta", args.eta),
                       ("run.output_dir", args.output_dir)):
        if value is not None:
            out[key] = value
    if args.no_progress:
        out["run.progress"] = False
    return out


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    configure()  # before torch or vLLM is imported
    from .config import ConfigFileError, load_config
    from .data import DataError, load_prompts
    from .tasks.base import RewardError, load_reward

    try:
        cfg = load_config(args.config, _overrides(args))
        prompts = load_prompts(cfg.data.path, cfg.data.prompt_field, cfg.data.answer_field,
                               cfg.data.limit)
        reward = load_reward(cfg.reward.name, **cfg.reward.options)
        from .session import split_prompts

        split_prompts(prompts, cfg.run.eval_prompts, cfg.run.eval_holdout)
    except (ConfigFileError, DataError, RewardError, ValueError) as exc:
        return _fail(str(exc))
    model_path = None
    if cfg.model.path is not None:
        model_path = Path(cfg.model.path)
        if not (model_path / "config.json").is_file():
            return _fail(f"model.path {cfg.model.path}: not a local Hugging Face model "
                         f"directory (no config.json)")
    resume = Path(args.resume) if args.resume else None
    if resume is not None and not (resume / "trainer_state.json").is_file():
        return _fail(f"--resume {resume}: not a checkpoint directory")
    if args.check:
        print(cfg.model_dump_json(indent=2))
        print(f"{len(prompts)} prompts, reward {cfg.reward.name}: OK")
        return 0
    return _train(cfg, model_path, prompts, reward, resume)


def _train(cfg, model_path, prompts, reward, resume) -> int:  # type: ignore[no-untyped-def]
    import asyncio

    from transformers.utils import logging as hf_logging

    from .metrics import summary_table
    from .models.tiny import TinySpec, ensure_tiny_model
    from .session import run_training

    hf_logging.disable_progress_bar()  # per-load bars would interleave with the run's own

    if model_path is None:
        t = cfg.model.tiny
        model_path = ensure_tiny_model(TinySpec(
            hidden_size=t.hidden_size, layers=t.layers, heads=t.heads,
            max_positions=cfg.rollout.max_model_len, seed=t.seed, warmup_steps=t.warmup_steps,
            warmup_lr=t.warmup_lr, max_operand=t.max_operand))
    out_dir = Path(cfg.run.output_dir)
    print(f"{PROG}: model {model_path}, {len(prompts)} prompts, eta={cfg.staleness.eta}, "
          f"{cfg.staleness.batch_size} groups x {cfg.staleness.group_size} per step, "
          f"{cfg.run.steps} steps -> {out_dir}")
    try:
        result = asyncio.run(run_training(cfg, model_path, prompts, reward, out_dir,
                                          resume=resume))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 1
    except ValueError as exc:  # input found bad once the model's tokenizer could read it
        return _fail(str(exc))
    except RuntimeError as exc:  # the run stopped (dead engine, nothing trainable, ...)
        print(f"{PROG}: the run failed: {exc}", file=sys.stderr)
        return 1
    extra = {}
    if result.eval_before:
        extra["eval reward before / after"] = (
            f"{result.eval_before['reward']:.3f} / {result.eval_after['reward']:.3f}")
        extra["eval greedy reward before / after"] = (
            f"{result.eval_before['greedy_reward']:.3f} / "
            f"{result.eval_after['greedy_reward']:.3f}")
    extra["engine start-up (s)"] = f"{result.startup_s:.1f}"
    print("\nsummary")
    print(summary_table(result.summary, extra))
    print(f"\nmetrics: {out_dir / 'metrics.jsonl'}")
    if result.plot_path:
        print(f"plot:    {result.plot_path}")
    print(f"checkpoint: {out_dir / 'checkpoint'}")
    return 0
