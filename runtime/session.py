"""One training run end to end: engine and trainer up, held-out evaluation, the driver, the
outputs (metrics, response lengths, trace, checkpoint, summary, plot), everything closed again.

``run_training`` can borrow an engine that is already running (``rollout=``): the tests and the
benchmark start vLLM once and reset its weights to the base model before each run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from . import atomic_io
from .clock import MonotonicClock
from .config import TrainConfig
from .controller import make_controller
from .driver import Driver
from .inputs import InputError
from .machine_checks import check_lengths  # noqa: F401  (moved there; a re-export)
from .metrics import MetricsSink, plot, summarize
from .notes import NOTES_NAME, NoteLog
from .rollout.base import GenerationRequest, Rollout
from .tasks.base import Prompt, RewardAborted, RewardError, RewardFn, score_group


@dataclass
class TrainingResult:
    out_dir: Path
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    eval_before: dict[str, float] = field(default_factory=dict)
    eval_after: dict[str, float] = field(default_factory=dict)
    driver: Driver | None = None
    plot_path: Path | None = None
    startup_s: float = 0.0
    eval_resume: dict[str, float] = field(default_factory=dict)  # a resumed run's restart score


def split_prompts(prompts: Sequence[Prompt], n_eval: int,
                  holdout: bool = False) -> tuple[list[Prompt], list[Prompt]]:
    """(training prompts, evaluation prompts). With ``holdout`` the last ``n_eval`` prompts are
    kept out of training; otherwise the first ``n_eval`` (at most all) are scored as well as
    trained on, which measures the policy on its own task rather than generalisation."""
    if not holdout:
        return list(prompts), list(prompts[:n_eval])
    if n_eval >= len(prompts):
        raise InputError(f"run.eval_prompts ({n_eval}) must be smaller than the number of "
                         f"prompts ({len(prompts)}) when run.eval_holdout is true")
    cut = len(prompts) - n_eval
    return list(prompts[:cut]), list(prompts[cut:])


async def evaluate(rollout: Rollout, prompts: Sequence[Prompt], reward_fn: RewardFn,
                   max_tokens: int, temperature: float, samples: int, seed: int = 0,
                   tag: str = "eval") -> dict[str, float]:
    """Mean reward of ``samples`` seeded samples per prompt at ``temperature``, and of greedy
    decoding. Runs outside the driver's run (before or after it), with fixed seeds, so the same
    weights always score the same."""
    if not prompts:
        return {}
    tok = rollout.tokenizer

    async def one(i: int, p: Prompt, k: int, temp: float) -> float:
        seg = await rollout.generate(GenerationRequest(
            f"{tag}-{i}-{k}-{temp}", tok.encode(p.text), max_tokens, temp, seed * 7 + i * 131 + k))
        ids = (seg.token_ids[:-1] if seg.token_ids and seg.token_ids[-1] == tok.eos_token_id
               else seg.token_ids)
        try:
            return (await score_group(reward_fn, p, [tok.decode(ids)]))[0]
        except (RewardAborted, RewardError):
            raise  # the run fails: a bad value, a reward past reward.timeout_s, a dead worker
        except Exception:  # evaluation only reports: a completion it cannot score earns 0
            return 0.0

    sampled = await asyncio.gather(*(one(i, p, k, temperature) for i, p in enumerate(prompts)
                                     for k in range(samples)))
    greedy = await asyncio.gather(*(one(i, p, 0, 0.0) for i, p in enumerate(prompts)))
    return {"reward": fmean(sampled), "greedy_reward": fmean(greedy)}


def build_engine(cfg: TrainConfig, model_path: Path) -> Rollout:
    """One in-process engine of ``rollout.backend``."""
    r = cfg.rollout
    if r.backend == "fake":
        from .clock import MonotonicClock
        from .rollout.fake import FakeRollout, random_script

        return FakeRollout(MonotonicClock(), random_script(cfg.run.seed, r.fake_token_s,
                                                           max_len=r.max_tokens))
    from .rollout.vllm_engine import VLLMRollout

    return VLLMRollout(model_path, max_model_len=r.max_model_len, max_num_seqs=r.max_num_seqs,
                       dtype=r.dtype, seed=cfg.run.seed, kv_cache_gib=r.kv_cache_gib,
                       gpu_memory_utilization=r.gpu_memory_utilization, extra=r.engine_args)


def build_rollout(cfg: TrainConfig, model_path: Path) -> Rollout:
    """The in-process rollout: one engine, or a pool of ``rollout.engines`` (a crashed engine
    is replaced)."""
    if cfg.rollout.engines == 1:
        return build_engine(cfg, model_path)
    from .rollout.pool import EnginePool

    async def restart(index: int) -> Rollout:
        return build_engine(cfg, model_path)

    return EnginePool([build_engine(cfg, model_path) for _ in range(cfg.rollout.engines)],
                      restart)


def recovery_settings(cfg: TrainConfig) -> Any:
    from .recovery.durable import RecoverySettings

    r = cfg.recovery
    return RecoverySettings(r.enabled, r.commit_every, r.keep_checkpoints, r.fsync)


def is_run_dir(path: Path) -> bool:
    """A run directory with an event log (``--resume`` continues it) rather than a plain
    trainer checkpoint (``--resume`` starts a new run from its weights)."""
    from .recovery.durable import LOG_NAME

    return (path / LOG_NAME).is_file()


async def run_training(cfg: TrainConfig, model_path: Path, prompts: Sequence[Prompt],
                       reward_fn: RewardFn, out_dir: Path, rollout: Rollout | None = None,
                       resume: Path | None = None, log: Callable[[str], None] = print,
                       driver_hook: Callable[[Driver], None] | None = None,
                       cluster: Any = None) -> TrainingResult:
    """Train ``cfg.run.steps`` steps and write the outputs to ``out_dir``.

    With ``rollout`` given, the engine is borrowed (its weights are reset to ``model_path``
    first, and it is left running); otherwise one is started and closed here. ``driver_hook``
    sees the driver before it runs (tests use it to inspect or instrument the run).

    ``resume``: a run directory with an event log continues that run in place (crash
    recovery, docs/recovery.md; ``out_dir`` must be it); a trainer checkpoint directory starts
    a new run from its weights and optimizer state.

    ``cluster``: a started ``RayBackend`` to borrow (its engines and trainer; left running).

    A new run (no ``resume``, or a checkpoint directory) never starts in a directory that holds
    a run: that raises ``RunDirError`` before anything is written, as ``train`` exits 2 (move
    the old run aside first with ``recovery.rundir.move_aside``, as ``--overwrite`` does).

    One owner per run directory: the directory's lock (``recovery.rundir.lock_run_dir``) is
    taken before anything is written and released after the last write; a directory another
    process holds raises ``RunDirInUse`` ("DIR is in use by pid N").

    A new run that stops before it trained a step (a failure or an interrupt) removes what it
    wrote (``recovery.rundir.discard_unstarted``), so the same call or command can start it
    again; its ``config.json`` is written only once its engines and trainer are up.

    Three steps: ``_open_engines`` (rollout and trainer, started or borrowed),
    ``_open_run_state`` (a fresh run, a checkpoint's weights or a recovered log) and
    ``_train`` (evaluate, drive, write the outputs).
    """
    from .recovery.rundir import lock_run_dir

    lock = lock_run_dir(out_dir)  # one owner, from before the first write to after the last
    try:
        return await _run_locked(cfg, model_path, prompts, reward_fn, out_dir, rollout, resume,
                                 log, driver_hook, cluster)
    finally:
        lock.release()


async def _run_locked(cfg: TrainConfig, model_path: Path, prompts: Sequence[Prompt],
                      reward_fn: RewardFn, out_dir: Path, rollout: Rollout | None,
                      resume: Path | None, log: Callable[[str], None],
                      driver_hook: Callable[[Driver], None] | None,
                      cluster: Any) -> TrainingResult:
    continuing = _check_run_dir(out_dir, resume, cfg)
    from .prompts import render_for_model

    prompts = render_for_model(prompts, model_path, cfg.data.chat_template)  # runtime.prompts
    check_lengths(model_path, prompts, cfg.rollout.max_tokens, cfg.rollout.max_model_len)
    train_prompts, eval_prompts = split_prompts(prompts, cfg.run.eval_prompts,
                                                cfg.run.eval_holdout)
    started = Started()
    try:
        return await _run_started(cfg, model_path, out_dir, rollout, resume, log, driver_hook,
                                  cluster, continuing, started, reward_fn, train_prompts,
                                  eval_prompts)
    except BaseException:
        # A new run that never trained a step leaves nothing that blocks the same command
        # (the directory held no run before: _check_run_dir).
        if not continuing and not started.trained():
            from .recovery.rundir import discard_unstarted

            removed = discard_unstarted(out_dir)
            if removed:
                log(f"no step was trained: removed what this run wrote in {out_dir} "
                    f"({', '.join(removed)}), so the same command can start it again")
        raise


@dataclass
class Started:
    """How far a run got: its driver, once there is one (``trained``: a step published)."""

    driver: Driver | None = None

    def trained(self) -> bool:
        return self.driver is not None and self.driver.controller.version > 0


async def _run_started(cfg: TrainConfig, model_path: Path, out_dir: Path,
                       rollout: Rollout | None, resume: Path | None,
                       log: Callable[[str], None],
                       driver_hook: Callable[[Driver], None] | None, cluster: Any,
                       continuing: bool, started: Started, reward_fn: RewardFn,
                       train_prompts: Sequence[Prompt],
                       eval_prompts: Sequence[Prompt]) -> TrainingResult:
    engines = await _open_engines(cfg, model_path, out_dir, rollout, cluster, log)
    state: RunState | None = None
    try:
        if engines.trainer is None:
            engines.trainer = await build_trainer(cfg, model_path, out_dir, log)
            engines.own_trainer = True
        # The run's own config is on disk once its engines and trainer are up (a start that
        # fails, or is killed, before leaves no config.json behind) and before anything else
        # of the run: a directory with an event log always has the config that wrote it.
        _write_config(cfg, out_dir)
        state = await _open_run_state(cfg, model_path, out_dir, engines.trainer, train_prompts,
                                      resume, continuing, log)

        def hook(driver: Driver) -> None:
            started.driver = driver
            if driver_hook is not None:
                driver_hook(driver)

        return await _train(cfg, out_dir, engines, state, reward_fn, train_prompts,
                            eval_prompts, log, hook)
    finally:
        if state is not None and state.persist is not None:
            state.persist.close()
        await engines.close()


async def build_trainer(cfg: TrainConfig, model_path: Path, out_dir: Path,
                        log: Callable[[str], None] = print) -> Any:
    """The in-process trainer: ``GRPOTrainer``, or with ``trainer.world_size`` > 1 (or
    ``trainer.strategy`` fsdp) the ``ShardedTrainer`` and its rank processes."""
    args = (model_path, cfg.trainer, out_dir, cfg.rollout.temperature)
    kw = dict(seed=cfg.run.seed, keep_weights=cfg.run.keep_weights, total_steps=cfg.run.steps)
    if cfg.trainer.sharded:
        from .cli import off_loop
        from .trainer.sharded import ShardedTrainer

        log(f"starting {cfg.trainer.world_size} trainer rank(s) (FSDP2) ...")
        trainer = await off_loop(lambda: ShardedTrainer(*args, **kw), "trainer start-up")
        log(f"trainer ranks ready: pids {', '.join(map(str, trainer.pids))}")
        return trainer
    from .trainer.grpo import GRPOTrainer

    return GRPOTrainer(*args, **kw)


@dataclass
class Engines:
    """The rollout and the trainer of a run, and whether this run started (and so closes)
    them."""

    rollout: Rollout
    trainer: Any
    cluster: Any
    owned: bool
    startup_s: float = 0.0
    own_trainer: bool = False  # built for this run in this process (closed with it)

    async def close(self) -> None:
        close = getattr(self.trainer, "aclose", None)
        if self.own_trainer and close is not None:  # the sharded trainer's rank processes
            await close()
        if not self.owned:
            return
        if self.cluster is not None:
            await self.cluster.close()
        else:
            await self.rollout.close()


@dataclass
class RunState:
    """Where a run starts: its durable store and controller (crash recovery), the point a
    recovered log resumes from, and the weights the engines load first."""

    persist: Any
    controller: Any
    resume_point: Any
    start_weights: Any
    continuing: bool
    retrained: dict[int, Any] = field(default_factory=dict)  # recovery's retrained batches


def _check_run_dir(out_dir: Path, resume: Path | None, cfg: TrainConfig | None = None) -> bool:
    """Whether ``resume`` continues the run in ``out_dir``; refuses a new run in a directory
    that holds one (``RunDirError``) before anything is written, and a continued run whose
    settings (``cfg``) change what the run is, or that kept no recovery state, as ``train
    --resume`` does (``recovery.rundir.check_same_run``; docs/recovery.md)."""
    from .recovery.rundir import (
        RunDirError,
        check_recoverable_settings,
        check_reports,
        check_same_run,
        run_files,
    )

    continuing = resume is not None and is_run_dir(resume)
    if continuing and resume.resolve() != out_dir.resolve():  # type: ignore[union-attr]
        raise InputError(f"--resume {resume}: a run directory is continued in place; set "
                         f"run.output_dir to it (or leave --output-dir out)")
    if continuing:  # a bad report line refuses the resume before anything starts
        check_reports(out_dir)
        if cfg is not None and (out_dir / "config.json").is_file():
            from .config import ConfigFileError, load_config

            try:
                recorded = load_config(out_dir / "config.json",
                                       warn=lambda _: None).model_dump(mode="json")
            except ConfigFileError as exc:
                raise RunDirError(str(exc)) from None
            check_recoverable_settings(out_dir, recorded)
            check_same_run(out_dir, recorded, cfg.model_dump(mode="json"))
    held = [] if continuing else run_files(out_dir)
    if held:
        raise RunDirError(f"{out_dir} holds a run ({', '.join(held)}): continue it with "
                          f"resume={out_dir}, move it aside (recovery.rundir.move_aside) or "
                          f"choose another directory")
    return continuing


async def _open_engines(cfg: TrainConfig, model_path: Path, out_dir: Path,
                        rollout: Rollout | None, cluster: Any,
                        log: Callable[[str], None]) -> Engines:
    """The borrowed engine or cluster, else a new one of ``run.backend``. The trainer comes
    with a Ray cluster; otherwise it is ``None`` here and built in-process by the caller."""
    if cluster is not None:
        return Engines(cluster.rollout, cluster.trainer, cluster, owned=False)
    if rollout is not None:
        return Engines(rollout, None, None, owned=False)
    t0 = time.perf_counter()
    trainer = None
    if cfg.run.backend == "ray":
        from .ray_backend import RayBackend

        log(f"starting {cfg.rollout.engines} engine actor(s) and the trainer on Ray ...")
        cluster = await RayBackend.start(cfg, model_path, out_dir)
        rollout, trainer = cluster.rollout, cluster.trainer
    else:
        log(f"starting the {cfg.rollout.backend} engine ...")
        from .cli import off_loop

        # start-up blocks its thread for long: off the loop, a Ctrl-C cuts it short at once
        rollout = await off_loop(lambda: build_rollout(cfg, model_path), "engine start-up")
    startup = time.perf_counter() - t0
    log(f"engine ready in {startup:.1f} s")
    return Engines(rollout, trainer, cluster, owned=True, startup_s=startup)


async def _open_run_state(cfg: TrainConfig, model_path: Path, out_dir: Path, trainer: Any,
                          train_prompts: Sequence[Prompt], resume: Path | None,
                          continuing: bool, log: Callable[[str], None]) -> RunState:
    """A recovered run (its log replayed, its last checkpoint loaded), a new run from a
    trainer checkpoint, or a new run from ``model_path``; with ``recovery.enabled`` a new run
    gets a fresh durable store."""
    if continuing:
        from .recovery.resume import recover

        rec = await recover(out_dir, cfg.driver_settings(), recovery_settings(cfg), trainer,
                            train_prompts, log=log)
        return RunState(rec.store, rec.controller, rec.resume,
                        rec.weights if rec.weights is not None else model_path,
                        continuing=not rec.report.fresh,  # no header: nothing to continue
                        retrained=rec.report.retrained_figures)
    persist = controller = None
    start_weights: Any = model_path
    if resume is not None:
        await trainer.load_checkpoint(resume)
        log(f"resumed trainer state from {resume} ({trainer.steps} steps done)")
        start_weights = await trainer.export_weights(0)
    if cfg.recovery.enabled:
        from .recovery.durable import RunStore

        persist, controller = RunStore.fresh(out_dir, trainer, recovery_settings(cfg),
                                             cfg.driver_settings().controller_config())
        if resume is not None:  # recovery must not fall back to the base weights
            await persist.checkpoint(0)
    return RunState(persist, controller, None, start_weights, continuing=False)


async def _train(cfg: TrainConfig, out_dir: Path, engines: Engines, state: RunState,
                 reward_fn: RewardFn, train_prompts: Sequence[Prompt],
                 eval_prompts: Sequence[Prompt], log: Callable[[str], None],
                 driver_hook: Callable[[Driver], None] | None) -> TrainingResult:
    """Load the start weights, evaluate, drive ``run.steps`` steps, evaluate again, and write
    the outputs (metrics, lengths, trace, checkpoint, summary, plot)."""
    rollout, trainer, continuing = engines.rollout, engines.trainer, state.continuing
    await rollout.pause()
    await rollout.load_weights(state.start_weights)
    await rollout.resume()
    r = cfg.rollout
    eval_args = (r.max_tokens, r.temperature, cfg.run.eval_samples, cfg.run.seed)
    before = await evaluate(rollout, eval_prompts, reward_fn, *eval_args, tag="eval0")
    before, at_resume = _eval_before(out_dir, before, continuing)
    if before:
        log(f"evaluation reward before training: {before['reward']:.3f} "
            f"(greedy {before['greedy_reward']:.3f}, {len(eval_prompts)} prompts)"
            + (" [the run's start, from eval_before.json]" if at_resume else ""))
    if at_resume:
        log(f"evaluation reward at the resume point: {at_resume['reward']:.3f} "
            f"(greedy {at_resume['greedy_reward']:.3f})")
    sink = MetricsSink(out_dir, cfg.run.steps, cfg.run.progress, cfg.run.tensorboard,
                       append=continuing, counters=getattr(reward_fn, "metrics", None))
    # every file opened from here on is closed whatever fails (a notes file refused, a
    # driver_hook raising, the run itself), the run's outputs written once it has begun
    lengths = notes = driver = None
    ran = False
    try:
        if state.resume_point is not None:  # steps a crash trained without writing their rows
            from .accounting import counts_at_publishes

            sink.recovered(state.resume_point.step, state.retrained,
                           counts_at_publishes(state.controller))
        if continuing and sink.rows:  # keep what only the driver counts cumulative
            driver_counts = {k: sink.rows[-1].get(k, 0) for k in ("resumed", "rejected")}
        else:
            driver_counts = {}

        async def checkpoint(record: Any) -> None:
            every = cfg.run.save_model_every
            if every and (record.step + 1) % every == 0:
                await trainer.save_checkpoint(out_dir / f"checkpoint-{record.step + 1}")

        lengths = _length_log(out_dir, state.controller, append=continuing)
        settings, clock = cfg.driver_settings(), MonotonicClock()
        # the controller staleness.policy names, unless recovery built one (a durable or
        # resumed run's JournaledController, its log attached)
        controller = (state.controller if state.controller is not None
                      else make_controller(settings, clock.now))
        # the driver's notes go to driver_notes.jsonl as they happen (run.trace), a resumed
        # run's after the earlier incarnations', their times counted on from theirs; none
        # kept in memory
        notes = NoteLog(out_dir / NOTES_NAME if cfg.run.trace else None, append=continuing,
                        t_offset=sink.carried.time_s, default=_jsonable)
        # each step's record is written by the sink (metrics.jsonl): the driver keeps none
        driver = Driver(settings, rollout, trainer, reward_fn, train_prompts, clock,
                        on_step=sink, after_step=checkpoint, controller=controller,
                        resume=state.resume_point, persist=state.persist, lengths=lengths,
                        forget_counted=state.persist is not None, notes=notes,
                        keep_records=False)
        driver.counts.update(driver_counts)
        if driver_hook is not None:
            driver_hook(driver)
        ran = True
        await driver.run()
    finally:
        sink.close()
        if lengths is not None:
            lengths.close()
        try:
            if ran:
                _write_outputs(cfg, driver, out_dir, streamed=state.persist is not None)
        finally:
            if notes is not None:
                notes.close()
    if notes.error is not None:  # the notes could not be written (a full disk): the run's
        raise notes.error  # steps are saved; the CLI reports it as it does any such write
    after = await evaluate(rollout, eval_prompts, reward_fn, *eval_args, tag="eval1")
    await trainer.save_checkpoint(out_dir / "checkpoint")
    summary = summarize(sink.rows, _log_summary(driver, out_dir))
    result = TrainingResult(out_dir, sink.rows, summary, before, after, driver,
                            startup_s=engines.startup_s, eval_resume=at_resume)
    if cfg.run.plot and sink.rows:
        result.plot_path = plot(sink.rows, out_dir / "curves.png",
                                f"GRPO, eta={cfg.staleness.max_staleness}, {cfg.run.steps} steps")
    atomic_io.write_text(out_dir / "summary.json", json.dumps(
        {**summary, "eval_before": before, "eval_after": after,
         **({"eval_at_resume": at_resume} if at_resume else {}),
         "startup_s": engines.startup_s}, indent=2, default=str))
    return result


EVAL_BEFORE = "eval_before.json"


def _eval_before(out_dir: Path, score: dict[str, float],
                 continuing: bool) -> tuple[dict[str, float], dict[str, float]]:
    """(the run's score before its first step, the score at this resume point or {}). A new
    run keeps its score in ``eval_before.json``, so that a resumed one reports the run's own
    start rather than the weights it resumed from."""
    from .recovery.journal import load_json

    path = out_dir / EVAL_BEFORE
    if continuing and path.is_file():
        start = load_json(path)
        if isinstance(start, dict) and start:
            return start, score
    if score and not continuing:
        atomic_io.write_text(path, json.dumps(score))
    return score, {}


def _write_config(cfg: TrainConfig, out_dir: Path) -> None:
    atomic_io.write_text(out_dir / "config.json", cfg.model_dump_json(indent=2))


def _length_log(out_dir: Path, controller: Any, append: bool) -> Any:
    """``lengths.jsonl``, streamed; a resumed run keeps the records of the units its recovered
    log knows (``accounting.LengthLog.open``)."""
    from .accounting import LENGTHS_NAME, LengthLog

    known = None
    if append and controller is not None:
        known = {e.unit_id for e in controller.events if e.op == "reserve"}
    return LengthLog.open(out_dir / LENGTHS_NAME, append=append, known=known)


def _log_summary(driver: Driver, out_dir: Path) -> dict[str, Any]:
    """The summary's counts and length bias, from ``events.jsonl`` and ``lengths.jsonl`` when
    the run wrote its event log (the files are the source of truth, across crashes and
    resumes), else from the driver's counts of the controller's events and its running length
    figures."""
    from .accounting import LENGTHS_NAME, summary_of_files
    from .recovery.durable import LOG_NAME

    path = out_dir / LOG_NAME
    if path.is_file():  # the two files joined as they are read (bounded: summary_of_files)
        return summary_of_files(path, out_dir / LENGTHS_NAME)
    # the driver's own counts and figures, caught up to the controller's last event (each
    # step joined the fates settled before it; the rest are joined here)
    live = driver.log_counts
    return {**live.summary(), **driver.lengths.summary(live.take_fates())}


def _write_outputs(cfg: TrainConfig, driver: Driver, out_dir: Path, streamed: bool) -> None:
    """config.json, and with ``run.trace`` the controller's event log. The event log is
    ``events.jsonl`` in the trace format either way: crash recovery (``streamed``) already
    wrote it line by line, else it is written here, once, whole or not at all
    (``atomic_io``). The driver's notes (``driver_notes.jsonl``) were written as they
    happened (``runtime.notes.NoteLog``)."""
    _write_config(cfg, out_dir)
    if not cfg.run.trace:
        return
    if not streamed:
        from reserve_occupy.trace import dumps

        from .recovery.durable import LOG_NAME
        from .recovery.journal import PRODUCER

        # each event with its meta (why a unit was aborted), as when streamed; a peer's
        # header names its rule
        with atomic_io.atomic(out_dir / LOG_NAME) as f:
            for record in driver.controller.trace_records(PRODUCER):
                f.write(dumps(record) + "\n")


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "_asdict"):
        return obj._asdict()
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(obj)
    if hasattr(obj, "value"):
        return obj.value
    return str(obj)
