"""The ``train`` configuration: one typed YAML file, validated before anything starts.

Every section is a pydantic model with ``extra="forbid"``, so a misspelt key is an error, not a
silent default. ``load_config`` turns any problem into one ``ConfigFileError`` whose message
names the file and each bad field (``rollout.temperature: must be > 0 (got -1)``). With no file,
``TrainConfig()`` is the embedded default (``configs/demo.yaml`` spells the same values out).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from reserve_occupy.config import MAX_STALENESS
from reserve_occupy.trace import MAX_JSON_DEPTH

from .peers import POLICY_CHOICES, REFERENCE, peer_streams, unhonoured
from .records import DriverSettings

# The core's own bound on eta (its controller keeps eta + 1 buffers open), so that a run is
# refused here, naming the config key, rather than later by reserve_occupy.Config.
MAX_ETA = MAX_STALENESS  # versions a trajectory may lag
MAX_GROUPS = 100_000  # groups per batch, slots per buffer, groups in flight
MAX_CANDIDATES = 10_000  # samples per group
# Seeds go to numpy (np.random.seed, which vLLM calls with the engine's seed), torch and
# Python's random; numpy takes 0 .. 2**32 - 1, the narrowest of the three.
MAX_SEED = 2**32 - 1
MAX_WORLD = 1024  # trainer ranks (trainer.world_size)


class _Section(BaseModel):
    # allow_inf_nan=False: YAML's .inf and .nan are refused for every float field (a run would
    # train NaN, and config.json would record null, which --resume cannot read back).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """A number field takes a number: YAML's ``true``/``yes`` is no learning rate (pydantic
        would read it as 1), and a whole-number field takes no float (``batch_size: 16.0``).
        Text is still parsed as pydantic does (``lr: 1e-3`` is a string to YAML)."""
        field = cls.model_fields.get(info.field_name or "")
        if field is not None:
            _check_number(field.annotation, value)
            _check_bool(field.annotation, value)
        return value


def _check_bool(annotation: Any, value: Any) -> None:
    """``ValueError`` if a yes/no field (``bool``, or optional) is given anything but
    ``true``/``false`` (or null where optional): pydantic reads ``0``, ``1``, ``"off"`` and
    ``"y"`` as booleans, so ``streaming: 2`` or a number meant for another key passed."""
    kinds = set(get_args(annotation) or (annotation,))
    if bool in kinds and not kinds - {bool, type(None)} and not isinstance(value, bool) \
            and not (value is None and type(None) in kinds):
        raise ValueError(f"must be true or false, not {value!r:.40}")


def _check_number(annotation: Any, value: Any) -> None:
    """``ValueError`` if ``value`` is a bool for a number field (``int``, ``float``, either
    optional, or a tuple of floats), or a float for a whole-number field."""
    if get_origin(annotation) is tuple and isinstance(value, (list, tuple)):
        for item in value:
            _check_number(get_args(annotation)[0], item)
        return
    kinds = set(get_args(annotation) or (annotation,))
    if not kinds & {int, float}:
        return
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    if float not in kinds and isinstance(value, float):
        raise ValueError("must be a whole number, not a float")


def _non_finite(value: Any, where: str = "", seen: set[int] | None = None
                ) -> tuple[str, float] | None:
    """The first place (``a.b[0]``) in a free-form value (nested dicts and lists) holding inf
    or nan, and that number; None if there is none. Each container is visited once (YAML
    aliases share them), so the walk is linear in what the file holds."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    if isinstance(value, dict):
        places: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        places = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    seen = set() if seen is None else seen
    if id(value) in seen:
        return None
    seen.add(id(value))
    for place, item in places:
        found = _non_finite(item, place, seen)
        if found is not None:
            return found
    return None


def _finite_mapping(value: dict[str, Any]) -> dict[str, Any]:
    """A free-form section (``reward.options``, ``rollout.engine_args``) holds no inf or nan."""
    found = _non_finite(value)
    if found is not None:
        raise ValueError(f"{found[0]} must be a finite number (got {found[1]})")
    return value


# The embedded tiny model is built and warmed up (AdamW: weights and 3 copies of state) on
# the CPU when a run starts: at most 200M parameters (about 3.2 GB with the optimiser), each
# dimension bounded before the product (before: model.tiny.hidden_size=100000000 passed
# --check and the build failed allocating its first matrix).
MAX_TINY_HIDDEN = 8192
MAX_TINY_LAYERS = 256
MAX_TINY_PARAMS = 200_000_000


