"""Cost model of the simulator: how long a decode step, a prefill, a training step and a weight
sync take. Presets are named, written down with their derivation, and loadable from JSON.

Rollout (one instance, continuous batching): a decode step with ``k`` running requests whose
contexts sum to ``ctx`` tokens takes ``max(F, a + b*k + c*ctx)`` seconds and produces one token per
running request. A request that joins pays ``prefill_per_token * prompt_tokens`` of prefill, and
after a weight update every running request re-prefills its whole context (partial rollout: the
KV cache computed with the old weights is not reused). ``train_slowdown`` (default 0) is for a
trainer that shares the rollout's processors: while the trainer trains, every decode step takes
``1 + train_slowdown`` times as long (fitted by bench/calibrate.py on the CPU runtime, where
vLLM and the torch trainer share the cores; 0 for separate GPUs, as in every preset).
``TrainCost.rollout_slowdown`` (default 0) is the other direction of the same sharing: with
``n`` requests running on the instances (all of them together), training runs at
``1 / (1 + rollout_slowdown * f(n))`` of its speed, ``f`` the load's shape
(``TrainCost.rollout_load``): ``saturating``, ``f(n) = min(1, n / rollout_load_n)``, or
``hyperbolic``, ``f(n) = n / (n + rollout_load_n)``; ``f(0) = 0``. The default, ``saturating``
with ``rollout_load_n = 1``, is a busy flag (the full slowdown while any request runs). A step
(or chunk) whose work is ``w`` seconds alone thus takes ``w`` stretched by the load the engine
had during it (the simulator re-times the trainer whenever the running requests change).

Training (one batch): ``(fixed + per_token * tokens + per_token_sq * sum(L_i^2)) * (1 + bubble)``
where ``bubble = (pipeline_stages - 1) / microbatches`` (1F1B pipeline) and ``L_i`` is the length
of trajectory ``i`` (the quadratic term is causal attention). Then the weights are synced to the
rollout instances in ``sync_s`` seconds, during which rollout is paused.

Chunked (streaming) training, ``chunk_groups`` >= 1 (0, the default, is the whole-batch trainer
above): the trainer takes a step's groups in chunks as they become final, at least
``min(chunk_groups, groups the step still lacks)`` at a time. A chunk of trajectories costs
``chunk_share * work * (1 + bubble_chunk) + chunk_overhead_s``, where ``work = per_token * tokens
+ per_token_sq * sum(L_i^2)`` of the chunk and ``bubble_chunk`` is the pipeline bubble of the
chunk's own micro-batches (a small chunk fills the pipeline worse); ``chunk_overhead_s`` is what
every chunk pays besides (log-prob preparation, data movement, the trainer's mode switches). The
step ends with the optimizer step and fixed cost, ``fixed_s``, plus the part of the work that
cannot run per chunk, ``(1 - chunk_share) * work * (1 + bubble)`` of the whole batch.
``chunk_share = 1`` is a trainer that runs forward and backward per chunk and accumulates
gradients (NeMo-RL's ``train_microbatches_from_meta``); PSRL's fine-grain overlap in its default
``recompute`` scope runs only the old-log-prob forward per chunk, 2N of the 10N FLOP per token
of ``train.per_token_s`` below, so 0.2.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from runtime.inputs import COST_FILE_BYTES, FileInputError, json_file


class CostError(ValueError):
    """A cost parameter is missing, unknown or out of range; ``field`` names it."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field = field_name
        super().__init__(f"cost parameter {field_name!r}: {message}")


@dataclass(frozen=True)
class RolloutCost:
    """Per-instance decode/prefill cost (seconds). See the module docstring for the formula."""

    floor_s: float  # F: one pass over the weights plus fixed per-step overhead
    step_s: float  # a: per-step overhead that adds to the per-request and attention terms
    per_request_s: float  # b: dense compute per running request per step
    per_ctx_token_s: float  # c: reading one token of KV cache per step
    prefill_per_token_s: float  # prefill of one prompt (or re-prefilled context) token
    reprefill_on_update: bool = True  # partial rollout re-prefills the context on new weights
    train_slowdown: float = 0.0  # decode steps take 1 + this times as long while training

    def step_time(self, k: int, ctx: float) -> float:
        """Duration of one decode step with ``k`` running requests and ``ctx`` context tokens."""
        return max(self.floor_s, self.step_s + self.per_request_s * k + self.per_ctx_token_s * ctx)


