"""CPU stand-ins for the two CUDA-only calls TRL's async GRPO trainer makes, for tests only.

``trl.experimental.async_grpo`` (trl 1.16.0) trains with "tree attention": samples that share a
prefix are packed into one row and every segment attends to the keys on its root-to-segment path.
The kernel it calls is FlashAttention-3's ``flash_attn_varlen_func``, fetched from the Hub by
``packing._flash_attn`` (CUDA only, and a download). ``flash_attn_varlen`` below computes the same
thing with plain torch: per segment, softmax attention of its queries over its gathered keys,
causal with FlashAttention's bottom-right alignment (the last query sees every key).

The trainer also asks ``torch.cuda.get_device_name`` for the device's peak FLOPs
(``get_peak_flops_per_device``, MFU metrics only); on a CPU-only torch that raises, so it answers
``None`` here, which TRL already handles as "peak unknown, MFU off".

Nothing here changes what the trainer decides: which samples it takes, drops or trains. The
integration itself (``reserve_occupy.integrations.trl``) contains no shim.
"""

from __future__ import annotations

import types

import torch


def flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                      softmax_scale=None, causal=True, window_size=(-1, -1), softcap=None, **_):
    """``flash_attn_varlen_func`` on CPU: q (Nq, H, D), k/v (Nk, Hkv, D) -> (Nq, H, D)."""
    if window_size != (-1, -1) or softcap:
        raise NotImplementedError("the CPU shim covers full causal attention only")
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:  # grouped-query attention: each KV head serves heads/kv_heads queries
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = torch.empty_like(q)
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for i in range(len(bounds_q) - 1):
        q0, q1, k0, k1 = bounds_q[i], bounds_q[i + 1], bounds_k[i], bounds_k[i + 1]
        qs, ks, vs = (x.transpose(0, 1) for x in (q[q0:q1], k[k0:k1], v[k0:k1]))  # (H, L, D)
        scores = (qs.float() @ ks.float().transpose(1, 2)) * scale
        if causal:
            lq, lk = q1 - q0, k1 - k0
            rows = torch.arange(lq).unsqueeze(1)
            cols = torch.arange(lk).unsqueeze(0)
            scores = scores.masked_fill(cols > rows + (lk - lq), float("-inf"))
        out[q0:q1] = (scores.softmax(-1) @ vs.float()).transpose(0, 1).to(q.dtype)
    return out


def install(monkeypatch) -> None:
    """Route TRL's tree-attention kernel and its CUDA device query to the CPU versions."""
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    kernel = types.SimpleNamespace(flash_attn_varlen_func=flash_attn_varlen)
    monkeypatch.setattr(packing, "_flash_attn", lambda: kernel)
    monkeypatch.setattr(async_grpo_trainer, "get_peak_flops_per_device", lambda *a, **k: None)