class TinyModelConfig(_Section):
    """The embedded model (used when ``model.path`` is null); see ``runtime.models.tiny``."""

    hidden_size: int = Field(128, ge=32, le=MAX_TINY_HIDDEN)
    layers: int = Field(4, ge=1, le=MAX_TINY_LAYERS)
    heads: int = Field(4, ge=1, le=MAX_TINY_HIDDEN // 32)
    warmup_steps: int = Field(200, ge=0)
    warmup_lr: float = Field(3e-3, gt=0)
    max_operand: int = Field(9, ge=1)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    chat: bool = False  # a tokenizer with a chat template and printable ASCII (recipe tests)

    @model_validator(mode="after")
    def _head_dim(self) -> TinyModelConfig:
        if self.hidden_size % self.heads or self.hidden_size // self.heads < 32:
            raise ValueError("hidden_size / heads must be a whole number >= 32 (vLLM's CPU "
                             "attention does not support smaller heads)")
        params = 12 * self.hidden_size ** 2 * self.layers  # attention 4 h^2 + MLP 8 h^2
        if params > MAX_TINY_PARAMS:
            raise ValueError(f"hidden_size {self.hidden_size} x layers {self.layers} is about "
                             f"{params / 1e6:,.0f}M parameters; the embedded tiny model is "
                             f"built and warmed up on this machine's CPU at start-up and takes "
                             f"at most {MAX_TINY_PARAMS // 10**6}M (use model.path for a "
                             f"larger model)")
        return self


class ModelConfig(_Section):
    path: str | None = None  # a local Hugging Face model directory; null: the tiny model
    tiny: TinyModelConfig = TinyModelConfig()


class DataConfig(_Section):
    path: str | None = None  # JSONL or Parquet; null: the shipped arithmetic task
    prompt_field: str = "prompt"  # a string, or a list of {"role", "content"} messages
    answer_field: str | None = "answer"
    limit: int | None = Field(None, ge=1)
    chat_template: bool = True  # render prompts with the tokenizer's template when it has one


class RewardConfig(_Section):
    name: str = "exact_answer"  # built-in name, or "package.module:function"
    options: dict[str, Any] = {}
    # a "package.module:function" reward runs in a worker process (runtime.tasks.isolated);
    # each call must return within this many seconds, else its group is dropped
    timeout_s: float = Field(60.0, gt=0, le=86_400)

    _finite_options = field_validator("options")(_finite_mapping)


class RolloutConfig(_Section):
    # vllm: the real engine. fake: the scripted engine of runtime/rollout/fake.py on the real
    # clock (pipeline and recovery tests without vLLM; its tokens are random digits).
    backend: Literal["vllm", "fake"] = "vllm"
    engines: int = Field(1, ge=1, le=1024)  # rollout engines (an EnginePool when > 1, or on Ray)
    fake_token_s: float = Field(0.002, gt=0)  # the fake engine's seconds per token
    max_tokens: int = Field(8, ge=1, le=1_000_000)
    temperature: float = Field(1.0, gt=0)
    ignore_eos: bool = False
    partial_rollout: bool = True
    # a weight sync's pause: "abort" ends running requests (resumed as partial rollouts),
    # "keep" freezes them and continues them on their KV cache (in-flight refit)
    refit: Literal["abort", "keep"] = "abort"
    max_model_len: int = Field(128, ge=8, le=10_000_000)
    max_num_seqs: int = Field(64, ge=1, le=1_000_000)
    dtype: str = "auto"  # auto: float32 on CPU, the model's own on GPU
    kv_cache_gib: float | None = Field(None, gt=0)  # CPU: KV-cache size (default 0.0625)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    engine_args: dict[str, Any] = {}  # passed to vLLM's AsyncEngineArgs verbatim

    _finite_engine_args = field_validator("engine_args")(_finite_mapping)


class StalenessConfig(_Section):
    # Upper bounds (docs/runtime.md, "What train validates"): far above any real run, low
    # enough that the structures sized by them (eta + 1 buffers of capacity slots, a group's
    # candidates) fit in memory; the core's Config checks its own limits as well.
    max_staleness: int = Field(1, ge=0, le=MAX_ETA)  # eta: versions a trajectory may lag
    batch_size: int = Field(16, ge=1, le=MAX_GROUPS)  # groups per training step
    group_size: int = Field(8, ge=2, le=MAX_CANDIDATES)  # samples per group (GRPO: >= 2)
    candidates: int | None = Field(None, ge=2, le=MAX_CANDIDATES)  # group-level oversampling
    capacity: int | None = Field(None, ge=1, le=MAX_GROUPS)  # batch-level oversampling
    max_concurrency: int | None = Field(None, ge=1, le=MAX_GROUPS)  # groups in flight
    filter_zero_variance: bool = True
    # The staleness rule (docs/runtime.md, "staleness.policy"): Reserve–Occupy, the verified
    # default, or a peer's rule from the simulator (runtime.peers), to be measured against it
    policy: str = REFERENCE

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICY_CHOICES:
            raise ValueError(f"must be one of {', '.join(POLICY_CHOICES)}")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> StalenessConfig:
        if self.candidates is not None and self.candidates < self.group_size:
            raise ValueError(f"candidates ({self.candidates}) must be >= group_size "
                             f"({self.group_size})")
        if self.capacity is not None and self.capacity < self.batch_size:
            raise ValueError(f"capacity ({self.capacity}) must be >= batch_size "
                             f"({self.batch_size})")
        return self


class TimeoutConfig(_Section):
    unit_s: float | None = Field(None, gt=0)  # abort a group still generating after this
    stuck_s: float | None = Field(60.0, gt=0)  # release_stuck after the trainer waited this


MAX_COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600.0

# Off-policy corrections of the loss (docs/runtime.md, "Off-policy corrections";
# runtime.trainer.corrections): which options each kind takes, and their defaults.
CORRECTION_OPTIONS: dict[str, tuple[str, ...]] = {
    "none": (), "tis": ("cap",), "seq_tis": ("cap",), "mask": ("low", "high"),
    "seq_mask": ("low", "high"), "decoupled": ("cap", "prox")}
DEFAULT_CAP, DEFAULT_LOW, DEFAULT_HIGH = 2.0, 0.5, 2.0


class CorrectionConfig(_Section):
    """``trainer.correction``: an off-policy correction of the GRPO loss; ``none`` (the
    default) is the plain objective. An option the kind does not use is refused (it would be
    ignored), as are a cap below 1 and a band [low, high] that does not hold 1 (both would
    down-weight or drop the on-policy tokens themselves)."""

    kind: Literal["none", "tis", "seq_tis", "mask", "seq_mask", "decoupled"] = "none"
    cap: float | None = Field(None, gt=0)  # tis, seq_tis, decoupled: the weight's bound (2)
    low: float | None = Field(None, gt=0)  # mask, seq_mask: the ratio's band (0.5 .. 2)
    high: float | None = Field(None, gt=0)
    # decoupled: the proximal policy's log-probabilities: a no-grad forward pass of the
    # weights before the update (recompute), or interpolated by version (loglinear)
    prox: Literal["recompute", "loglinear"] | None = None

    @property
    def cap_value(self) -> float:
        return DEFAULT_CAP if self.cap is None else self.cap

    @property
    def band(self) -> tuple[float, float]:
        return (DEFAULT_LOW if self.low is None else self.low,
                DEFAULT_HIGH if self.high is None else self.high)

    @property
    def prox_method(self) -> str:
        return "recompute" if self.prox is None else self.prox

    @model_validator(mode="after")
    def _options(self) -> CorrectionConfig:
        uses = CORRECTION_OPTIONS[self.kind]
        extra = [k for k in ("cap", "low", "high", "prox")
                 if getattr(self, k) is not None and k not in uses]
        if extra:
            takes = f"takes only {', '.join(uses)}" if uses else "takes no option"
            raise ValueError(f"kind {self.kind} does not use {', '.join(extra)} (it {takes}): "
                             f"remove it, or choose the kind that uses it")
        if self.cap is not None and self.cap < 1:
            raise ValueError(f"cap {self.cap} is below 1: it would truncate the weight of "
                             f"on-policy tokens (ratio 1) too; give a cap >= 1")
        low, high = self.band
        if low >= high:
            raise ValueError(f"low ({low}) must be below high ({high})")
        if not low <= 1.0 <= high:
            raise ValueError(f"the band [low, high] = [{low}, {high}] must hold 1: it would "
                             f"drop on-policy tokens (ratio 1) too")
        return self



class TrainerConfig(_Section):
    lr: float = Field(3e-4, gt=0)
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = Field(0.0, ge=0)
    clip_low: float = Field(0.2, gt=0, lt=1)
    clip_high: float = Field(0.28, gt=0)
    kl_coef: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0)
    scale_rewards: bool = True  # divide advantages by the group's reward std
    epochs: int = Field(1, ge=1, le=1000)  # passes over each batch
    minibatches: int = Field(1, ge=1)  # optimiser steps per pass (the batch split evenly)
    micro_batch: int = Field(64, ge=1)  # sequences per forward/backward (memory only; padded path)
    # Packed sequences (docs/runtime.md, "Packed sequences"): a micro-batch is several samples'
    # prompt + response concatenated in one row, attention kept within each sample, so no
    # padding is computed; false: one padded row per sample. Micro-batches hold at most
    # max_tokens_per_micro_batch tokens (prompt + response; padded: rows x the longest row),
    # which must fit the longest sample (train --check refuses less).
    packing: bool = True
    max_tokens_per_micro_batch: int = Field(8192, ge=1)
    device: str = "cpu"  # auto: cuda when available, else cpu; checked by resolve_device
    threads: int | None = Field(None, ge=1)
    # fp32; bf16-mixed: float32 weights, bfloat16 autocast; bf16: weights and optimizer state
    # in bfloat16 too (docs/runtime.md, "Your own model"); checked by check_precision
    precision: Literal["fp32", "bf16-mixed", "bf16"] = "fp32"
    gradient_checkpointing: bool = False  # recompute activations in backward (memory)
    warmup_steps: int = Field(0, ge=0)  # linear learning-rate warm-up over this many steps
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"  # after the warm-up
    min_lr_ratio: float = Field(0.0, ge=0, le=1)  # linear/cosine end at lr * this
    # Streaming training (docs/runtime.md, "Streaming training"): while it waits for the head
    # buffer, the trainer takes the buffer's finished units and runs forward/backward on them
    # in chunks of at least chunk_groups groups; the optimiser steps once, when the batch
    # is complete, so the update is the whole-batch one. Needs one pass and one minibatch.
    streaming: bool = False
    chunk_groups: int = Field(1, ge=1, le=MAX_GROUPS)
    # The sharded trainer (docs/runtime.md, "Sharded trainer"): world_size rank processes
    # training one FSDP2 model (gloo on CPU, NCCL on GPU). strategy auto: the single-process
    # trainer for one rank, fsdp for more; fsdp: sharded even on one rank. A rank that waits
    # in a collective longer than collective_timeout_s fails the run (a hung rank).
    world_size: int = Field(1, ge=1, le=MAX_WORLD)
    strategy: Literal["auto", "single", "fsdp"] = "auto"
    # at most a week: torch keeps the timeout in milliseconds in a 64-bit integer, and a
    # larger value (1e308) overflowed it inside the rank, reported as a lost rank
    collective_timeout_s: float = Field(300.0, gt=0, le=MAX_COLLECTIVE_TIMEOUT_S)
    # An off-policy correction of the loss (docs/runtime.md, "Off-policy corrections"): off
    # (kind none) by default
    correction: CorrectionConfig = CorrectionConfig()

    @field_validator("betas")
    @classmethod
    def _betas(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):
            raise ValueError("AdamW's betas must each be in [0, 1)")
        return value

    @property
    def sharded(self) -> bool:
        """Whether the run trains with the sharded trainer (``runtime.trainer.sharded``)."""
        return self.strategy == "fsdp" or (self.strategy == "auto" and self.world_size > 1)

    @model_validator(mode="after")
    def _one_rank_single(self) -> TrainerConfig:
        if self.strategy == "single" and self.world_size > 1:
            raise ValueError(f"strategy single trains in one process: world_size must be 1 "
                             f"(got {self.world_size}); use strategy fsdp or auto")
        return self

    @model_validator(mode="after")
    def _chunks_need_streaming(self) -> TrainerConfig:
        # chunk_groups sizes the chunks of streaming training and nothing else (before: any
        # value was accepted and ignored without trainer.streaming)
        if not self.streaming and self.chunk_groups != 1:
            raise ValueError(f"chunk_groups ({self.chunk_groups}) sizes the chunks of streaming "
                             f"training: set trainer.streaming=true, or leave it at 1")
        return self

    @model_validator(mode="after")
    def _streamable(self) -> TrainerConfig:
        if self.streaming and (self.epochs != 1 or self.minibatches != 1):
            raise ValueError(f"streaming trains one pass with one optimiser step per batch: it "
                             f"needs epochs 1 and minibatches 1 (got epochs {self.epochs}, "
                             f"minibatches {self.minibatches})")
        return self