LOAD_SHAPES = ("saturating", "hyperbolic")  # TrainCost.rollout_load


def load_share(shape: str, scale: float, n: float) -> float:
    """The engine's load ``n`` (running requests) as a share of the trainer's full slowdown:
    ``saturating``, ``min(1, n / scale)`` (``scale`` <= 1: any request, a busy flag);
    ``hyperbolic``, ``n / (n + scale)``; 0 without a request."""
    if n <= 0:
        return 0.0
    if shape == "saturating":
        return 1.0 if n >= scale else n / scale
    if shape == "hyperbolic":
        return n / (n + scale)
    raise CostError("train.rollout_load", f"unknown shape {shape!r} (choose from "
                                          f"{', '.join(LOAD_SHAPES)})")


@dataclass(frozen=True)
class TrainCost:
    """Trainer cost (seconds) of one batch and of one weight sync."""

    fixed_s: float
    per_token_s: float
    per_token_sq_s: float = 0.0
    pipeline_stages: int = 1
    microbatch_size: int = 1  # trajectories per micro-batch; sets the number of micro-batches
    sync_s: float = 0.0
    chunk_groups: int = 0  # 0: whole-batch trainer; n >= 1: chunks of at least min(n, left)
    chunk_overhead_s: float = 1.0  # paid by every chunk (streaming only)
    chunk_share: float = 1.0  # share of the per-token work a chunk runs (streaming only)
    rollout_slowdown: float = 0.0  # training runs 1 / (1 + this * f(n)) as fast, n running
    rollout_load: str = "saturating"  # f: saturating min(1, n / load_n); hyperbolic n/(n+load_n)
    rollout_load_n: float = 1.0  # the load's scale (saturating at 1: a busy flag)

    @property
    def streaming(self) -> bool:
        return self.chunk_groups > 0

    def load_share(self, n: int) -> float:
        """``f(n)``: the share of ``rollout_slowdown`` that ``n`` running requests cause."""
        return load_share(self.rollout_load, self.rollout_load_n, n)

    def _bubble(self, trajectories: int) -> float:
        microbatches = max(1, math.ceil(trajectories / self.microbatch_size))
        return 1.0 + (self.pipeline_stages - 1) / microbatches

    def _work(self, lengths: list[int] | tuple[int, ...]) -> float:
        return self.per_token_s * sum(lengths) + self.per_token_sq_s * sum(n * n for n in lengths)

    def batch_time(self, lengths: list[int] | tuple[int, ...]) -> float:
        """Training time of one batch whose trajectories have these total lengths (tokens)."""
        tokens = sum(lengths)
        squares = sum(n * n for n in lengths)
        base = self.fixed_s + self.per_token_s * tokens + self.per_token_sq_s * squares
        return base * self._bubble(len(lengths))

    def chunk_time(self, lengths: list[int] | tuple[int, ...]) -> float:
        """Streaming: training time of one chunk with these trajectory lengths."""
        return self.chunk_share * self._work(lengths) * self._bubble(len(lengths)) \
            + self.chunk_overhead_s

    def finish_time(self, lengths: list[int] | tuple[int, ...]) -> float:
        """Streaming: what the step costs after its last chunk (``lengths``: the whole batch)."""
        rest = 1.0 - self.chunk_share
        return self.fixed_s + (rest * self._work(lengths) * self._bubble(len(lengths))
                               if rest > 0 else 0.0)


@dataclass(frozen=True)
class CostModel:
    """Everything the simulator needs to know about time, plus where the numbers came from."""

    name: str
    rollout: RolloutCost
    train: TrainCost
    instances: int = 2
    concurrency: int = 40  # max running requests per instance (vLLM max_num_seqs)
    derivation: dict[str, str] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- the preset -----
