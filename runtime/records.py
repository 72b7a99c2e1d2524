"""The driver's records of what it runs: settings, groups in flight and their candidates, the
per-step record it reports, and what it hands the trainer (``TrainBatch``, its ``GroupSample``
and ``Sample`` records, built from a consumed batch by ``assemble``). Plain data; the logic is in
``runtime.driver``.

A ``TrainBatch`` is one consumed staleness buffer: ``version`` is the buffer (the trainer's
weights are at that version; the step trains ``version -> version + 1``), each group carries the
controller's ``v_traj`` and staleness, and every sampled token carries the log-probability the
engine sampled it with and the weight version that engine ran."""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reserve_occupy import Batch, Config, Group, UnitId

from .rollout.base import check_refit_mode
from .tasks.base import Prompt


# The reason a ``filter`` line carries when a peer's rule (runtime.peers) dropped a finished unit
# as too stale to train (verl's eviction): L3 waste, counted as aborted for "stale", not as
# filtered (filtered means: no gradient). runtime.accounting counts it; here, beneath both it and
# runtime.peers, so that neither imports the other for it.
STALE = "stale"


def forget_metas(metas: dict[int, Any], before: int) -> None:
    """Drop the metas of the events numbered below ``before`` from a controller's ``metas``
    (seq -> meta, inserted in the order of the events): ``forget_events``' share of them, in
    O(metas dropped)."""
    old = []
    for seq in metas:
        if seq >= before:
            break
        old.append(seq)
    for seq in old:
        del metas[seq]


@dataclass(frozen=True)
class DriverSettings:
    """Everything the driver decides with, built from the config by
    ``TrainConfig.driver_settings`` under the config's own names (``staleness.max_staleness``,
    ``timeouts.unit_s``, ``timeouts.stuck_s``, ...; a timeout that is off, null in the config,
    is ``math.inf`` here). ``max_staleness``/``batch_size``/``capacity``/``max_concurrency``/
    ``streaming`` go to the controller (``reserve_occupy.Config``) under the same names; the
    rest is the runtime's own."""

    max_staleness: int = 1  # staleness.max_staleness (eta): versions a trajectory may lag
    batch_size: int = 8  # groups per training step
    group_size: int = 8  # samples per group that train
    candidates: int | None = None  # > group_size: group-level oversampling (spec §6.5)
    capacity: int | None = None  # > batch_size: batch-level oversampling (spec §6.6)
    max_concurrency: int | None = None  # groups in flight at once
    steps: int = 10
    max_tokens: int = 8
    temperature: float = 1.0
    ignore_eos: bool = False
    partial_rollout: bool = True  # keep the tokens of requests interrupted by a weight update
    # "abort": a weight sync ends running requests (resumed as partial rollouts); "keep":
    # in-flight refit, they continue on their KV cache under the new weights
    refit: str = "abort"
    filter_zero_variance: bool = True  # occupied filtering of groups whose rewards are all equal
    unit_s: float = math.inf  # timeouts.unit_s: abort a group still generating this long
    stuck_s: float = math.inf  # timeouts.stuck_s: release_stuck after the trainer waited this
    seed: int = 0
    check_invariants: bool = False  # controller.check() after every operation (tests)
    # Stop the run when this many groups in a row were dropped (filtered, failed, or their
    # reward raised): a constant reward, a solved task or a broken engine would otherwise
    # keep the run admitting forever without a batch.
    max_dropped_in_a_row: int = 500
    # Streaming training: while waiting for the head buffer, train its finished units in
    # chunks of at least chunk_groups groups (Config.streaming; the trainer needs accumulate
    # and finish_step); the optimiser still steps once per batch.
    streaming: bool = False
    chunk_groups: int = 1
    # The staleness rule (runtime.peers.POLICY_CHOICES): reserve_occupy, or a peer's rule run
    # through the simulator's policy to be measured against it
    policy: str = "reserve_occupy"
    # The STUCK release's options (Config.stuck_action, spec/PROTOCOL.md §6.2): "release" (the
    # source protocol), "retry" (the released groups' prompts are admitted again first) or
    # "truncate" (they finish with what they generated so far); stuck_threshold: the option
    # acts only when at most this many of the head's groups are missing
    stuck_action: str = "release"
    stuck_threshold: int | None = None

    def __post_init__(self) -> None:
        check_refit_mode(self.refit)

    def controller_config(self) -> Config:
        return Config(max_staleness=self.max_staleness, batch_size=self.batch_size,
                      capacity=self.capacity, max_concurrency=self.max_concurrency,
                      streaming=self.streaming, stuck_action=self.stuck_action,
                      stuck_threshold=self.stuck_threshold)

    @property
    def n_candidates(self) -> int:
        return self.candidates if self.candidates is not None else self.group_size

    # The names these settings had before they took the config's (issue 35): read-only, for
    # code that read them, with a DeprecationWarning.
    @property
    def eta(self) -> int:
        """Deprecated: ``max_staleness``."""
        _renamed("eta", "max_staleness")
        return self.max_staleness

    @property
    def unit_timeout_s(self) -> float:
        """Deprecated: ``unit_s``."""
        _renamed("unit_timeout_s", "unit_s")
        return self.unit_s

    @property
    def stuck_timeout_s(self) -> float:
        """Deprecated: ``stuck_s``."""
        _renamed("stuck_timeout_s", "stuck_s")
        return self.stuck_s


def _renamed(old: str, new: str) -> None:
    warnings.warn(f"DriverSettings.{old} is now DriverSettings.{new} (the config's name)",
                  DeprecationWarning, stacklevel=3)