class RecoveryConfig(_Section):
    """Crash recovery (docs/recovery.md): the event log, the trajectory store and trainer
    checkpoints in run.output_dir, which ``train --resume DIR`` continues from."""

    enabled: bool = True
    # commit a trainer checkpoint (checkpoints/step-N/, what --resume restarts from) before
    # every Nth publish; 0: never (recovery retrains from the log)
    commit_every: int = Field(10, ge=0)
    keep_checkpoints: int = Field(2, ge=1)
    fsync: bool = True  # survive machine crashes too (process crashes need only the flush)


class RayConfig(_Section):
    """``run.backend: ray`` (docs/ray.md): engines and the trainer as Ray actors."""

    address: str | None = None  # an existing cluster ("auto", "ray://..."); null: start one
    num_cpus: int | None = Field(None, ge=1)  # for a local cluster started here
    engine_resources: dict[str, float] = {"num_cpus": 1}  # per engine actor
    trainer_resources: dict[str, float] = {"num_cpus": 1}  # the trainer actor, or each rank's
    # trainer.world_size > 1: the rank actors' placement group strategy (docs/ray.md)
    trainer_placement: Literal["STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD"] = "STRICT_PACK"
    max_engine_restarts: int = Field(3, ge=0)  # replacements for crashed engine actors

    @field_validator("engine_resources", "trainer_resources")
    @classmethod
    def _amounts(cls, value: dict[str, float]) -> dict[str, float]:
        # Ray's own check comes only when an actor is placed, after the engines started
        # (before: num_cpus=-1 passed --check, then the run failed)
        for name, amount in value.items():
            if not math.isfinite(amount) or amount < 0:
                raise ValueError(f"{name}: a resource amount must be a finite number >= 0, "
                                 f"got {amount}")
        return value


