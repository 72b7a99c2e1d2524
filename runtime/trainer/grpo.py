"""GRPO in torch: group-normalised advantages and a clipped importance ratio against the
engine's behaviour log-probabilities.

Loss, per response token t of sample i in group g (token-mean over the whole batch):

    A_i     = (r_i - mean_g r) / (std_g r + 1e-6)        (without the division if not scale_rewards)
    rho_t   = exp(log pi_theta(t) - log mu(t))          mu: what the engine sampled t with
    L       = -min(rho_t A_i, clip(rho_t, 1 - clip_low, 1 + clip_high) A_i)
              + kl_coef * k3(pi_theta || pi_ref)         (optional; pi_ref = the initial weights)

``pi_theta`` is the trainer's current weights, version ``batch.version``; ``mu`` is whatever
version generated token t (older by up to eta, or several versions within one partial-rollout
sample). The ratio therefore corrects bounded staleness token by token: tokens that became
unlikely under the current weights get their gradient clipped instead of trusted. Fresh tokens
(version == batch.version) have rho = 1 up to float noise; ``onpolicy_logprob_err`` reports
that noise, a cheap end-to-end check that engine and trainer compute the same distribution.

Off-policy corrections (``trainer.correction``, off by default): truncated or masked importance
weights, token or sequence level, and the decoupled objective against a proximal policy; their
formulas are in ``runtime.trainer.corrections``. Kind ``none`` keeps the lines above unchanged.

Memory and schedule (``trainer.precision``, ``gradient_checkpointing``, ``warmup_steps``,
``lr_schedule``): ``bf16-mixed`` keeps float32 weights and optimizer state and runs the forward
pass under bfloat16 autocast (activations halve; the update is float32); ``bf16`` holds the
weights, gradients and AdamW state in bfloat16 as well (about half the memory of float32, at
the cost of updates smaller than bfloat16's resolution being rounded away). The learning rate
follows ``lr_at``, a pure function of the steps trained, so a resumed run continues the same
schedule from the step count its checkpoint records.

Checkpoints and exported weights are Hugging Face model directories (``save_pretrained``:
``config.json``, ``model.safetensors``, and in checkpoints the tokenizer), so
``AutoModelForCausalLM.from_pretrained`` and vLLM load them as they are
(``runtime.trainer.checkpoint_io``, ``CheckpointIO``: the methods that write and read them).

Micro-batches (``trainer.packing``, ``max_tokens_per_micro_batch``): with packing, a
micro-batch is one row of several samples' prompt + response tokens, ``position_ids`` restarting
at 0 for each sample and attention kept within each sample, so no padding is computed (the
samples are assigned to micro-batches first-fit-decreasing by tokens); without, it is one padded
row per sample. Either way a micro-batch holds at most ``max_tokens_per_micro_batch`` tokens, and
the loss is the token mean over the whole minibatch's response tokens, however it is split.
How attention is kept within a sample depends on the model's attention implementation
(``packed_attention``): under ``sdpa`` the trainer runs the model with ``per_sample_sdpa``
(transformers' sdpa on each sample's slice of the row: attention work is the samples' squares,
where a block-diagonal mask over the row would cost the row's square); under ``eager`` a
block-diagonal causal 4D mask; under the others (``flash_attention_2``/``_3``'s
variable-length path, ``flex_attention``) ``position_ids`` alone, which transformers turns
into per-sample attention only when the forward has no KV cache, hence ``use_cache=False``.
The plan and the attention function are in ``runtime.trainer.packing``.

Torch work runs in a worker thread (``asyncio.to_thread``) so generation continues meanwhile.

A non-finite step never reaches the optimizer (``NonFiniteStep``): each micro-batch's per-sample
losses are checked as they are computed (the units whose loss is NaN or infinite are kept) and
the gradient's total norm before ``opt.step`` (``_refuse_non_finite``). A NaN or an infinity in
any loss or gradient raises, with the gradient cleared and the weights as they were before the
optimizer step, so the driver publishes and saves nothing of it. A batch of several optimizer
steps (``minibatches`` or ``epochs`` > 1) is one step for this: a later minibatch refused puts
the weights and the optimizer state back as they were before the batch (``_BatchSnapshot``),
and the error names the minibatch. Any other exception partway through a batch forgets the
gradient and the units noted for its step likewise (``_forget_step``; a streamed chunk's, or
one in the streamed batch's final step, drops the step pending). An exception inside the
optimizer's own ``step`` (out of memory, say) in a batch of one step may leave that step half
applied: nothing is copied for a batch of one step, and the driver fails the run on it and
saves nothing of it. The sharded trainer's ranks
run this code on their shares; their norm (``clip_grad_norm_`` over DTensor gradients) is the
global one, and they share the units they found (``RankTrainer._optimizer_step``), so a NaN in
one rank's share stops the step on every rank alike, with the same message.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .base import GroupSample, NonFiniteStep, TrainBatch
from .checkpoint_io import (  # noqa: F401  (the checkpoint names re-exported: they lived here)
    CHECKPOINT_FILES,
    _ONE_SHARD,
    CheckpointIO,
    check_keys,
    tied_keys,
    torch_save,
)
from .corrections import corrected_loss, loglinear_prox
from .packing import (  # noqa: F401  (the packing names re-exported: they lived here)
    PER_SAMPLE_SDPA,
    TokenBudgetError,
    packed_attention,
    per_sample_sdpa,
    plan_micro_batches,
    use_per_sample_sdpa,
)

if TYPE_CHECKING:  # the type of the trainer section; the trainer reads its fields
    from ..config.schema import TrainerConfig


def lr_at(step: int, total: int | None, warmup: int = 0, schedule: str = "constant",
          min_ratio: float = 0.0) -> float:
    """The learning-rate factor (of ``trainer.lr``) for the batch after ``step`` trained ones:
    linear warm-up over the first ``warmup`` batches, then ``constant``, ``linear`` or
    ``cosine`` decay to ``min_ratio`` at batch ``total`` (the run's steps). Written out rather
    than taken from a torch scheduler object because a function of the step count alone needs
    no state of its own in a checkpoint to resume exactly."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or not total or total <= warmup:
        return 1.0
    done = min(1.0, (step - warmup) / (total - warmup))
    if schedule == "linear":
        return 1.0 - (1.0 - min_ratio) * done
    if schedule == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * done))
    raise ValueError(f"trainer.lr_schedule {schedule!r}: expected constant, linear or cosine")


