"""Off-policy corrections of the GRPO loss (``trainer.correction``; docs/runtime.md,
"Off-policy corrections"). All off by default: ``kind: none`` is the plain objective of
``runtime.trainer.grpo``, computed there by its own unchanged lines, not here.

Notation, per response token t of sample i (``sg``: detached, a constant for the gradient):

    mu_t       the behaviour log-probability's policy: what the engine sampled t with
    v_t        the weight version that generated t (recorded per token: a partial rollout's
               tokens may come from several versions)
    V          the batch's version: the trainer's weights at the step's start (pi_old)
    pi_theta   the weights of the forward pass (pi_old at the batch's first optimiser step;
               later minibatches or epochs of the batch have moved on)
    rho_t      = pi_theta(t) / mu(t), the PPO ratio of the plain objective (verl: "bypass"
               mode, the behaviour policy as PPO's old policy)
    ppo_t(x)   = min(x A_i, clip(x, 1 - clip_low, 1 + clip_high) A_i)

**Bypass corrections** keep the plain objective's ratio and its clip against the behaviour
policy, and scale each token's term by a detached factor c in [0, 1]:

    L_t = -c_t * ppo_t(rho_t)

The term's gradient, where it is not clipped, is ``rho_t A_i grad log pi_theta``: ``rho_t`` is
the token's importance weight (at the batch's first optimiser step ``pi_theta = pi_old``, so
it is the behaviour ratio pi_old / mu). A correction turns that weight into ``c_t rho_t``
(with several minibatches or epochs, c is taken from the forward's own rho, the current
pi_theta / mu, as verl's bypass weights are: no extra forward pass):

    tis       c_t = min(1, C / sg(rho_t))          weight min(rho_t, C): truncated at cap C
    seq_tis   c_i = min(1, C / R_i),  R_i = prod_t sg(rho_t) = exp(sum_t log rho_t)
              (the product over the sample's tokens, verl's sequence-level ratio): a sample
              whose ratio exceeds C has every token's term scaled by C / R_i
    mask      c_t = 1 if low <= sg(rho_t) <= high else 0     (icepop: the token is dropped)
    seq_mask  c_i = 1 if low <= G_i <= high else 0,  G_i = exp(mean_t log rho_t)
              (the geometric mean over the sample's tokens, as NeMo-RL's seq-mask-tis and
              verl's "geometric" rejection use: a product's band would depend on the length)

A dropped token still counts in the token mean's denominator (the batch's response tokens):
dropping it does not weigh the others more, and the normaliser stays what the streamed and
sharded trainers already divide by.

**Decoupled PPO** (AReaL's ``use_decoupled_loss``; Hilton et al. 2021, "Batch size-invariance
for policy optimization"): a proximal policy pi_prox per token, the PPO ratio taken against it
and the behaviour correction carried by a truncated weight:

    r_t = pi_theta(t) / sg(pi_prox(t)),   w_t = min(sg(pi_prox(t)) / mu(t), C)
    L_t = -w_t * ppo_t(r_t)

``prox: recompute``: log pi_prox is log pi_old, computed by a no-grad forward pass of the
weights before the batch's first optimiser step (``GRPOTrainer._with_prox``; in the sharded
trainer each rank scores its share of the rows and the ranks exchange them). ``prox:
loglinear`` (AReaL's ``prox_logp_method: loglinear``): no extra
pass; log pi_prox is interpolated between the behaviour and the forward's own log-probability
by version,

    log pi_prox = log mu + alpha_t (sg(log pi_theta) - log mu)
    alpha_t     = (V - v_t) / (v_theta - v_t), clamped to [0, 1]; 1 where v_theta = v_t

with v_prox = V (pi_old's version) and v_theta = V + j / S the forward's weights, j of the
batch's S = epochs x minibatches optimiser steps taken. AReaL labels the current policy
v_prox + 1 throughout; here the forward of the batch's first optimiser step has alpha = 1 and
is exact (its weights are pi_old), and only later minibatches or epochs interpolate.

The sources read for these formulas (learnt from, not copied): verl,
``volcengine/verl@0c42f85a:docs/algo/rollout_corr_math.md`` (token and sequence IS, rejection,
the bypass and decoupled modes); NeMo-RL,
``NVIDIA-NeMo/RL@3520fc0a:nemo_rl/algorithms/loss/loss_functions.py`` (tis, icepop, and
seq-mask-tis's band on the sequence's mean log-ratio); AReaL,
``inclusionAI/AReaL@432323c2:docs/algorithms/prox_approx.md`` (the log-linear proximal policy,
alpha = (v_prox - v_behave) / (v_theta - v_behave)).
"""