class RunConfig(_Section):
    backend: Literal["local", "ray"] = "local"  # in-process, or actors on a Ray cluster
    steps: int = Field(60, ge=1, le=10_000_000)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    output_dir: str = "out/runtime/demo"
    progress: bool = True
    tensorboard: bool = False
    trace: bool = True  # write driver_notes.jsonl, and events.jsonl when recovery is off
    plot: bool = True
    eval_prompts: int = Field(100, ge=0)  # prompts scored before and after training
    eval_holdout: bool = False  # True: those prompts are the data's last ones, never trained on
    eval_samples: int = Field(4, ge=1, le=10_000)
    # save the model (checkpoint-N/, a directory transformers and vLLM load) every N steps;
    # 0: only at the end (checkpoint/)
    save_model_every: int = Field(0, ge=0)
    keep_weights: int = Field(2, ge=1)  # exported weight versions kept on disk
    check_invariants: bool = False


class TrainConfig(_Section):
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    reward: RewardConfig = RewardConfig()
    rollout: RolloutConfig = RolloutConfig()
    staleness: StalenessConfig = StalenessConfig()
    timeouts: TimeoutConfig = TimeoutConfig()
    trainer: TrainerConfig = TrainerConfig()
    run: RunConfig = RunConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    ray: RayConfig = RayConfig()

    @model_validator(mode="after")
    def _chunk_fits(self) -> TrainConfig:
        t = self.trainer
        if t.streaming and t.chunk_groups > self.staleness.batch_size:
            raise ValueError(f"trainer.chunk_groups ({t.chunk_groups}) must be <= "
                             f"staleness.batch_size ({self.staleness.batch_size}): a chunk is "
                             f"part of one batch")
        return self

    @model_validator(mode="after")
    def _budget_fits(self) -> TrainConfig:
        # The exact bound (the longest prompt + rollout.max_tokens) needs the prompts and the
        # tokenizer: train --check applies it (check_token_budget); this is what the config
        # alone shows, a response of max_tokens after a one-token prompt.
        check_token_budget(self.trainer.max_tokens_per_micro_batch, 1, self.rollout.max_tokens)
        return self

    @model_validator(mode="after")
    def _peer_fits(self) -> TrainConfig:
        """A peer's rule (runtime.peers) runs without what only Reserve–Occupy has."""
        s = self.staleness
        if s.policy == REFERENCE:
            return self
        if self.recovery.enabled:
            raise ValueError(f"staleness.policy={s.policy} runs without crash recovery (it "
                             f"replays the Reserve–Occupy controller): set "
                             f"recovery.enabled=false")
        if self.trainer.streaming and not peer_streams(s.policy):
            raise ValueError(f"staleness.policy={s.policy} does not stream in the runtime: set "
                             f"trainer.streaming=false")
        if s.capacity is not None:
            raise ValueError(f"staleness.capacity (batch-level oversampling) is Reserve–Occupy's;"
                             f" staleness.policy={s.policy} does not take it")
        refused = unhonoured(s.policy, {"max_concurrency": s.max_concurrency})
        if refused is not None:  # runtime.peers.RULE_SETTINGS: what each rule honours
            raise ValueError(refused)
        return self

    def driver_settings(self) -> DriverSettings:
        s, r, t = self.staleness, self.rollout, self.timeouts
        return DriverSettings(
            eta=s.max_staleness, batch_size=s.batch_size, group_size=s.group_size,
            candidates=s.candidates, capacity=s.capacity, max_concurrency=s.max_concurrency,
            steps=self.run.steps,
            max_tokens=r.max_tokens, temperature=r.temperature, ignore_eos=r.ignore_eos,
            partial_rollout=r.partial_rollout, filter_zero_variance=s.filter_zero_variance,
            refit=r.refit,
            unit_timeout_s=t.unit_s or math.inf, stuck_timeout_s=t.stuck_s or math.inf,
            seed=self.run.seed, check_invariants=self.run.check_invariants,
            streaming=self.trainer.streaming, chunk_groups=self.trainer.chunk_groups,
            policy=s.policy)