# Public numbers used (spec sheets and the model card, not measurements of ours):
#   Qwen3-8B: 8.19e9 parameters, 36 layers, hidden 4096, 8 KV heads x 128 dims (GQA), bf16.
#     weights 16.4 GB; KV cache per token = 36 * 2 * 8 * 128 * 2 B = 147,456 B.
#   NVIDIA H20: 148 TFLOPS dense BF16, 96 GB HBM3 at 4.0 TB/s, NVLink 900 GB/s.
# Efficiencies (assumptions, stated): 80 % of peak memory bandwidth in decode, 50 % MFU for the
# decode GEMMs, 60 % for prefill, 40 % MFU for Megatron training on 6 GPUs.
_N = 8.19e9
_KV_BYTES = 36 * 2 * 8 * 128 * 2
_H20_FLOPS, _H20_BW = 148e12, 4.0e12

QWEN3_8B_H20 = CostModel(
    name="qwen3-8b-h20",
    instances=2,
    concurrency=40,
    rollout=RolloutCost(
        floor_s=round(2 * _N / (_H20_BW * 0.8) + 0.003, 4),  # 5.1 ms weights + 3 ms overhead
        step_s=0.003,
        per_request_s=round(2 * _N / (_H20_FLOPS * 0.5), 6),  # 0.22 ms per running request
        per_ctx_token_s=float(f"{_KV_BYTES / (_H20_BW * 0.8):.3g}"),  # 4.6e-8 s per KV token
        prefill_per_token_s=2.0e-4,  # 2N FLOP/token at 60 % MFU = 1.85e-4 s, +~10 % attention
        reprefill_on_update=True,
    ),
    train=TrainCost(
        fixed_s=8.0,
        per_token_s=float(f"{10 * _N / (6 * _H20_FLOPS * 0.4):.3g}"),  # 2.31e-4 s per token
        per_token_sq_s=4.2e-9,
        pipeline_stages=3,
        microbatch_size=1,
        sync_s=3.0,
    ),
    derivation={
        "hardware": "one node of 8 H20 (148 TFLOPS dense BF16, 96 GB HBM3, 4.0 TB/s, NVLink "
                    "900 GB/s): 2 rollout instances at TP1, 6 training GPUs (Megatron TP2 PP3 DP1)",
        "floor_s": "one pass over 16.4 GB of bf16 weights at 80% of 4.0 TB/s = 5.1 ms, plus 3 ms "
                   "of per-step scheduling, sampling and launch overhead",
        "step_s": "the 3 ms per-step overhead, which also applies above the floor",
        "per_request_s": "2 x 8.19e9 FLOP per token at 50% of 148 TFLOPS = 0.22 ms per running "
                         "request per step",
        "per_ctx_token_s": "147,456 B of KV cache per token (36 layers x 2 x 8 KV heads x 128 x "
                           "2 B) read at 80% of 4.0 TB/s = 4.6e-8 s per context token per step",
        "prefill_per_token_s": "2 x 8.19e9 FLOP per token at 60% MFU = 1.85e-4 s, rounded up "
                               "to 2.0e-4 s for attention over contexts of a few thousand tokens",
        "reprefill_on_update": "partial rollout: after a weight update the running requests are "
                               "resubmitted with their tokens and re-prefill them (as verl, ROLL, "
                               "AReaL and PSRL do; DryRun-RL models the same)",
        "train.per_token_s": "10 x 8.19e9 FLOP per token (forward+backward 6N, full activation "
                             "recompute 2N, old-log-prob forward 2N) at 40% MFU of 6 x 148 TFLOPS",
        "train.per_token_sq_s": "causal attention 2 x 36 x 4096 x L^2 FLOP per forward, 5 "
                                "forward-equivalents, at the same 355 TFLOP/s",
        "train.fixed_s": "optimizer step, log-prob preparation and data movement: an assumption",
        "train.pipeline": "PP=3 with one trajectory per micro-batch: bubble (3-1)/128 of a batch",
        "train.sync_s": "gather 16.4 GB from TP2 PP3 and broadcast over NVLink, plus engine "
                        "pause/resume: an assumption (NVLink alone would take ~0.1 s)",
        "train.chunk_groups": "0: the whole-batch trainer; a streaming run sets the chunk size",
        "train.chunk_overhead_s": "per chunk of a streaming trainer: log-prob preparation, data "
                                  "movement, mode switches and the chunk's own pipeline fill, "
                                  "1 s: an assumption, an eighth of fixed_s",
        "train.chunk_share": "1: forward and backward per chunk (NeMo-RL); PSRL's recompute "
                             "scope runs only the old-log-prob forward per chunk, 2N of 10N",
        "status": "derived from public spec sheets with stated efficiencies; not fitted to "
                  "measurements, and not the source's (unpublished) SimRL coefficients",
    },
)

