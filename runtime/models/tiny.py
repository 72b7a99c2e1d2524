"""The embedded default model: a tiny Qwen2 causal LM with a character-level tokenizer, built
locally (nothing is downloaded) and cached on disk.

Why a supervised warm-up: a randomly initialised model almost never writes a correct sum, so
every GRPO group would score all zeros and carry no gradient. ``build`` therefore trains the
fresh model for ``warmup_steps`` steps of plain next-token prediction on addition problems from
its own seeded stream (the same distribution as the task, like the SFT stage before RL), and
stops while it is still often wrong. RL then has reward variance to learn from. The build is
deterministic for a given ``TinySpec`` and cached under a directory named by the spec's hash, so
the demo and the tests pay for it once per machine.

The architecture respects two vLLM-on-CPU constraints: head_dim >= 32 (16 is unsupported by the
CPU attention kernels), and ``vocab_size == len(tokenizer)`` so the engine cannot sample an id
that has no token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import atomic_io

SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]
CHARS = list("0123456789+-*=") + [" "]
# The chat variant (``TinySpec.chat``): role markers, printable ASCII and a newline, and a
# template in the usual shape (one turn per message, the assistant's opened by the generation
# prompt), so conversational data and the math reward's \boxed{} answers run end to end.
# transformers loads a qwen2 model's tokenizer as its byte-level BPE class whatever the file
# says, so this one is that shape too: one token per byte-level character (GPT-2's alphabet,
# where space is U+0120 and newline U+010A) and no merges, which tokenizes the same however
# the pieces are pre-split. The digits-only original needs neither.
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_CHARS = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a"]  # + space, newline
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
BUILD_VERSION = 1  # bump when the build procedure changes, to invalidate caches


@dataclass(frozen=True)
class TinySpec:
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4  # head_dim = hidden_size / heads = 32
    max_positions: int = 128
    seed: int = 0
    warmup_steps: int = 200
    warmup_batch: int = 64
    warmup_lr: float = 3e-3
    max_operand: int = 9
    chat: bool = False  # the chat tokenizer; warm-up answers are "\\boxed{sum}"

    def key(self) -> str:
        fields = dataclasses.asdict(self)
        if not self.chat:  # the models built before the chat variant keep their cache key
            del fields["chat"]
        blob = json.dumps({"v": BUILD_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_root() -> Path:
    """``$RESERVE_OCCUPY_CACHE``, else ``$XDG_CACHE_HOME/reserve-occupy``, else ~/.cache/..."""
    if os.environ.get("RESERVE_OCCUPY_CACHE"):
        return Path(os.environ["RESERVE_OCCUPY_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "reserve-occupy"


def build_tokenizer(chat: bool = False):
    """The character-level tokenizer; ``chat``: the variant with a chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if chat:
        vocab = {t: i for i, t in enumerate(SPECIAL + ROLE_TOKENS + CHAT_CHARS)}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(t, special=True) for t in ROLE_TOKENS])  # whole
    else:
        vocab = {t: i for i, t in enumerate(SPECIAL + CHARS)}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")  # one char
        tok.decoder = decoders.Fuse()  # join characters back without spaces
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>", unk_token="<unk>")
    if chat:
        out.chat_template = CHAT_TEMPLATE
    return out


def build_model(spec: TinySpec, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(spec.seed)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size,
        intermediate_size=4 * spec.hidden_size, num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
        max_position_embeddings=spec.max_positions, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return AutoModelForCausalLM.from_config(cfg).to(torch.float32)


def warm_up(model, tokenizer, spec: TinySpec,
            progress: Callable[[int, float], None] | None = None) -> float:
    """Supervised next-token training on ``prompt answer </s>``; the loss covers the answer and
    the end token only. Returns the last loss."""
    import torch

    from ..tasks.arithmetic import make_problems

    rng = random.Random(spec.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.warmup_lr, weight_decay=0.0)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    model.train()
    loss_value = float("nan")
    for step in range(spec.warmup_steps):
        rows = make_problems(spec.warmup_batch, rng.randrange(2**31), spec.max_operand)
        seqs, labels = [], []
        for r in rows:
            if spec.chat:
                p = tokenizer.encode(tokenizer.apply_chat_template(
                    [{"role": "user", "content": r["prompt"]}], tokenize=False,
                    add_generation_prompt=True))
                a = tokenizer.encode("\\boxed{" + r["answer"] + "}") + [eos]
            else:
                p = tokenizer.encode(r["prompt"])
                a = tokenizer.encode(r["answer"]) + [eos]
            seqs.append(p + a)
            labels.append([-100] * len(p) + a)
        width = max(map(len, seqs))
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
        lab = torch.tensor([s + [-100] * (width - len(s)) for s in labels])
        mask = (ids != pad).long()
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()
        if progress is not None:
            progress(step + 1, loss_value)
    model.eval()
    return loss_value


def tiny_model_dir(spec: TinySpec, root: Path | None = None) -> Path:
    """Where ``ensure_tiny_model`` caches the model of ``spec``."""
    return (root or cache_root()) / "models" / f"tiny-qwen2-{spec.key()}"


def cache_damage(target: Path) -> str | None:
    """Why the cached model directory ``target`` cannot load (a missing or unreadable
    config.json or tokenizer, weights that are truncated or missing), or None if it can.
    Reads only headers."""
    from .. import inputs

    try:
        config = inputs.json_file(target / "config.json", "the tiny model cache")
        if not isinstance(config, dict) or "model_type" not in config:
            return "config.json has no model_type"
        if not (target / "tokenizer.json").is_file():
            return "tokenizer.json is missing"
        inputs.model_weights(target, "the tiny model cache")
    except inputs.InputError as exc:
        return str(exc)
    return None


def ensure_tiny_model(spec: TinySpec | None = None, root: Path | None = None,
                      log: Callable[[str], None] | None = print) -> Path:
    """Path of the built model directory for ``spec``; builds and caches it on first use.

    The build writes into a temporary sibling directory and renames it into place, so an
    interrupted build never leaves a half-written model that later runs would trust.
    """
    spec = spec or TinySpec()
    target = tiny_model_dir(spec, root)
    if (target / "model.safetensors").exists():
        damaged = cache_damage(target)
        if damaged is None:
            return target
        # A cached model that cannot load (a truncated file, a file removed) is ours to
        # replace: rebuilt, never trusted (before: every later run failed loading it)
        if log:
            log(f"the cached tiny model in {target} is damaged ({damaged}): rebuilding it")
        doomed = atomic_io.temp_path(target)
        try:
            os.rename(target, doomed)
        except FileNotFoundError:
            pass  # another process moved it first
        shutil.rmtree(doomed, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if log:
        log(f"building the tiny model once ({spec.warmup_steps} warm-up steps) into {target}")
    tmp = atomic_io.temp_path(target)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        tokenizer = build_tokenizer(spec.chat)
        model = build_model(spec, tokenizer)
        loss = warm_up(model, tokenizer, spec)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "tiny_spec.json").write_text(json.dumps(
            {**dataclasses.asdict(spec), "warmup_final_loss": loss}, indent=2))
        atomic_io.settle(tmp)  # safetensors writes 0600: readable by whoever may read the cache
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if log:
        log(f"built the tiny model in {time.perf_counter() - t0:.1f} s")
    return target
