"""``reserve-occupy train`` (``python -m runtime train``): async GRPO with vLLM rollout.

    reserve-occupy train                       # the embedded default (configs/demo.yaml)
    reserve-occupy train --config FILE.yaml    # your model, data and settings
    reserve-occupy train --set run.steps=10 --set staleness.max_staleness=0
    reserve-occupy train --config FILE --check # validate the config and data, then exit
    reserve-occupy train --resume out/runtime/demo   # continue a crashed run where it stopped
    reserve-occupy train --overwrite           # move the run in run.output_dir aside, start anew
    reserve-occupy train --backend ray         # engines and trainer as Ray actors

Exit status: 0 done, 2 invalid input (config, data, reward, model directory and tokenizer,
trainer device, output or run directory, a directory another run holds; one clear message
naming what is wrong, before any engine starts: docs/runtime.md, "What train validates"), 1 the
run failed (including a run in which nothing can ever train: see "Progress guarantees" there),
130 interrupted by Ctrl-C (143 by SIGTERM), 70 an unexpected error, never reported as bad input
(docs/cli.md, "Signals, pipes and exit status").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .rollout.env import configure

if TYPE_CHECKING:  # each imported where it is used: --help and --check stay quick
    from .config.schema import TrainConfig
    from .recovery.rundir import RunDirLock
    from .tasks.base import Prompt, RewardFn

PROG = "reserve-occupy train"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="YAML config (default: the embedded demo; see configs/demo.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override one setting, e.g. run.steps=10 "
                                                  "(VALUE is read as YAML); repeatable")
    parser.add_argument("--steps", type=int, help="shorthand for --set run.steps=N")
    parser.add_argument("--max-staleness", "--eta", dest="max_staleness", type=int,
                        help="shorthand for --set staleness.max_staleness=N (eta)")
    parser.add_argument("--output-dir", help="shorthand for --set run.output_dir=DIR")
    parser.add_argument("--resume", metavar="DIR",
                        help="a run directory (with events.jsonl): continue that crashed or "
                             "stopped run in place, with its own config.json unless --config "
                             "is given; a checkpoint directory: start a new run from its "
                             "weights and optimizer state")
    parser.add_argument("--overwrite", action="store_true",
                        help="the output directory holds a run: move it aside to "
                             "DIR.replaced-N (nothing is deleted) and start a new run in DIR")
    parser.add_argument("--backend", choices=("local", "ray"),
                        help="shorthand for --set run.backend=local|ray")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--check", action="store_true",
                        help="validate everything the run loads (config, data, reward, model "
                             "directory and tokenizer, trainer device, output and run "
                             "directory), print the config, and exit without starting an "
                             "engine")


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    from .config import parse_override

    out: dict[str, object] = {}
    for item in args.overrides:
        key, value = parse_override(item)
        out[key] = value
    for key, value in (("run.steps", args.steps), ("staleness.max_staleness", args.max_staleness),
                       ("run.output_dir", args.output_dir), ("run.backend", args.backend)):
        if value is not None:
            out[key] = value
    if args.no_progress:
        out["run.progress"] = False
    return out


def input_errors() -> tuple[type[Exception], ...]:
    """The typed errors that mean the user's input is bad (exit 2, one line). Any other
    exception is not reported as bad input: the run failed (1) or a bug (70, ``cli``)."""
    from reserve_occupy.errors import ConfigError

    from .config import ConfigFileError
    from .data import DataError
    from .inputs import InputError
    from .prompts import TemplateError
    from .recovery.rundir import RunDirError
    from .tasks.base import RewardError

    return (InputError, ConfigFileError, DataError, RewardError, RunDirError, TemplateError,
            ConfigError)


RUN_DIRS = ("trajectories", "checkpoints", "checkpoint", "weights", "tensorboard")


def run_entries() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files, directories) a run writes in its run directory (``RUN_FILES``)."""
    from .recovery.rundir import RUN_FILES

    return tuple(n for n in RUN_FILES if n not in RUN_DIRS), RUN_DIRS


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Validate everything (docs/runtime.md, "What train validates"), then train. Every
    check here runs before a model is loaded into an engine or the run directory changes.
    The run directory's lock, once taken, is held until this returns."""
    from .recovery.rundir import release_all

    held = len(_LOCKS)
    try:
        return _run(args)
    finally:
        release_all(_LOCKS[held:])
        del _LOCKS[held:]


_LOCKS: list[RunDirLock] = []  # the run directory locks _run took