class _BatchSnapshot:
    """The weights and the optimizer state before a batch that takes several optimizer steps
    (``trainer.minibatches`` or ``epochs`` > 1), put back bit for bit (``restore``) when a
    later step of it is refused (``NonFiniteStep``) or fails: the batch is applied whole or
    not at all, as a batch of one step is (refused before ``opt.step``).

    Why a copy: the steps cannot be deferred until every minibatch is checked, because each
    minibatch's gradient is taken at the weights the previous step left (PPO-style); and an
    AdamW step cannot be undone exactly in floating point. The copy is taken only for a batch
    of several steps, on the device where the tensors live (a copy to the host would cost a
    transfer each batch): the parameters, the optimizer's per-parameter state (AdamW: its two
    moments and step count; 3x the parameters' bytes in all while the batch trains) and the
    param groups' settings (the learning rate the steps set). A memory copy, small beside the
    minibatches' forward and backward passes. It works on the sharded trainer's DTensors as
    on plain tensors (clone and ``copy_`` stay on each rank's shard)."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        with torch.no_grad():
            self.params = [(p, p.detach().clone()) for p in model.parameters()]
            self.state = {p: {k: v.detach().clone() if torch.is_tensor(v) else copy.deepcopy(v)
                              for k, v in st.items()} for p, st in opt.state.items()}
        self.groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                       for g in opt.param_groups]
        self.opt = opt

    def restore(self) -> None:
        with torch.no_grad():
            for p, saved in self.params:
                p.copy_(saved)
        self.opt.state.clear()  # a parameter without state before (the first batch): none
        self.opt.state.update(self.state)
        for g, saved in zip(self.opt.param_groups, self.groups):
            g.update(saved)


class GRPOTrainer(CheckpointIO):
    def __init__(self, model_path: str | Path, settings: TrainerConfig, out_dir: str | Path,
                 temperature: float = 1.0, seed: int = 0, keep_weights: int = 2,
                 total_steps: int | None = None, max_sample_tokens: int | None = None) -> None:
        """``settings``: the config's ``trainer`` section (``runtime.config.TrainerConfig``),
        read under its own names (lr, betas, weight_decay, clip_low, clip_high, kl_coef,
        max_grad_norm, scale_rewards, epochs, minibatches, micro_batch, packing,
        max_tokens_per_micro_batch, device, threads, precision, gradient_checkpointing,
        warmup_steps, lr_schedule, min_lr_ratio, correction). ``total_steps``: the
        run's steps, where the schedule ends. ``max_sample_tokens``: the longest sample (prompt
        + response) the run can produce, if known: a token budget below it raises
        ``TokenBudgetError`` here, before the model loads."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ..machine_checks import check_precision, resolve_device

        self.packing = settings.packing
        self.token_budget = settings.max_tokens_per_micro_batch
        if max_sample_tokens is not None and self.token_budget < max_sample_tokens:
            raise TokenBudgetError(self._budget_message(max_sample_tokens))
        self.s = settings
        self.device = torch.device(resolve_device(settings.device))  # "auto" -> cuda or cpu
        self.precision = settings.precision
        check_precision(self.precision, self.device.type)
        if self.device.type == "cpu":
            # The rollout engine owns the other core(s); more threads only contend.
            torch.set_num_threads(settings.threads or 1)
        torch.manual_seed(seed)
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype)
        self.model.to(self.device).train()
        if self.packing and packed_attention(self.model.config._attn_implementation) \
                == "per-sample":
            use_per_sample_sdpa(self.model)
        if settings.gradient_checkpointing:
            # Non-reentrant: works with inputs that need no grad and with autocast.
            self.model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        # Saved with every checkpoint so that the directory is a complete model for other tools
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.total_steps = total_steps
        self.ref = None
        if settings.kl_coef > 0:
            self.ref = copy.deepcopy(self.model).eval().requires_grad_(False)
        self._wrap_model()  # a hook: the sharded trainer shards here, before the optimizer
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=settings.lr,
                                     betas=tuple(settings.betas),
                                     weight_decay=settings.weight_decay)
        self.temperature = temperature
        pad = self.model.config.pad_token_id
        self.pad_id = 0 if pad is None else int(pad)
        self.out_dir = Path(out_dir)
        self.keep_weights = keep_weights
        self.steps = 0
        self._pending: dict[str, Any] | None = None  # streamed chunks of the step being built
        self._grad_units: list[Any] = []  # units whose gradient the next optimizer step applies
        self._non_finite: list[Any] = []  # ... of them, those whose loss was NaN or infinite
        # An off-policy correction of the loss (runtime.trainer.corrections), None for the
        # plain objective (trainer.correction.kind none, the default)
        corr = settings.correction
        self.correction = corr if corr.kind != "none" else None
        self._step_frac = 0.0  # the batch's optimiser steps taken / all of them (loglinear)
        self._where = ""  # the batch's optimiser step being taken, where it takes several

    # ------------------------------------------------------------------ log-probabilities ----

    def _budget_message(self, longest: int) -> str:
        return (f"trainer.max_tokens_per_micro_batch {self.token_budget} is below the longest "
                f"sample, {longest} tokens (prompt + response): raise it to at least {longest}")

    def _check_budget(self, rows: list[tuple]) -> None:
        """``TokenBudgetError`` (before any work) if a row's prompt + response exceeds the
        micro-batch token budget."""
        longest = max((len(r[0]) + len(r[1]) for r in rows), default=0)
        if longest > self.token_budget:
            raise TokenBudgetError(self._budget_message(longest))

    def _micro_batches(self, prompts: list[list[int]], responses: list[list[int]]
                       ) -> list[list[int]]:
        """``plan_micro_batches`` for these samples under this trainer's settings."""
        lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
        return plan_micro_batches(lengths, self.token_budget, self.packing,
                                  None if self.packing else self.s.micro_batch)

    def _pad(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _packed_inputs(self, model: torch.nn.Module, seqs: list[list[int]]
                       ) -> dict[str, Any]:
        """One row of ``seqs`` concatenated: ``input_ids``, ``position_ids`` restarting at 0
        per sample, and what the model's attention implementation needs to keep each token's
        attention within its own sample (``packed_attention``): the samples' spans, or a
        block-diagonal causal mask, or nothing more."""
        ids = torch.tensor([t for q in seqs for t in q], dtype=torch.long)
        pos = torch.cat([torch.arange(len(q)) for q in seqs])
        out: dict[str, Any] = {"input_ids": ids[None].to(self.device),
                               "position_ids": pos[None].to(self.device)}
        how = packed_attention(getattr(model.config, "_attn_implementation", None))
        ends = torch.tensor([len(q) for q in seqs]).cumsum(0).tolist()
        if how == "per-sample":
            out["packed_segments"] = tuple(zip([0, *ends[:-1]], ends))
        elif how == "mask":
            seg = torch.repeat_interleave(torch.arange(len(seqs)),
                                          torch.tensor([len(q) for q in seqs]))
            n = len(seg)
            keep = (seg[:, None] == seg[None, :]) & torch.ones(n, n, dtype=torch.bool).tril()
            dtype = next(model.parameters()).dtype
            mask = torch.zeros(n, n, dtype=dtype).masked_fill_(~keep, torch.finfo(dtype).min)
            out["attention_mask"] = mask[None, None].to(self.device)
        return out

    def _logprobs(self, model: torch.nn.Module, prompts: list[list[int]],
                  responses: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probabilities of each response given its prompt, as a padded
        [n, max_response] tensor with its 0/1 mask: one forward pass over all of them, packed
        into one row (``trainer.packing``) or one padded row each. Only the logits that predict
        a response token go through the softmax (packed: only they leave the model, through
        ``logits_to_keep``), as one [response tokens, vocabulary] tensor."""
        seqs = [p + r for p, r in zip(prompts, responses)]
        n, width = len(seqs), max(1, max(map(len, responses)))
        # for each response token: the row and position of the logits that predict it, and
        # where its log-probability goes in the [n, width] result
        row: list[int] = []
        at: list[int] = []
        dest_i: list[int] = []
        dest_t: list[int] = []
        offset = 0
        for i, (p, r) in enumerate(zip(prompts, responses)):
            start = offset + len(p) - 1
            row += [0 if self.packing else i] * len(r)
            at += range(start, start + len(r))
            dest_i += [i] * len(r)
            dest_t += range(len(r))
            if self.packing:
                offset += len(p) + len(r)
        dev = self.device
        target = torch.tensor([t for r in responses for t in r], dtype=torch.long, device=dev)
        if self.packing:
            inputs = self._packed_inputs(model, seqs)
            inputs["logits_to_keep"] = torch.tensor(at, dtype=torch.long, device=dev)
            with self._autocast():
                picked = model(**inputs, use_cache=False).logits[0]
        else:
            ids, mask = self._pad(seqs)
            with self._autocast():
                logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            picked = logits[torch.tensor(row, dtype=torch.long, device=dev),
                            torch.tensor(at, dtype=torch.long, device=dev)]
        logp = torch.log_softmax(picked.float() / self.temperature, dim=-1)
        logp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        where = (torch.tensor(dest_i, dtype=torch.long, device=dev),
                 torch.tensor(dest_t, dtype=torch.long, device=dev))
        out = torch.zeros((n, width), device=dev).index_put(where, logp)
        rmask = torch.zeros((n, width), device=dev).index_put(where, torch.ones_like(logp))
        return out, rmask

    @torch.no_grad()
    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """The current weights' log-probabilities of each response token (for checks), in
        the micro-batches training would use."""
        out: list[list[float]] = [[] for _ in responses]
        for part in self._micro_batches(prompts, responses):
            lp, _ = self._logprobs(self.model, [prompts[i] for i in part],
                                   [responses[i] for i in part])
            for k, i in enumerate(part):
                out[i] = lp[k, :len(responses[i])].tolist()
        return out

    # ------------------------------------------------------------------ the update ------------

    @staticmethod
    def advantages(rewards: list[float], scale: bool = True) -> list[float]:
        r = torch.tensor(rewards, dtype=torch.float64)
        adv = r - r.mean()
        if scale:
            adv = adv / (r.std(unbiased=False) + 1e-6)
        return adv.tolist()

    def _train(self, batch: TrainBatch) -> dict[str, float]:
        s = self.s
        rows = self._rows(batch.groups)
        if not rows:
            raise ValueError(f"batch {batch.version} has no response tokens to train on")
        self._check_budget(rows)
        n_once = sum(len(r[1]) for r in rows)
        stale = sum(v < batch.version for r in rows for v in r[3])
        gaps = [batch.version - v for r in rows for v in r[3]]
        self.model.train()
        if self._recomputes():
            rows = self._with_prox(rows)
        sums: dict[str, float] = {}
        grad_norms = []
        # ``epochs`` passes over the batch, each split into ``minibatches`` optimiser steps
        # (PPO-style). Only the first step is on-policy for fresh tokens; later ones lean on
        # the clipped ratio, which is what it is for.
        order = list(range(len(rows)))
        rng = torch.Generator().manual_seed(self.steps)
        per_epoch = min(s.minibatches, len(rows))
        n_steps = s.epochs * per_epoch
        # several optimizer steps: the batch is one step all the same (``_BatchSnapshot``)
        snapshot = _BatchSnapshot(self.model, self.opt) if n_steps > 1 else None
        try:
            for epoch in range(s.epochs):
                if epoch:
                    order = torch.randperm(len(rows), generator=rng).tolist()
                parts = [order[i::s.minibatches] for i in range(s.minibatches)]
                for k, part in enumerate(p for p in parts if p):
                    first = epoch == 0 and k == 0
                    self._step_frac = len(grad_norms) / n_steps
                    self._where = "".join(
                        ([f", epoch {epoch + 1} of {s.epochs}"] if s.epochs > 1 else [])
                        + ([f", minibatch {k + 1} of {per_epoch}"] if per_epoch > 1 else []))
                    self._minibatch([rows[i] for i in part], batch.version, sums, first)
                    grad_norms.append(self._optimizer_step())
        except BaseException:
            # Whatever stopped the batch (NonFiniteStep, or any other exception partway),
            # nothing of it stays: the weights and optimizer state of a batch of several
            # steps, and for every batch the gradient its micro-batches accumulated and the
            # units they noted for the next step (else the next batch would step with them).
            if snapshot is not None:
                snapshot.restore()
            self._forget_step()
            raise
        finally:
            self._step_frac, self._where = 0.0, ""
        self.steps += 1
        n = sums["tokens"]
        out = {
            "loss": sums["loss"] / n, "clip_frac": sums["clipped"] / n,
            "ratio_mean": sums["ratio"] / n, "ratio_max": sums["ratio_max"],
            "kl_behaviour": sums["kl_behaviour"] / n, "grad_norm": max(grad_norms),
            "stale_token_frac": stale / n_once, "tokens": float(n_once),
            "onpolicy_logprob_err": (sums["onpolicy_err"] / sums["onpolicy_n"]
                                     if sums.get("onpolicy_n") else 0.0),
            "lr": self.opt.param_groups[0]["lr"],
            "version_gap_mean": sum(gaps) / n_once, "version_gap_max": float(max(gaps)),
        }
        if self.ref is not None:
            out["kl_ref"] = sums["kl_ref"] / n
        out.update(self._correction_metrics(sums, n))
        return out

    def _correction_metrics(self, sums: dict[str, float], n: float) -> dict[str, float]:
        """The correction's metrics of a step (none without one) from ``_minibatch``'s sums
        over ``n`` token passes: the behaviour ratio's mean and max before correction, the
        weights' mean, the effective sample size ``(sum w)^2 / sum w^2 / n`` (1: all weights
        equal), the fractions of tokens whose weight was truncated or that were dropped."""
        if self.correction is None:
            return {}
        w, w2 = sums.get("corr_weight", 0.0), sums.get("corr_weight_sq", 0.0)
        return {"corr_ratio_mean": sums.get("corr_ratio", 0.0) / n,
                "corr_ratio_max": sums.get("corr_ratio_max", 0.0),
                "corr_weight_mean": w / n,
                "corr_ess": (w * w / w2 / n) if w2 > 0 else 0.0,
                "corr_truncated_frac": sums.get("corr_truncated", 0.0) / n,
                "corr_masked_frac": sums.get("corr_masked", 0.0) / n}

    def _recomputes(self) -> bool:
        """Whether the loss needs the recomputed proximal log-probabilities (decoupled PPO,
        ``prox: recompute``)."""
        c = self.correction
        return c is not None and c.kind == "decoupled" and c.prox_method == "recompute"

    def _with_prox(self, rows: list[tuple]) -> list[tuple]:
        """``rows`` (``_rows``'s), each with its proximal log-probabilities appended: those
        of the current weights, a no-grad forward pass before any optimiser step of the batch
        (in the micro-batches training uses). The sharded trainer's ranks each score their
        share and exchange them (``RankTrainer._with_prox``)."""
        lps = self.score([r[0] for r in rows], [r[1] for r in rows])
        return [(*r[:6], lp) for r, lp in zip(rows, lps)]

    def _corrected(self, chunk: list[tuple], logp: torch.Tensor, old: torch.Tensor,
                   ver: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, version: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``corrected_loss`` for one micro-batch, with the proximal log-probabilities the
        decoupled objective takes: the rows' recomputed ones, or the log-linear ones."""
        c = self.correction
        prox = None
        if c.kind == "decoupled":
            if c.prox_method == "recompute":
                prox = torch.zeros_like(logp)
                for i, r in enumerate(chunk):
                    if len(r) > 6 and r[6]:
                        prox[i, :len(r[6])] = torch.tensor(r[6])
            else:
                prox = loglinear_prox(logp, old, ver, version, version + self._step_frac)
        return corrected_loss(logp, old, mask, adv, self.s.clip_low, self.s.clip_high, c, prox)

    def _rows(self, groups: Sequence[GroupSample]) -> list[tuple]:
        """(prompt, tokens, behaviour logprobs, versions, advantage) of every sample with a
        response; the advantages are each group's own (GRPO normalises within a group)."""
        rows = []
        for g in groups:
            for smp, adv in zip(g.samples, self.advantages(list(g.rewards), self.s.scale_rewards)):
                if smp.token_ids:
                    rows.append((list(g.prompt_ids), list(smp.token_ids), list(smp.logprobs),
                                 list(smp.versions), adv, g.unit_id))
        return rows

    def _minibatch(self, rows: list[tuple], version: int, sums: dict[str, float],
                   first: bool, n_tokens: float | None = None) -> None:
        """Accumulate the gradient of one optimiser step over ``rows`` (in micro-batches of at
        most ``max_tokens_per_micro_batch`` tokens), divided by ``n_tokens`` (default:
        the rows' response tokens, a token mean over all of them however they are split)."""
        s = self.s
        if n_tokens is None:
            n_tokens = float(sum(len(r[1]) for r in rows))

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + value

        plan = self._micro_batches([r[0] for r in rows], [r[1] for r in rows])
        for part in plan:
            chunk = [rows[i] for i in part]
            prompts, responses = [r[0] for r in chunk], [r[1] for r in chunk]
            logp, mask = self._logprobs(self.model, prompts, responses)
            old = torch.zeros_like(logp)
            ver = torch.zeros_like(logp)
            for i, r in enumerate(chunk):
                old[i, :len(r[2])] = torch.tensor(r[2])
                ver[i, :len(r[3])] = torch.tensor(r[3], dtype=torch.float32)
            adv = torch.tensor([r[4] for r in chunk], device=self.device).unsqueeze(1)
            if self.correction is None:  # the plain objective
                ratio = torch.exp(logp - old)
                clipped = torch.clamp(ratio, 1 - s.clip_low, 1 + s.clip_high)
                per_tok = -torch.minimum(ratio * adv, clipped * adv)
            else:
                per_tok, ratio, clipped, corr = self._corrected(chunk, logp, old, ver, mask,
                                                                adv, version)
                with torch.no_grad():
                    w = corr["weight"]
                    add("corr_ratio", float((corr["is_ratio"] * mask).sum()))
                    sums["corr_ratio_max"] = max(sums.get("corr_ratio_max", 0.0),
                                                 float((corr["is_ratio"] * mask).max()))
                    add("corr_weight", float((w * mask).sum()))
                    add("corr_weight_sq", float((w * w * mask).sum()))
                    add("corr_truncated", float((corr["truncated"] * mask).sum()))
                    add("corr_masked", float((corr["masked"] * mask).sum()))
            if self.ref is not None:
                with torch.no_grad():
                    ref_lp, _ = self._logprobs(self.ref, prompts, responses)
                k3 = torch.exp(ref_lp - logp) - (ref_lp - logp) - 1
                per_tok = per_tok + s.kl_coef * k3
                add("kl_ref", float((k3.detach() * mask).sum()))
            loss = (per_tok * mask).sum() / n_tokens
            self._note_losses(chunk, (per_tok.detach() * mask).sum(dim=1))
            loss.backward()
            with torch.no_grad():
                add("tokens", float(mask.sum()))
                add("loss", float((per_tok * mask).sum()))
                add("clipped", float(((ratio != clipped).float() * mask).sum()))
                add("ratio", float((ratio * mask).sum()))
                sums["ratio_max"] = max(sums.get("ratio_max", 0.0), float((ratio * mask).max()))
                add("kl_behaviour", float(((old - logp) * mask).sum()))
                if first:  # fresh tokens under the very weights that sampled them
                    fresh = mask * (ver == version).float()
                    add("onpolicy_err", float(((logp - old).abs() * fresh).sum()))
                    add("onpolicy_n", float(fresh.sum()))

    def _wrap_model(self) -> None:
        """A hook: change ``self.model`` before the optimizer is built over its parameters
        (``runtime.trainer.rank`` shards it with FSDP2). Nothing here."""

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def lr(self) -> float:
        """The learning rate of the next optimizer step (it is constant within a batch)."""
        s = self.s
        return s.lr * lr_at(self.steps, self.total_steps, s.warmup_steps, s.lr_schedule,
                            s.min_lr_ratio)

    def _note_losses(self, chunk: list[tuple], per_sample: torch.Tensor) -> None:
        """Keep the units of ``chunk`` (rows of ``_rows``) the next optimizer step applies,
        and those whose loss (``per_sample``, one per row) is NaN or infinite."""
        for r in chunk:
            if len(r) > 5 and r[5] not in self._grad_units:  # a rank's padding rows: no unit
                self._grad_units.append(r[5])
        finite = torch.isfinite(per_sample)
        if not bool(finite.all()):
            for r, ok in zip(chunk, finite.tolist()):
                if not ok and len(r) > 5 and r[5] not in self._non_finite:
                    self._non_finite.append(r[5])

    def _refuse_non_finite(self, norm: float) -> None:
        """Before ``opt.step``: raise ``NonFiniteStep`` (gradient cleared, streamed chunks
        dropped, the weights untouched) if a loss since the last step or the gradient's total
        norm ``norm`` is NaN or infinite. Forgets the step's units either way."""
        bad, units = self._non_finite, self._grad_units
        self._non_finite, self._grad_units = [], []
        if math.isfinite(norm) and not bad:
            return
        self.opt.zero_grad(set_to_none=True)
        self._pending = None
        what = (f"the loss of unit(s) {', '.join(map(str, bad))} is NaN or infinite"
                if bad else f"the gradient's norm is {norm} (units {', '.join(map(str, units))})")
        raise NonFiniteStep(f"step {self.steps + 1}{self._where}: {what}: the step stopped "
                            f"before the optimizer" + (", the weights and optimizer state as "
                            f"before the batch" if self._where else "")
                            + "; nothing of it is published or saved")

    def _optimizer_step(self) -> float:
        for group in self.opt.param_groups:
            group["lr"] = self.lr()
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.s.max_grad_norm is not None:
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.s.max_grad_norm))
        else:
            norm = float(torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in params)))
        self._refuse_non_finite(norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return norm

    async def train_step(self, batch: TrainBatch) -> dict[str, float]:
        return await asyncio.to_thread(self._train, batch)

    # ------------------------------------------------------------------ streaming -------------
    #
    # The same update as ``_train`` with one pass and one minibatch, computed chunk by chunk
    # while the batch still fills (``trainer.streaming``). A chunk is whole groups, so each
    # sample's advantage is known when its chunk arrives. The normaliser is not: the loss is a
    # token mean over the *whole* batch, and the batch's token count is known only once its
    # last unit is final (the unit count, B, is known in advance; the tokens are not). The
    # gradient is linear in the per-token sum, so each chunk back-propagates its unnormalised
    # sum, and ``_finish_step`` divides the accumulated gradient by the batch's token count
    # once, before clipping and the optimiser step: grad(sum / N) = grad(sum) / N, the
    # whole-batch gradient up to float rounding. Dividing each chunk by its own token count
    # instead would weigh a short chunk's tokens more than a long one's: a different update
    # (tests/runtime/test_grpo_streaming.py shows it fails the comparison).

    def _check_streamable(self) -> None:
        if self.s.epochs != 1 or self.s.minibatches != 1:
            raise ValueError(f"streaming trains one pass and one optimiser step per batch; "
                             f"trainer.epochs is {self.s.epochs} and trainer.minibatches is "
                             f"{self.s.minibatches} (both must be 1)")

    def _accumulate(self, chunk: TrainBatch) -> None:
        """Forward/backward over ``chunk`` (whole groups of the batch ``chunk.version``),
        adding to the pending gradient; no optimiser step. Raises ``ValueError`` (and changes
        nothing) for a chunk of another batch than the pending one or a unit already in it."""
        self._check_streamable()
        p = self._pending
        if p is not None and p["version"] != chunk.version:
            raise ValueError(f"chunk of batch {chunk.version} while batch {p['version']} is "
                             f"pending: finish or discard that step first")
        ids = [g.unit_id for g in chunk.groups]
        seen = set(p["units"]) if p is not None else set()
        dup = [u for u in ids if u in seen] or [u for u in ids if ids.count(u) > 1]
        if dup:
            raise ValueError(f"unit {dup[0]!r} is already accumulated for batch {chunk.version}")
        rows = self._rows(chunk.groups)
        self._check_budget(rows)
        if p is None:
            self.opt.zero_grad(set_to_none=True)
            p = self._pending = {"version": chunk.version, "units": [], "sums": {},
                                 "tokens": 0, "stale": 0, "chunks": 0, "gap": 0,
                                 "gap_max": 0}
        self.model.train()
        if rows:
            try:
                if self._recomputes():  # no optimiser step between the chunks: pi_old
                    rows = self._with_prox(rows)
                self._minibatch(rows, chunk.version, p["sums"], True, n_tokens=1.0)
            except BaseException:
                # The chunk's part of the summed gradient cannot be taken back out: the
                # step pending is dropped whole, and ``_finish_step`` trains the batch anew.
                self._discard()
                raise
        p["units"] += ids
        p["tokens"] += sum(len(r[1]) for r in rows)
        p["stale"] += sum(v < chunk.version for r in rows for v in r[3])
        gaps = [chunk.version - v for r in rows for v in r[3]]
        p["gap"] += sum(gaps)
        p["gap_max"] = max([p["gap_max"], *gaps])
        p["chunks"] += 1

    def _finish_step(self, batch: TrainBatch) -> dict[str, float]:
        """Accumulate the groups of ``batch`` not accumulated yet, then take the one optimiser
        step: the whole-batch update of ``_train`` (one pass, one minibatch). Groups handed
        to an earlier trainer process (a resumed run) are simply trained here. Raises
        ``ValueError`` (and changes nothing) if the pending chunks hold a unit the batch does
        not, or the batch has no response tokens."""
        self._check_streamable()
        p = self._pending
        units = {g.unit_id for g in batch.groups}
        if p is not None:
            if p["version"] != batch.version:
                raise ValueError(f"batch {batch.version} while chunks of batch {p['version']} "
                                 f"are pending")
            extra = [u for u in p["units"] if u not in units]
            if extra:
                raise ValueError(f"unit {extra[0]!r} was accumulated but is not in batch "
                                 f"{batch.version}")
        if not any(s.token_ids for g in batch.groups for s in g.samples):
            raise ValueError(f"batch {batch.version} has no response tokens to train on")
        done = set(p["units"]) if p is not None else set()
        rest = tuple(g for g in batch.groups if g.unit_id not in done)
        if rest or p is None:
            self._accumulate(TrainBatch(batch.version, rest))
        p = self._pending
        n = float(p["tokens"])  # the streamed batch's response tokens
        try:
            for param in self.model.parameters():
                if param.grad is not None:
                    param.grad.div_(n)
            grad_norm = self._optimizer_step()
        except BaseException:
            # The gradient is divided already: kept, a retry would divide it again and step
            # with it. The step pending is dropped whole; a retry trains the batch anew.
            self._discard()
            raise
        self._pending = None
        self.steps += 1
        sums = p["sums"]
        out = {
            "loss": sums["loss"] / n, "clip_frac": sums["clipped"] / n,
            "ratio_mean": sums["ratio"] / n, "ratio_max": sums["ratio_max"],
            "kl_behaviour": sums["kl_behaviour"] / n, "grad_norm": grad_norm,
            "stale_token_frac": p["stale"] / n, "tokens": float(n),
            "onpolicy_logprob_err": (sums["onpolicy_err"] / sums["onpolicy_n"]
                                     if sums.get("onpolicy_n") else 0.0),
            "chunks": float(p["chunks"]), "streamed_units": float(len(done)),
            "version_gap_mean": p["gap"] / n, "version_gap_max": float(p["gap_max"]),
        }
        if self.ref is not None:
            out["kl_ref"] = sums["kl_ref"] / n
        out.update(self._correction_metrics(sums, n))
        return out

    def _forget_step(self) -> None:
        """Forget the optimizer step being built: its gradient and the units noted for it
        (``_grad_units``, ``_non_finite``)."""
        self._grad_units, self._non_finite = [], []
        self.opt.zero_grad(set_to_none=True)

    def _discard(self) -> None:
        """Drop the pending chunks' gradient (nothing was stepped)."""
        self._pending = None
        self._forget_step()

    async def accumulate(self, chunk: TrainBatch) -> None:
        await asyncio.to_thread(self._accumulate, chunk)

    async def finish_step(self, batch: TrainBatch) -> dict[str, float]:
        return await asyncio.to_thread(self._finish_step, batch)