class ConfigFileError(ValueError):
    """The config file is unreadable or invalid; the message is meant for the user as is."""


# Old key -> its name now. An old key still loads (a user's YAML keeps working), with one
# deprecation line each; a section that gives both names is refused.
RENAMED_KEYS: dict[str, str] = {
    "staleness.eta": "staleness.max_staleness",  # the core's Config.max_staleness
    "trainer.min_chunk_units": "trainer.chunk_groups",  # the simulator's cost.train.chunk_groups
    "run.checkpoint_every": "run.save_model_every",  # writes checkpoint-N/, a model directory
    "recovery.checkpoint_every": "recovery.commit_every",  # commits checkpoints/step-N/
}


def _deprecated(old: str, new: str, where: str) -> str:
    return f"{where}: {old} is deprecated, use {new} (the same setting)"


def _rename_keys(data: dict[str, Any], source: str, warn: Callable[[str], None]) -> None:
    """Move the old keys of ``data`` (a config file's mapping) to their names now, in place."""
    for old, new in RENAMED_KEYS.items():
        section, old_leaf = old.split(".")
        new_leaf = new.split(".")[1]
        node = data.get(section)
        if not isinstance(node, dict) or old_leaf not in node:
            continue
        if new_leaf in node:
            raise ConfigFileError(f"{source}: {old} and {new} are one setting (the first is its "
                                  f"old name): give only {new}")
        node[new_leaf] = node.pop(old_leaf)
        warn(_deprecated(old, new, source))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _describe(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = (f" (got {err['input']!r})" if err["type"] not in ("extra_forbidden", "missing")
               and not isinstance(err["input"], dict) else "")
        lines.append(f"  {where}: {msg}{got}")
    return lines


MAX_CONFIG_BYTES = 16 << 20  # a config file (or a run's config.json) read by load_config


MAX_YAML_VALUES = 1_000_000  # values a config may stand for once its aliases are expanded


def safe_yaml(text: str) -> Any:
    """``yaml.safe_load``, refusing with ``ValueError`` a document nested deeper than
    ``MAX_JSON_DEPTH`` levels (PyYAML's composer recurses: 1,000 levels are a
    ``RecursionError``; the depth is counted on the parser's events, which it produces without
    recursing), and one whose aliases expand it past ``MAX_YAML_VALUES`` values, past that
    depth, or into itself. PyYAML shares an aliased node rather than copying it, so nine
    lines of ``&a [*b, *b, ...]`` load at once -- and then the run's ``config.json``, which
    writes every copy out, takes gigabytes ("billion laughs")."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        _check_expansion(root)
        _check_duplicates(root)
    return yaml.safe_load(text)


def _check_duplicates(root: yaml.Node) -> None:
    """A key given twice in one mapping (a setting, or a whole section) raises ``ValueError``
    naming the key and both lines: PyYAML keeps the last one without a word, so a second
    ``run:`` section silently dropped every setting of the first. Keys are compared as
    YAML reads them (tag and text: ``1`` and ``"1"`` differ, as they load)."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias: checked where it was defined
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                stack.extend((key, value))
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key.start_mark.line + 1
                if (key.tag, key.value) in first:
                    raise ValueError(f"the key {key.value!r} is given twice (lines "
                                     f"{first[key.tag, key.value]} and {line}); give it once")
                first[key.tag, key.value] = line


def _check_expansion(root: yaml.Node) -> None:
    """The values and depth ``root`` stands for with every alias expanded, counted once per
    node (memoised by identity, iteratively: an alias chain is as long as the file allows)."""
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth), values capped
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in done:
            continue
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        if not children_done:
            open_.add(id(node))
            stack.append((node, True))
            for kid in kids:
                if id(kid) in open_:
                    raise ValueError("a YAML alias refers to a value that contains it")
                if id(kid) not in done:
                    stack.append((kid, False))
            continue
        open_.discard(id(node))
        values = 1 + sum(done[id(k)][0] for k in kids)
        deep = (1 if kids or isinstance(node, yaml.CollectionNode) else 0) + max(
            (done[id(k)][1] for k in kids), default=0)
        if values > MAX_YAML_VALUES:
            raise ValueError(f"its aliases expand it to more than {MAX_YAML_VALUES:,} values")
        if deep > MAX_JSON_DEPTH:
            raise ValueError(f"its aliases nest it deeper than {MAX_JSON_DEPTH} levels")
        done[id(node)] = (values, deep)