from __future__ import annotations

import math
from typing import Any

import torch

KINDS = ("none", "tis", "seq_tis", "mask", "seq_mask", "decoupled")
BYPASS = ("tis", "seq_tis", "mask", "seq_mask")


def loglinear_prox(logp: torch.Tensor, behav: torch.Tensor, versions: torch.Tensor,
                   version: int, v_theta: float) -> torch.Tensor:
    """The log-linear proximal log-probability (see the module's docstring), detached:
    ``behav + alpha * (logp - behav)`` with ``alpha = (version - v) / (v_theta - v)`` per
    token, clamped to [0, 1], and 1 where ``v_theta == v``."""
    gap = v_theta - versions
    alpha = torch.where(gap > 0, (version - versions) / gap.clamp(min=1e-12),
                        torch.ones_like(gap)).clamp(0.0, 1.0)
    # torch.lerp is exact at both ends (alpha 0: behav, 1: logp; it computes from the
    # nearer end), so the first step's proximal is the forward's own value, bit for bit
    return torch.lerp(behav, logp.detach(), alpha).detach()


def corrected_loss(logp: torch.Tensor, behav: torch.Tensor, mask: torch.Tensor,
                   adv: torch.Tensor, clip_low: float, clip_high: float, correction: Any,
                   prox: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The per-token loss of ``correction`` (a ``CorrectionConfig``, kind other than none):
    ``(per_tok, ratio, clipped, stats)``. ``logp``, ``behav``, ``mask``: [n, T] (mask 0/1);
    ``adv``: [n, 1]; ``prox``: [n, T] log pi_prox (decoupled only). ``ratio`` and ``clipped``
    are the PPO ratio and its clipped value (decoupled: against pi_prox), ``stats`` detached
    per-token tensors: ``is_ratio`` (the behaviour ratio before correction: bypass rho, decoupled
    pi_prox / mu), ``weight`` (the importance weight the term carries after correction:
    bypass c * rho, decoupled w), ``truncated`` and ``masked`` (0/1 per token); all
    0 outside ``mask``."""
    kind = correction.kind
    if kind == "decoupled":
        if prox is None:
            raise ValueError("the decoupled objective needs the proximal log-probabilities")
        ratio = torch.exp(logp - prox)
        log_b = (prox - behav).detach()
        log_cap = math.log(correction.cap_value)
        weight = torch.exp(log_b.clamp(max=log_cap))
        truncated = (log_b > log_cap).float()
        masked = torch.zeros_like(log_b)
        is_ratio = torch.exp(log_b)
        factor = weight
    elif kind in BYPASS:
        ratio = torch.exp(logp - behav)
        log_rho = (logp - behav).detach() * mask
        is_ratio = torch.exp(log_rho)
        truncated = torch.zeros_like(log_rho)
        masked = torch.zeros_like(log_rho)
        if kind == "tis":
            log_cap = math.log(correction.cap_value)
            factor = torch.exp((log_cap - log_rho).clamp(max=0.0))
            truncated = (log_rho > log_cap).float()
        elif kind == "seq_tis":
            log_cap = math.log(correction.cap_value)
            log_r = log_rho.sum(dim=1, keepdim=True)  # log of the product over the sample
            factor = torch.exp((log_cap - log_r).clamp(max=0.0)).expand_as(log_rho)
            truncated = (log_r > log_cap).float().expand_as(log_rho)
        else:
            low, high = correction.band
            if kind == "mask":
                log_x = log_rho
            else:  # seq_mask: the geometric mean over the sample's tokens
                n = mask.sum(dim=1, keepdim=True).clamp(min=1.0)
                log_x = (log_rho.sum(dim=1, keepdim=True) / n).expand_as(log_rho)
            keep = (log_x >= math.log(low)) & (log_x <= math.log(high))
            factor = keep.float()
            masked = 1.0 - factor
        weight = factor * is_ratio
    else:
        raise ValueError(f"trainer.correction.kind {kind!r}: expected one of {', '.join(KINDS)}")
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_tok = -factor * torch.minimum(ratio * adv, clipped * adv)
    stats = {"is_ratio": is_ratio.detach() * mask, "weight": weight.detach() * mask,
             "truncated": truncated.detach() * mask, "masked": masked.detach() * mask}
    return per_tok, ratio, clipped, stats