# A tiny preset for tests and demos: same formulas, numbers chosen to make runs short.
TOY = CostModel(
    name="toy",
    instances=2,
    concurrency=8,
    rollout=RolloutCost(floor_s=0.01, step_s=0.005, per_request_s=0.001, per_ctx_token_s=1e-6,
                        prefill_per_token_s=1e-4),
    train=TrainCost(fixed_s=0.5, per_token_s=1e-4, sync_s=0.1),
    derivation={"status": "arbitrary small numbers for tests"},
)

PRESETS: dict[str, CostModel] = {m.name: m for m in (QWEN3_8B_H20, TOY)}
DEFAULT_PRESET = QWEN3_8B_H20.name


def scale_nodes(model: CostModel, nodes: int) -> CostModel:
    """``model`` (one node) repeated over ``nodes`` nodes, as the preset's derivation reads:
    each node adds its rollout instances (the engines are independent, each at the same
    per-instance cost), and its training GPUs join the trainer as data-parallel replicas of
    the same TP x PP layout. So ``instances`` multiplies by ``nodes``; ``per_token_s`` and
    ``per_token_sq_s`` (the FLOP of a batch, at the same MFU over ``nodes`` times the GPUs)
    divide by it; ``microbatch_size`` multiplies by it (each replica takes its own
    micro-batches, so the 1F1B bubble is that of one replica's share); ``fixed_s`` (the
    optimizer step and data movement, each replica on its own shard) and ``sync_s`` (an
    assumption already) stay, as every other term does: the chunk terms and the engine's
    contention for the trainer (``rollout_slowdown``, its load counted over every engine, as a
    one-node model counts it over its instances). ``nodes = 1`` is ``model`` itself."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise CostError("nodes", f"must be an integer >= 1, got {nodes!r}")
    if nodes == 1:
        return model
    t = model.train
    # every other field (the chunk terms, the engine's contention for the trainer) carries over
    # as it is: ``replace``, so a field added to TrainCost later cannot be dropped here
    train = replace(t, per_token_s=t.per_token_s / nodes,
                    per_token_sq_s=t.per_token_sq_s / nodes,
                    microbatch_size=t.microbatch_size * nodes)
    derivation = {**model.derivation, "scale": (
        f"{nodes} nodes of the preset's one: instances x {nodes}; the trainer's per-token "
        f"terms / {nodes} (data-parallel replicas at the same MFU), micro-batches of "
        f"{nodes} x {t.microbatch_size} (one per replica); fixed_s and sync_s as one node's")}
    return CostModel(name=f"{model.name}x{nodes}", rollout=model.rollout, train=train,
                     instances=model.instances * nodes, concurrency=model.concurrency,
                     derivation=derivation)


# --------------------------------------------------------------------------- loading -------

_INT_LOW = {"chunk_groups": 0}  # integer fields whose lowest value is not 1
_NUMBER_HIGH = {"chunk_share": 1.0}  # number fields with an upper limit
_CHOICES = {"rollout_load": LOAD_SHAPES}  # string fields and their values


def _build(cls, data: object, where: str):
    if not isinstance(data, dict):
        raise CostError(where, f"must be a JSON object, got {type(data).__name__}")
    names = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise CostError(f"{where}.{unknown[0]}", f"unknown (expected one of {sorted(names)})")
    values = {}
    for name, f in names.items():
        if name not in data:
            continue  # the dataclass default applies, or the missing check below fires
        value = data[name]
        want = f.type if isinstance(f.type, str) else f.type.__name__
        if want == "str":
            choices = _CHOICES[name]
            if value not in choices:
                raise CostError(f"{where}.{name}", f"must be one of {', '.join(choices)}, "
                                                   f"got {value!r}")
        elif want == "bool":
            if not isinstance(value, bool):
                raise CostError(f"{where}.{name}", f"must be true or false, got {value!r}")
        elif want == "int":
            low = _INT_LOW.get(name, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise CostError(f"{where}.{name}", f"must be an integer >= {low}, got {value!r}")
        else:
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value < 0):
                raise CostError(f"{where}.{name}", f"must be a number >= 0, got {value!r}")
            value = float(value)
            high = _NUMBER_HIGH.get(name)
            if high is not None and value > high:
                raise CostError(f"{where}.{name}", f"must be a number in [0, {high:g}], "
                                                   f"got {value!r}")
        values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:  # a required field is missing
        missing = [n for n in names if n not in values]
        raise CostError(f"{where}.{missing[0] if missing else '?'}", "is required") from exc


def cost_from_dict(data: object, base: CostModel | None = None) -> CostModel:
    """Build a ``CostModel`` from a JSON-like dict. With ``base``, missing sections and fields
    keep the base's values, so a file may override only what it changes."""
    if not isinstance(data, dict):
        raise CostError("<file>", f"must be a JSON object, got {type(data).__name__}")
    allowed = {"name", "rollout", "train", "instances", "concurrency", "derivation", "preset"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise CostError(unknown[0], f"unknown (expected one of {sorted(allowed)})")
    if "preset" in data:
        if data["preset"] not in PRESETS:
            raise CostError("preset", f"unknown preset {data['preset']!r} "
                                      f"(choose from {', '.join(PRESETS)})")
        base = PRESETS[data["preset"]]
    merged: dict = {} if base is None else base.to_json()
    for section in ("rollout", "train"):
        if section in data:
            if not isinstance(data[section], dict):
                raise CostError(section, "must be a JSON object")
            merged[section] = {**merged.get(section, {}), **data[section]}
        elif section not in merged:
            raise CostError(section, "is required (or name a base \"preset\")")
    rollout = _build(RolloutCost, merged["rollout"], "rollout")
    train = _build(TrainCost, merged["train"], "train")
    out = {}
    for name in ("instances", "concurrency"):
        value = data.get(name, merged.get(name, 2 if name == "instances" else 40))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CostError(name, f"must be an integer >= 1, got {value!r}")
        out[name] = value
    derivation = data.get("derivation", {} if "rollout" in data or "train" in data
                          else merged.get("derivation", {}))
    if not isinstance(derivation, dict):
        raise CostError("derivation", "must be a JSON object of strings")
    name = data.get("name", (merged.get("name", "custom") + "+custom") if base else "custom")
    return CostModel(name=str(name), rollout=rollout, train=train, derivation=dict(derivation),
                     **out)


def load_cost(path: str | Path) -> CostModel:
    """Read a cost model from a JSON file of at most ``COST_FILE_BYTES`` (see
    ``cost_from_dict``); missing fields default to the default preset's."""
    p = Path(path)
    try:
        data = json_file(p, "--cost", COST_FILE_BYTES)
    except FileInputError as exc:
        raise CostError("<file>", f"{p}: {exc.reason}") from None
    return cost_from_dict(data, base=PRESETS[DEFAULT_PRESET])


def preset(name: str) -> CostModel:
    try:
        return PRESETS[name]
    except KeyError:
        raise CostError(
            "preset", f"unknown preset {name!r} (choose from {', '.join(PRESETS)})") from None
