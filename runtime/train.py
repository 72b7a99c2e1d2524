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

from .rollout.env import configure

PROG = "reserve-occupy train"
# Files a Hugging Face tokenizer is loaded from (fast, sentencepiece, or BPE vocabularies).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json",
                   "vocab.txt")


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


_LOCKS: list = []  # the run directory locks _run took


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
        recorded = _recorded_settings(resume) if continuing else None
        if recorded is not None:
            check_recoverable_settings(resume, recorded)  # type: ignore[arg-type]
            try:
                cfg = load_config(config_path, overrides)
            except ConfigFileError:  # name a setting the resume may not change, if one is
                check_overrides_keep_run(resume, recorded, overrides)  # type: ignore[arg-type]
                raise
            check_same_run(resume, recorded, cfg.model_dump(mode="json"))  # type: ignore
        else:
            cfg = load_config(config_path, overrides)
        if continuing:
            check_recoverable_settings(resume, cfg.model_dump(mode="json"))  # type: ignore
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
        model_path = _preflight(cfg, prompts, None if continuing else resume)
        # One owner per run directory: the lock is taken before the directory is looked at
        # (so two runs started at once cannot both find it free) and held until this process
        # ends; --check only looks whether another process holds it.
        if args.check:
            check_not_in_use(out_dir)
        else:
            _LOCKS.append(lock_run_dir(out_dir))
        aside = None
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


def _recorded_settings(run_dir: Path | None) -> dict | None:
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