def _run(args: argparse.Namespace) -> int:
    configure()  # before torch or vLLM is imported
    from .config import ConfigFileError, load_config
    from .data import load_prompts
    from .recovery.rundir import (
        RunDirError,
        check_movable,
        check_overrides_keep_run,
        check_recoverable_settings,
        check_reports,
        check_same_run,
        check_not_in_use,
        check_output_dir,
        check_resumable,
        lock_run_dir,
        run_files,
    )
    from .machine_checks import check_all
    from .session import is_run_dir, split_prompts
    from .tasks.base import check_answers
    from .tasks.isolated import open_reward

    from .inputs import InputError, own_entries, path_text

    try:  # '' is not "not given": --resume '' started a fresh run, --output-dir '' used "."
        for option, value in (("--config", args.config), ("--resume", args.resume),
                              ("--output-dir", args.output_dir)):
            if value is not None:
                path_text(value, option)
    except InputError as exc:
        return _fail(str(exc))
    resume = Path(args.resume) if args.resume is not None else None
    config_path = args.config
    continuing = resume is not None and is_run_dir(resume)
    if resume is not None and not continuing and not (resume / "trainer_state.json").is_file():
        return _fail(f"--resume {resume}: neither a run directory (no events.jsonl) nor a "
                     f"checkpoint directory (no trainer_state.json)")
    if continuing:
        assert resume is not None
        if args.output_dir and Path(args.output_dir).resolve() != resume.resolve():
            return _fail(f"--resume {resume} continues that run in place; --output-dir must be "
                         f"the same directory or left out")
        if args.overwrite:
            return _fail(f"--resume {resume} continues that run; --overwrite would move it "
                         f"aside: choose one")
        args.output_dir = str(resume)
        if config_path is None:
            if not (resume / "config.json").is_file():
                return _fail(f"--resume {resume}: the run directory has no config.json, so "
                             f"its settings are unknown; pass them with --config FILE (the "
                             f"run's own config) to resume it")
            config_path = str(resume / "config.json")
    try:
        overrides = _overrides(args)
        run_dir = resume if continuing else None  # the run continued in place
        recorded = _recorded_settings(run_dir)
        if run_dir is not None and recorded is not None:
            check_recoverable_settings(run_dir, recorded)
            try:
                cfg = load_config(config_path, overrides)
            except ConfigFileError:  # name a setting the resume may not change, if one is
                check_overrides_keep_run(run_dir, recorded, overrides)
                raise
            check_same_run(run_dir, recorded, cfg.model_dump(mode="json"))
        else:
            cfg = load_config(config_path, overrides)
        if run_dir is not None:
            check_recoverable_settings(run_dir, cfg.model_dump(mode="json"))
        cfg.driver_settings().controller_config()  # the core's own limits, before any work
        prompts = load_prompts(cfg.data.path, cfg.data.prompt_field, cfg.data.answer_field,
                               cfg.data.limit)
        reward = open_reward(cfg.reward.name, cfg.reward.options, cfg.reward.timeout_s)
        check_answers(reward, cfg.reward.name, prompts, cfg.data.answer_field)
        train_prompts, _ = split_prompts(prompts, cfg.run.eval_prompts, cfg.run.eval_holdout)
        out_dir = Path(cfg.run.output_dir)
        check_output_dir(out_dir)
        if not args.overwrite:  # --overwrite moves them aside with the directory
            own_entries(out_dir, "run.output_dir", *run_entries())
        model_path = check_all(cfg, prompts, None if continuing else resume, warn=_warn)
        # One owner per run directory: the lock is taken before the directory is looked at
        # (so two runs started at once cannot both find it free) and held until this process
        # ends; --check only looks whether another process holds it.
        if args.check:
            check_not_in_use(out_dir)
        else:
            _LOCKS.append(lock_run_dir(out_dir))
        aside: list[str] | None = None  # what --overwrite moves aside
        if continuing:
            found = check_resumable(out_dir, cfg.driver_settings().controller_config(),
                                    len(train_prompts))
            check_reports(out_dir)  # metrics.jsonl, lengths.jsonl: --check too, not only the run
            if found.version >= cfg.run.steps and not args.check:
                missing = "" if (out_dir / "summary.json").is_file() else (
                    "; it stopped before its final evaluation and summary.json")
                print(f"{PROG}: the run in {out_dir} already finished all {cfg.run.steps} "
                      f"steps ({found.version} trained{missing}): nothing to do (to train "
                      f"further, resume it with --steps N, N > {found.version})")
                return 0
        else:
            held = run_files(out_dir)
            if held and not args.overwrite:
                resume_it = (f"continue it with --resume {out_dir}, or " if is_run_dir(out_dir)
                             else "")
                return _fail(f"run.output_dir {out_dir} holds a run ({', '.join(held)}): "
                             f"{resume_it}start a new one with --overwrite (moves it aside to "
                             f"{out_dir}.replaced-N) or another --output-dir")
            if held:
                check_movable(out_dir)  # not the current directory (--output-dir .)
            aside = held or None
    except input_errors() as exc:
        return _fail(str(exc))
    if args.check:
        print(cfg.model_dump_json(indent=2))
        what = "resume " if continuing else ""
        moved = f"; --overwrite will move the run in {out_dir} aside" if aside else ""
        print(f"{len(prompts)} prompts, reward {cfg.reward.name}, model "
              f"{model_path or 'tiny (built on first use)'}, {what}{out_dir}{moved}: OK")
        return 0
    if aside:
        from .recovery.rundir import move_aside

        try:
            moved_to = move_aside(out_dir)
        except RunDirError as exc:
            return _fail(str(exc))
        print(f"{PROG}: moved the run in {out_dir} aside to {moved_to}")
    return _train(cfg, model_path, prompts, reward, resume)