def load_config(path: str | Path | None = None,
                overrides: dict[str, Any] | None = None,
                warn: Callable[[str], None] = _stderr) -> TrainConfig:
    """Read and validate ``path`` (None: the embedded default), then apply dotted
    ``overrides`` such as ``{"run.steps": 5}``. An old key name (``RENAMED_KEYS``), in the
    file or an override, is read as its new one and ``warn`` gets one line for it."""
    data: dict[str, Any] = {}
    source = "the embedded default"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigFileError(f"{source}: cannot read the config file "
                                  f"({exc.strerror or exc})") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigFileError(f"{source}: larger than {MAX_CONFIG_BYTES >> 20} MiB: not a "
                                  f"config file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigFileError(f"{source}: not a UTF-8 text file (byte {exc.start}: "
                                  f"{exc.reason})") from None
        try:
            loaded = safe_yaml(text)
        except yaml.YAMLError as exc:
            raise ConfigFileError(f"{source}: not valid YAML: {exc}") from None
        except ValueError as exc:
            raise ConfigFileError(f"{source}: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigFileError(f"{source}: the top level must be a mapping of sections, "
                                  f"got {type(loaded).__name__}")
        data = loaded or {}
        _rename_keys(data, source, warn)
    for dotted, value in (overrides or {}).items():
        if dotted in RENAMED_KEYS:
            warn(_deprecated(dotted, RENAMED_KEYS[dotted], "override"))
            dotted = RENAMED_KEYS[dotted]
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigFileError(f"override {dotted}: {key} is not a section")
        if not isinstance(node, dict):
            raise ConfigFileError(f"override {dotted}: {'.'.join(parents)} is not a section")
        node[leaf] = value
    try:
        cfg = TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigFileError(
            "\n".join([f"{source}: invalid configuration:", *_describe(exc)])) from None
    _check_texts(cfg, source)
    return cfg


# Settings that name a path, and settings that name a field, a module or a cluster: an empty
# one never means "none" (``null`` does) -- run.output_dir '' wrote into the current directory.
PATH_SETTINGS = ("model.path", "data.path", "run.output_dir")
NAME_SETTINGS = ("data.prompt_field", "data.answer_field", "reward.name", "ray.address")


def _check_texts(cfg: TrainConfig, source: str) -> None:
    """Every path setting's text as ``inputs.path_text`` checks it (not empty, no NUL byte,
    not longer than a path can be), every name setting not empty: ``ConfigFileError``."""
    from .inputs import InputError, name_text, path_text

    for dotted in (*PATH_SETTINGS, *NAME_SETTINGS):
        section, leaf = dotted.split(".")
        value = getattr(getattr(cfg, section), leaf)
        if value is None:
            continue
        try:
            (path_text if dotted in PATH_SETTINGS else name_text)(value, dotted)
        except InputError as exc:
            raise ConfigFileError(f"{source}: invalid configuration: {exc}") from None


def parse_override(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--set`` (VALUE read as YAML) -> (key, value), or a one-line
    ``ConfigFileError`` naming the option."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigFileError(f"--set expects KEY=VALUE, got {item!r}")
    if not value.strip():  # YAML reads '' as null: data.path= silently meant the demo data
        raise ConfigFileError(f"--set {key.strip()}=: the value is empty (write "
                              f"{key.strip()}=null for no value, or {key.strip()}=\"\" for "
                              f"an empty string)")
    try:
        return key.strip(), safe_yaml(value)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigFileError(f"--set {item}: the value is not valid YAML ({detail})") from None
    except ValueError as exc:
        raise ConfigFileError(f"--set {key.strip()}: {exc}") from None


def check_token_budget(budget: int, longest_prompt: int, max_tokens: int) -> None:
    """Refuse ``trainer.max_tokens_per_micro_batch`` below the longest sample the run can
    train (its longest prompt and a response of ``rollout.max_tokens``) with one line naming
    the setting: such a sample fits no micro-batch."""
    longest = longest_prompt + max_tokens
    if budget < longest:
        raise ValueError(f"trainer.max_tokens_per_micro_batch {budget} is below the longest "
                         f"sample, {longest} tokens (a {longest_prompt}-token prompt and "
                         f"rollout.max_tokens {max_tokens}): raise it to at least {longest}")


def check_precision(precision: str, device_type: str) -> None:
    """Refuse ``trainer.precision`` bf16 on a CUDA device without bfloat16 (before Ampere)
    with one line naming the setting; CPUs emulate bfloat16 where they lack it."""
    if precision == "fp32" or device_type != "cuda":
        return
    import torch

    if not torch.cuda.is_bf16_supported():
        raise ValueError(f"trainer.precision {precision}: this GPU "
                         f"({torch.cuda.get_device_name()}) has no bfloat16; use fp32")


def check_world_size(world_size: int, device: str) -> None:
    """Refuse ``trainer.world_size`` ranks this machine cannot give one each of: more than
    its CPUs (``os.sched_getaffinity``, what this process may use) for a CPU trainer, more
    than its CUDA devices for a GPU one. One line naming the setting."""
    import os

    if world_size <= 1:
        return
    if device.startswith("cuda"):
        import torch

        have = torch.cuda.device_count()
        if world_size > have:
            raise ValueError(f"trainer.world_size {world_size}: this machine has {have} CUDA "
                             f"device(s), one per rank")
        return
    cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1)
    if world_size > cpus:
        raise ValueError(f"trainer.world_size {world_size}: this machine gives this process "
                         f"{cpus} CPU(s), fewer than one per rank")


def resolve_device(name: str) -> str:
    """The torch device ``trainer.device`` names, checked on this machine: ``auto`` is
    ``cuda`` when CUDA is available, else ``cpu``. Raises ``ValueError`` (one line, naming the
    setting) for an unknown device or one this machine does not have, so that ``train`` and
    ``train --check`` refuse it before any engine starts."""
    if name == "cpu":  # the default: answered without importing torch (seconds of --check)
        return name
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"trainer.device {name!r}: not a torch device ({exc}); use auto, cpu "
                         f"or cuda") from None
    if device.type == "cpu":
        return name
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"trainer.device {name!r}: CUDA is not available on this machine "
                             f"(torch {torch.__version__}); use auto or cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"trainer.device {name!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
        return name
    backend = getattr(torch, device.type, None) or getattr(torch.backends, device.type, None)
    available = getattr(backend, "is_available", None)
    if available is None or not available():
        raise ValueError(f"trainer.device {name!r}: the {device.type} device is not available "
                         f"on this machine; use auto or cpu")
    return name


def engine_arg_names() -> frozenset[str]:
    """The keyword arguments vLLM's ``AsyncEngineArgs`` takes (its dataclass fields), read
    from the installed vLLM's source without importing it (an import costs ~10 s of CPU);
    imported after all if the source does not show them."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None:
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
    names: set[str] = set()
    for root in spec.submodule_search_locations or ():
        path = Path(root) / "engine" / "arg_utils.py"
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name in ("EngineArgs", "AsyncEngineArgs"):
                names.update(st.target.id for st in node.body
                             if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                             and "ClassVar" not in ast.unparse(st.annotation))
    if not names:
        import dataclasses

        from vllm.engine.arg_utils import AsyncEngineArgs

        names = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    return frozenset(names)


def check_engine_args(engine_args: dict[str, Any]) -> None:
    """Every key of ``rollout.engine_args`` is an ``AsyncEngineArgs`` argument: one line
    naming the first unknown key (and the nearest known one), not vLLM's traceback when the
    engine starts."""
    if not engine_args:
        return
    import difflib

    known = engine_arg_names()
    for key in engine_args:
        if key not in known:
            near = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"rollout.engine_args.{key}: not an argument of vLLM's "
                             f"AsyncEngineArgs{hint}")