@dataclass
class CandidateRun:
    index: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    segments: int = 0
    request_id: str | None = None  # the engine request now running, if any
    paused: bool = False  # its request was ended by a weight-update pause: resume it
    stop: str | None = None  # why the driver stopped it (surplus, timeout, ...): do not resume
    finish_reason: str | None = None
    reward: float | None = None
    failed: bool = False  # its request failed (engine error, aborted by the engine)

    def role(self, committed: tuple[int, ...]) -> str:
        """Its part in its group once the group's generation ended (``accounting.ROLES``)."""
        if self.index in committed:
            return "committed"
        if not self.token_ids and self.finish_reason is None:
            return "unstarted"
        if self.failed:
            return "failed"
        return "surplus" if self.stop == "surplus" else "stopped"


@dataclass
class GroupRun:
    unit_id: UnitId
    seq: int  # admission order
    prompt: Prompt
    prompt_ids: list[int]
    v_traj: int
    admitted_at: float
    group: Group
    candidates: list[CandidateRun]
    closed: bool = False  # completed or aborted: later candidate reports are ignored
    # in_flight, finished, filtered, aborted:<reason>, consumed; "truncated" while a truncating
    # STUCK release placed it and its partial outputs are still being collected and rewarded
    fate: str = "in_flight"
    truncated: bool = False  # a truncating STUCK release placed it (staleness.stuck_action)
    task: asyncio.Task[Any] | None = None
    prompt_position: int = -1  # index into the driver's prompt list (recovery re-admits it)


@dataclass
class StepRecord:
    """What one training step did; the metrics sinks turn it into JSONL/TensorBoard rows."""

    step: int
    version: int  # the batch's buffer; the step published version + 1
    time_s: float  # since the run started
    rewards: list[float]  # of the samples trained in this step
    rollout_rewards: list[float]  # of every group completed since the last step, filtered too
    staleness: list[int]  # per group, as the controller placed it
    token_version_lag: list[int]  # per group: version - oldest token version actually used
    train: dict[str, float]
    step_s: float
    train_s: float
    sync_s: float
    wait_s: float  # the trainer waited this long for the batch (idle: not training chunks)
    tokens_generated: int  # cumulative, every token the engine returned (aborted ones too)
    tokens_trained: int  # cumulative response tokens in consumed batches
    trainer_idle: float  # cumulative fractions of wall time so far
    rollout_idle: float
    # cumulative. From the event log (accounting.LogCounts): steps, admitted, trained,
    # filtered, aborted, released_stuck; from the driver: resumed, rejected
    counts: dict[str, int]
    # cumulative length bias so far (accounting.LengthLog.figures): length_ratio, length_ks,
    # the two means and the sample counts
    lengths: dict[str, Any] = field(default_factory=dict)
    # Seconds from the batch's last unit becoming final (the head buffer turned READY) to the
    # optimiser step finishing: what the trainer still had to do once the batch was whole.
    tail_s: float = 0.0
    stream_s: float = 0.0  # streaming: seconds of the wait spent training chunks
    streamed_units: int = 0  # streaming: units trained in chunks before consume


@dataclass
class ResumePoint:
    """Where a recovered run continues (built by ``runtime.recovery.resume``): the driver
    starts its unit ids at ``next_seq``, has drawn ``draws`` prompts from its shuffled stream,
    admits the ``readmit`` prompts (of units lost in a crash: (prompt position, lost unit)) before
    any new one, holds the FINISHED (and STREAMED) units' data in ``groups`` and has trained
    ``step`` steps."""

    next_seq: int = 0
    draws: int = 0
    readmit: list[tuple[int, UnitId]] = field(default_factory=list)
    groups: dict[UnitId, GroupRun] = field(default_factory=dict)
    step: int = 0


# ------------------------------------------------ what the driver hands the trainer -----------

@dataclass(frozen=True)
class Sample:
    """One committed candidate of a group: its response, how it was generated, its reward."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # behaviour log-probabilities, one per token
    versions: tuple[int, ...]  # weight version each token was generated with
    reward: float
    finish_reason: str
    segments: int  # 1 + times it was resumed after a weight update
    candidate: int = 0  # its index among the group's candidates (engine request ids use it)


@dataclass(frozen=True)
class GroupSample:
    unit_id: UnitId
    prompt_index: int
    prompt_ids: tuple[int, ...]
    v_traj: int
    staleness: int
    samples: tuple[Sample, ...]

    @property
    def rewards(self) -> tuple[float, ...]:
        return tuple(s.reward for s in self.samples)


@dataclass(frozen=True)
class TrainBatch:
    version: int
    groups: tuple[GroupSample, ...]

    @property
    def samples(self) -> list[tuple[GroupSample, Sample]]:
        return [(g, s) for g in self.groups for s in g.samples]


def assemble(batch: Batch, groups: Mapping[UnitId, GroupRun]) -> TrainBatch:
    """The trainer's view of a consumed batch: each unit's committed samples, in the batch's
    order, with the controller's ``v_traj`` and staleness (recovery rebuilds batches with it)."""
    out = []
    for unit in batch.units:
        g = groups[unit.unit_id]
        samples = tuple(Sample(tuple(c.token_ids), tuple(c.logprobs), tuple(c.versions),
                               float(c.reward), c.finish_reason or "", c.segments, c.index)
                        for c in (g.candidates[i] for i in g.group.committed))
        out.append(GroupSample(unit.unit_id, g.prompt.index, tuple(g.prompt_ids), unit.v_traj,
                               unit.staleness, samples))
    return TrainBatch(batch.version, tuple(out))