def _warn(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def _recorded_settings(run_dir: Path | None) -> dict[str, Any] | None:
    """The settings the run in ``run_dir`` began with (its ``config.json``, validated as a
    config; ``model_dump`` form), or None: no config.json, or one that is not a valid config
    (nothing can be compared; without --config the resume loads it and says why)."""
    from .config import ConfigFileError, load_config

    if run_dir is None or not (run_dir / "config.json").is_file():
        return None
    try:
        return load_config(run_dir / "config.json", warn=lambda _: None).model_dump(mode="json")
    except ConfigFileError:
        return None


def _train(cfg: TrainConfig, model_path: Path | None, prompts: list[Prompt], reward: RewardFn,
           resume: Path | None) -> int:
    """Train (``runtime.session.run_training``) and report: the summary table, or one line
    and the exit status for a run that was interrupted, failed or could not resume."""
    from transformers.utils import logging as hf_logging

    from .metrics import summary_table
    from .recovery.journal import LogCorrupt
    from .recovery.resume import RecoveryError

    RecoveryFailed = (LogCorrupt, RecoveryError)
    from .models.tiny import ensure_tiny_model
    from .session import run_training

    hf_logging.disable_progress_bar()  # per-load bars would interleave with the run's own

    if model_path is None:
        model_path = ensure_tiny_model(cfg.tiny_spec())
    out_dir = Path(cfg.run.output_dir)
    print(f"{PROG}: model {model_path}, {len(prompts)} prompts, "
          f"eta={cfg.staleness.max_staleness}, {cfg.staleness.batch_size} groups x "
          f"{cfg.staleness.group_size} per step, "
          f"{cfg.run.steps} steps -> {out_dir}")
    from .cli import EXIT_SIGTERM, interrupted_status, run_async
    from .watchdog import Watchdog, children, reap_children

    before = children()
    watchdog = Watchdog.start(before)  # what the run starts dies with it, kill -9 included
    try:
        # Ctrl-C cancels the run's task: its finally blocks close the engines; more Ctrl-Cs
        # are ignored while they do
        result = run_async(run_training(cfg, model_path, prompts, reward, out_dir,
                                        resume=resume))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the run closed its engines first
        what = "terminated" if interrupted_status(exc) == EXIT_SIGTERM else "interrupted"
        from .recovery.rundir import run_files

        hint = (f"continue the run with --resume {out_dir}" if run_files(out_dir) else
                "no step was trained and nothing kept; the same command starts the run again")
        print(f"{PROG}: {what}; {hint}", file=sys.stderr)
        return interrupted_status(exc)
    except input_errors() as exc:  # input found bad once the run could read it (a cluster)
        return _fail(str(exc))
    except RecoveryFailed as exc:  # the run directory cannot be trusted: say why, no traceback
        print(f"{PROG}: cannot resume {resume}: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # the run stopped (dead engine, nothing trainable, ...)
        print(f"{PROG}: the run failed: {exc}", file=sys.stderr)
        return 1
    finally:  # nothing the run started outlives it: an engine still shutting down, ...
        reap_children(before, spare=[watchdog.proc.pid] if watchdog else [])
        if watchdog is not None:
            watchdog.stop()
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
