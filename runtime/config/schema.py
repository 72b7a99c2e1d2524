"""The ``train`` configuration's schema: one pydantic model per YAML section, and ``TrainConfig``.

Every section is a pydantic model with ``extra="forbid"``, so a misspelt key is an error, not a
silent default. With no file, ``TrainConfig()`` is the embedded default (``configs/demo.yaml``
spells the same values out). Reading a file is ``runtime.config.files``; what only this machine
can answer (device, precision, world size, vLLM's engine arguments, prompt lengths) is
``runtime.machine_checks``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from reserve_occupy.config import MAX_STALENESS

from ..peers import POLICY_CHOICES, RESERVE_OCCUPY, peer_streams, unhonoured
from ..records import DriverSettings

if TYPE_CHECKING:
    from ..models.tiny import TinySpec

def check_token_budget(budget: int, longest_prompt: int, max_tokens: int) -> None:
    """Refuse ``trainer.max_tokens_per_micro_batch`` below the longest sample the run can
    train (its longest prompt and a response of ``rollout.max_tokens``) with one line naming
    the setting: such a sample fits no micro-batch."""
    longest = longest_prompt + max_tokens
    if budget < longest:
        raise ValueError(f"trainer.max_tokens_per_micro_batch {budget} is below the longest "
                         f"sample, {longest} tokens (a {longest_prompt}-token prompt and "
                         f"rollout.max_tokens {max_tokens}): raise it to at least {longest}")


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
    policy: str = RESERVE_OCCUPY
    # The STUCK release's options (docs/runtime.md, "staleness.stuck_action"; spec/PROTOCOL.md
    # §6.2): what the STUCK timeout does to the head's groups; release (the source protocol),
    # retry (their prompts are admitted again first) or truncate (they finish with what they
    # generated so far, rewarded on that text)
    stuck_action: Literal["release", "retry", "truncate"] = "release"
    stuck_threshold: int | None = Field(None, ge=1, le=MAX_GROUPS)

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
        if self.stuck_threshold is not None and self.stuck_action == "release":
            raise ValueError("stuck_threshold applies only with stuck_action=retry or "
                             "truncate")
        if self.stuck_threshold is not None and self.stuck_threshold > self.batch_size:
            raise ValueError(f"stuck_threshold ({self.stuck_threshold}) must be <= batch_size "
                             f"({self.batch_size}): it counts the head's groups not finished")
        if self.stuck_action != "release" and self.policy != RESERVE_OCCUPY:
            raise ValueError(f"stuck_action={self.stuck_action} is Reserve–Occupy's; "
                             f"staleness.policy={self.policy} has no STUCK release")
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
    def _stuck_action_has_a_timeout(self) -> TrainConfig:
        if self.staleness.stuck_action != "release" and self.timeouts.stuck_s is None:
            raise ValueError(f"staleness.stuck_action={self.staleness.stuck_action} acts at the "
                             f"STUCK timeout: set timeouts.stuck_s")
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
        if s.policy == RESERVE_OCCUPY:
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
        """The driver's settings, each under its config name (a timeout that is off, null
        here, is ``math.inf`` there)."""
        s, r, t = self.staleness, self.rollout, self.timeouts
        return DriverSettings(
            max_staleness=s.max_staleness, batch_size=s.batch_size, group_size=s.group_size,
            candidates=s.candidates, capacity=s.capacity, max_concurrency=s.max_concurrency,
            steps=self.run.steps,
            max_tokens=r.max_tokens, temperature=r.temperature, ignore_eos=r.ignore_eos,
            partial_rollout=r.partial_rollout, filter_zero_variance=s.filter_zero_variance,
            refit=r.refit,
            unit_s=t.unit_s or math.inf, stuck_s=t.stuck_s or math.inf,
            seed=self.run.seed, check_invariants=self.run.check_invariants,
            streaming=self.trainer.streaming, chunk_groups=self.trainer.chunk_groups,
            policy=s.policy, stuck_action=s.stuck_action, stuck_threshold=s.stuck_threshold)

    def tiny_spec(self) -> TinySpec:
        """The embedded tiny model's build (``model.tiny``; its positions are
        ``rollout.max_model_len``), as ``runtime.models.tiny`` takes it."""
        from ..models.tiny import TinySpec

        t = self.model.tiny
        return TinySpec(hidden_size=t.hidden_size, layers=t.layers, heads=t.heads,
                        max_positions=self.rollout.max_model_len, seed=t.seed,
                        warmup_steps=t.warmup_steps, warmup_lr=t.warmup_lr,
                        max_operand=t.max_operand, chat=t.chat)
