"""Micro-batches of the GRPO trainer: how samples are split and packed into rows.

With packing (``trainer.packing``), a micro-batch is one row of several samples' prompt +
response tokens, ``position_ids`` restarting at 0 for each sample and attention kept within each
sample, so no padding is computed (the samples are assigned to micro-batches first-fit-decreasing
by tokens, ``plan_micro_batches``); without, it is one padded row per sample. Either way a
micro-batch holds at most ``max_tokens_per_micro_batch`` tokens (``TokenBudgetError``). How
attention is kept within a sample depends on the model's attention implementation
(``packed_attention``); under ``sdpa`` the trainer registers ``per_sample_sdpa`` with
transformers (``use_per_sample_sdpa``). ``GRPOTrainer`` (``runtime.trainer.grpo``) builds the
rows; its module docstring has the whole picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class TokenBudgetError(ValueError):
    """A sample longer than ``trainer.max_tokens_per_micro_batch``: it fits no micro-batch."""


# The attention implementation a packed row runs under where the model's own is ``sdpa``
PER_SAMPLE_SDPA = "ro_per_sample_sdpa"


def per_sample_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attention_mask: torch.Tensor | None,
                    dropout: float = 0.0, scaling: float | None = None,
                    packed_segments: Sequence[tuple[int, int]] | None = None,
                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention for a packed row on any device: transformers' own ``sdpa`` attention, causal,
    on each sample's slice ``[start, end)`` of the row (``packed_segments``), so that a token
    attends only within its sample and the work is the sum of the samples' squares, not the
    row's square (a block-diagonal mask over the whole row costs the row's square). Without
    segments, the row is one sequence. Registered with transformers' ``AttentionInterface``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is not None:
        raise ValueError(f"{PER_SAMPLE_SDPA} attends within packed samples; it takes no mask")
    segments = packed_segments or ((0, query.shape[2]),)
    outs = [sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b],
                                   value[:, :, a:b], None, dropout=dropout, scaling=scaling,
                                   **kwargs)[0] for a, b in segments]
    return torch.cat(outs, dim=1), None


def packed_attention(implementation: str | None) -> str:
    """How a packed row keeps attention within each sample under ``implementation`` (the
    model's ``config._attn_implementation``): ``per-sample`` (``sdpa``, which the trainer
    replaces by ``per_sample_sdpa``), ``mask`` (``eager``: a block-diagonal causal additive
    4D mask) or ``position_ids`` (flash-attention's variable-length path, flex_attention:
    transformers finds the samples where ``position_ids`` restart, without a KV cache)."""
    if implementation in (None, "sdpa", PER_SAMPLE_SDPA):
        return "per-sample"
    if implementation == "eager":
        return "mask"
    return "position_ids"


def plan_micro_batches(lengths: Sequence[int], budget: int, packed: bool,
                       max_rows: int | None = None) -> list[list[int]]:
    """The micro-batches (lists of indices into ``lengths``, each sample's prompt + response
    tokens), deterministic. Packed: first-fit-decreasing: samples longest first (ties by
    index), each into the first micro-batch whose tokens stay within ``budget``. Padded: in
    order, a micro-batch grows while its rows x its longest row stay within ``budget`` and it
    has at most ``max_rows`` rows. A sample longer than ``budget`` gets a micro-batch of its
    own (``GRPOTrainer`` refuses such a sample before training; ``score`` takes it)."""
    if packed:
        bins: list[list[int]] = []
        used: list[int] = []
        for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
            for b, u in enumerate(used):
                if u + lengths[i] <= budget:
                    bins[b].append(i)
                    used[b] += lengths[i]
                    break
            else:
                bins.append([i])
                used.append(lengths[i])
        return bins
    out: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i, n in enumerate(lengths):
        w = max(width, n)
        if cur and (w * (len(cur) + 1) > budget or (max_rows and len(cur) >= max_rows)):
            out.append(cur)
            cur, w = [], n
        cur.append(i)
        width = w
    if cur:
        out.append(cur)
    return out


def use_per_sample_sdpa(model: torch.nn.Module) -> None:
    """Run ``model``'s attention as ``per_sample_sdpa``, registered with transformers'
    ``AttentionInterface`` under ``PER_SAMPLE_SDPA``."""
    from transformers import AttentionInterface

    AttentionInterface.register(PER_SAMPLE_SDPA, per_sample_sdpa)
    model.set_attn_implementation(PER_SAMPLE_SDPA)