def _preflight(cfg, prompts, checkpoint: Path | None = None  # type: ignore[no-untyped-def]
               ) -> Path | None:
    """What the run loads before its engine, loaded now: the trainer device on this machine,
    vLLM's engine arguments, the local Ray cluster's size, the checkpoint to start from, the
    model directory's config, weights and tokenizer, and every prompt's length with that
    tokenizer. Returns the model directory (None: the embedded tiny model). Raises
    ``InputError``."""
    from . import inputs
    from .inputs import InputError
    from .machine_checks import (
        check_engine_args,
        check_precision,
        check_world_size,
        resolve_device,
    )
    from .session import check_lengths

    try:
        device = resolve_device(cfg.trainer.device)
        check_precision(cfg.trainer.precision, device.split(":")[0])
        if cfg.run.backend == "local":  # on Ray: the cluster's resources (preflight)
            check_world_size(cfg.trainer.world_size, device)
        if cfg.rollout.backend == "vllm":
            check_engine_args(cfg.rollout.engine_args)
        if cfg.run.backend == "ray" and cfg.ray.address is None:
            from .ray_backend.preflight import check_local

            check_local(cfg)
    except ValueError as exc:  # each names the setting
        raise InputError(str(exc)) from None
    if cfg.rollout.backend == "vllm":
        from .rollout.env import cpu_build

        if cpu_build():
            from .rollout.vllm_engine import check_cpu_engine_args

            check_cpu_engine_args(cfg.rollout.engine_args)
    from .recovery.rundir import check_checkpoint, check_checkpoint_model

    if checkpoint is not None:  # complete files, every shard the sharded layout names
        check_checkpoint(checkpoint, "--resume")
    from .prompts import render_prompts

    if cfg.model.path is None:  # the tiny model's tokenizer is built, not loaded
        from .models.tiny import build_tokenizer

        tokenizer = build_tokenizer(chat=cfg.model.tiny.chat)
        if checkpoint is not None:
            t = cfg.model.tiny
            check_checkpoint_model(checkpoint, {
                "model_type": "qwen2", "vocab_size": len(tokenizer),
                "hidden_size": t.hidden_size, "intermediate_size": 4 * t.hidden_size,
                "num_hidden_layers": t.layers, "num_attention_heads": t.heads,
                "num_key_value_heads": t.heads}, "the tiny model (model.tiny)", "--resume")
        prompts = render_prompts(prompts, tokenizer, cfg.data.chat_template, "the tiny model")
        _check_encodes(cfg, prompts, tokenizer, "the tiny model")
        check_lengths(None, prompts, cfg.rollout.max_tokens, cfg.rollout.max_model_len,
                      tokenizer=tokenizer)
        _check_budget(cfg, prompts, tokenizer)
        _check_tiny_cache(cfg)
        return None
    model_path = Path(cfg.model.path)
    where = f"model.path {cfg.model.path}"
    if not (model_path / "config.json").is_file():
        raise InputError(f"{where}: not a local Hugging Face model directory (no config.json)")
    try:
        config = inputs.json_file(model_path / "config.json", "model.path")
    except inputs.FileInputError as exc:
        raise InputError(f"{where}: config.json is not readable JSON ({exc.reason})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise InputError(f"{where}: config.json has no model_type, so no library can load it")
    inputs.model_weights(model_path, "model.path")
    if checkpoint is not None:
        check_checkpoint_model(checkpoint, config, where, "--resume")
    # transformers "loads" a directory without tokenizer files as an empty tokenizer (one
    # token, every text encodes to nothing): look for the files first
    if not any((model_path / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(f"{where}: cannot load its tokenizer (none of "
                         f"{', '.join(TOKENIZER_FILES)} is there)")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    except Exception as exc:  # transformers raises many types for a broken tokenizer
        detail = " ".join(str(exc).split())[:300]
        raise InputError(f"{where}: cannot load its tokenizer ({type(exc).__name__}: "
                         f"{detail})") from None
    prompts = render_prompts(prompts, tokenizer, cfg.data.chat_template, where)
    _check_encodes(cfg, prompts, tokenizer, where)
    check_lengths(model_path, prompts, cfg.rollout.max_tokens, cfg.rollout.max_model_len,
                  tokenizer=tokenizer)
    _check_budget(cfg, prompts, tokenizer)
    return model_path


def _check_encodes(cfg, prompts, tokenizer, where: str) -> None:  # type: ignore[no-untyped-def]
    """Every prompt, as the run renders it, encodes to tokens with the model's tokenizer, and
    with ``rollout.backend=fake`` with the fake engine's own tokenizer (digits, ``+`` and
    ``=``: before, another character passed ``--check`` and the run stopped with exit 70,
    ``ValueError: substring not found``). ``InputError`` naming the prompts."""
    from .inputs import InputError

    empty = [p.index for p in prompts if not tokenizer.encode(p.text)][:3]
    if empty:
        raise InputError(f"{where}: its tokenizer encodes prompt(s) {empty} to no tokens")
    if cfg.rollout.backend == "fake":
        from .rollout.fake import CharTokenizer

        alphabet = set(CharTokenizer._chars)
        bad = [(p.index, ch) for p in prompts
               for ch in [next((c for c in p.text if c not in alphabet), None)] if ch][:3]
        if bad:
            shown = ", ".join(f"{i} ({ch!r})" for i, ch in bad)
            raise InputError(f"rollout.backend=fake: its engine reads only the characters "
                             f"{CharTokenizer._chars!r} (the arithmetic task's), and prompt(s) "
                             f"{shown} hold others (as the run renders them, a chat template "
                             f"included): use rollout.backend=vllm for this model and data")
        if not all(p.text for p in prompts):
            raise InputError("rollout.backend=fake: a prompt renders to no characters")


def _tiny_spec(cfg):  # type: ignore[no-untyped-def]
    from .models.tiny import TinySpec

    t = cfg.model.tiny
    return TinySpec(hidden_size=t.hidden_size, layers=t.layers, heads=t.heads,
                    max_positions=cfg.rollout.max_model_len, seed=t.seed,
                    warmup_steps=t.warmup_steps, warmup_lr=t.warmup_lr,
                    max_operand=t.max_operand, chat=t.chat)


def _check_tiny_cache(cfg) -> None:  # type: ignore[no-untyped-def]
    """The tiny model's cache directory: a cached model that cannot load is rebuilt at the
    run's start (``ensure_tiny_model``; said here), and where the model must be built the
    cache must be writable (``InputError`` naming it and the variables that move it; before:
    the run failed at its start with a traceback). Creates nothing (a probe is removed)."""
    from .inputs import InputError
    from .models.tiny import cache_damage, tiny_model_dir
    from .recovery.rundir import RunDirError, check_output_dir

    target = tiny_model_dir(_tiny_spec(cfg))
    if (target / "model.safetensors").exists():
        damaged = cache_damage(target)
        if damaged is None:
            return
        print(f"{PROG}: the cached tiny model in {target} is damaged ({damaged}); the run "
              f"rebuilds it", file=sys.stderr)
    try:
        check_output_dir(target.parent)
    except RunDirError as exc:
        why = str(exc).partition(": ")[2] or str(exc)
        raise InputError(f"the tiny model's cache {target.parent}: {why}; the tiny model is "
                         f"built there on first use: set RESERVE_OCCUPY_CACHE (or "
                         f"XDG_CACHE_HOME) to a writable directory") from None


def _check_budget(cfg, prompts, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """``trainer.max_tokens_per_micro_batch`` holds the longest sample the run can train
    (its longest prompt with ``rollout.max_tokens`` of response); ``InputError`` if not."""
    from .inputs import InputError
    from .machine_checks import check_token_budget

    longest = max(len(tokenizer.encode(p.text)) for p in prompts)
    try:
        check_token_budget(cfg.trainer.max_tokens_per_micro_batch, longest,
                           cfg.rollout.max_tokens)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _train(cfg, model_path, prompts, reward, resume) -> int:  # type: ignore[no-untyped-def]
    from transformers.utils import logging as hf_logging

    from .metrics import summary_table
    from .recovery.journal import LogCorrupt
    from .recovery.resume import RecoveryError

    RecoveryFailed = (LogCorrupt, RecoveryError)
    from .models.tiny import ensure_tiny_model
    from .session import run_training

    hf_logging.disable_progress_bar()  # per-load bars would interleave with the run's own

    if model_path is None:
        model_path = ensure_tiny_model(_tiny_spec(cfg))
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
