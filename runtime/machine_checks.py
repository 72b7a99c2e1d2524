"""The checks of a ``train`` configuration that only this machine can answer, in one place.

``train`` and ``train --check`` call one entry, ``check_all``, once, before any engine starts;
each check refuses with one line naming the setting (``InputError``): the trainer device
(``resolve_device``), its precision (``check_precision``), the ranks it can give
(``check_world_size``), vLLM's engine arguments read from the installed vLLM's source
(``engine_arg_names``, ``check_engine_args``; on the CPU build also
``runtime.rollout.vllm_engine.check_cpu_engine_args``), a local Ray cluster's size
(``runtime.ray_backend.preflight.check_local``), the checkpoint a new run starts from, the
model directory and its tokenizer, and the prompts as the run renders them against the model's
and the micro-batch's budgets (``check_lengths``, ``check_token_budget``). Torch, vLLM and the
tokenizer are imported inside the checks that need them: validating a config imports none.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config.schema import check_token_budget  # noqa: F401  (a check of the config's own values; here as before)
from .inputs import InputError

if TYPE_CHECKING:
    from .config.schema import TrainConfig
    from .tasks.base import Prompt

# Files a Hugging Face tokenizer is loaded from (fast, sentencepiece, or BPE vocabularies).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json",
                   "vocab.txt")


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


def check_lengths(model_path: Path | None, prompts: Sequence[Prompt], max_tokens: int,
                  max_model_len: int, tokenizer: Any = None) -> None:
    """Refuse, before the engine starts, a prompt too long for ``max_model_len`` with
    ``max_tokens`` of answer: the engine would reject each of its requests, forever.
    ``tokenizer``: use this one instead of loading ``model_path``'s."""
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    tok = tokenizer
    longest = max(prompts, key=lambda p: len(tok.encode(p.text)))
    n = len(tok.encode(longest.text))
    if n + max_tokens > max_model_len:
        raise InputError(f"prompt {longest.index} is {n} tokens; with rollout.max_tokens "
                         f"{max_tokens} it exceeds rollout.max_model_len {max_model_len}")


# ------------------------------------------------------------ the one entry: check_all ------

def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def check_all(cfg: TrainConfig, prompts: Sequence[Prompt], checkpoint: Path | None = None,
              warn: Callable[[str], None] = _to_stderr) -> Path | None:
    """Everything of a ``train`` run that only this machine can answer, loaded and checked
    now, before any engine starts; ``train`` and ``train --check`` call it once. In order: the
    settings against this machine (``check_settings``: device, precision, world size, engine
    arguments, a local Ray cluster); the checkpoint ``--resume`` starts a new run from
    (``checkpoint``: complete files, every shard its layout names); the model (the embedded
    tiny model's tokenizer, or ``model.path``'s config, weights and tokenizer) and the
    checkpoint's model against it; the prompts as the run renders them (``check_prompts``);
    the tiny model's cache. Returns the model directory (None: the embedded tiny model).
    Raises ``InputError`` naming the setting (the first problem found); ``warn`` is told what
    is no error (a damaged tiny-model cache, which the run rebuilds)."""
    from .prompts import render_prompts
    from .recovery.rundir import check_checkpoint

    check_settings(cfg)
    if checkpoint is not None:  # complete files, every shard the sharded layout names
        check_checkpoint(checkpoint, "--resume")
    model_path, tokenizer, where = _load_model(cfg, checkpoint)
    prompts = render_prompts(prompts, tokenizer, cfg.data.chat_template, where)
    check_prompts(cfg, prompts, tokenizer, where)
    if model_path is None:
        _check_tiny_cache(cfg, warn)
    return model_path


def check_settings(cfg: TrainConfig) -> None:
    """The settings against this machine: the trainer device, its precision and ranks
    (``run.backend`` local; on Ray the cluster's resources are checked), vLLM's engine
    arguments (and what the CPU build cannot run), a local Ray cluster's size. ``InputError``
    naming the setting."""
    try:
        device = resolve_device(cfg.trainer.device)
        check_precision(cfg.trainer.precision, device.split(":")[0])
        if cfg.run.backend == "local":  # on Ray: the cluster's resources (preflight)
            check_world_size(cfg.trainer.world_size, device)
        if cfg.rollout.backend == "vllm":
            check_engine_args(cfg.rollout.engine_args)
        if cfg.run.backend == "ray" and cfg.ray.address is None:
            from .ray_backend.preflight import check_local

            check_local(cfg)
    except ValueError as exc:  # each names the setting
        raise InputError(str(exc)) from None
    if cfg.rollout.backend == "vllm":
        from .rollout.env import cpu_build

        if cpu_build():
            from .rollout.vllm_engine import check_cpu_engine_args

            check_cpu_engine_args(cfg.rollout.engine_args)


def _load_model(cfg: TrainConfig, checkpoint: Path | None) -> tuple[Path | None, Any, str]:
    """(the model directory or None for the tiny model, its tokenizer, how messages name it),
    the model directory's config, weights and tokenizer checked, and the checkpoint's model
    against it. ``InputError`` naming ``model.path``."""
    from . import inputs
    from .recovery.rundir import check_checkpoint_model

    if cfg.model.path is None:  # the tiny model's tokenizer is built, not loaded
        from .models.tiny import build_tokenizer

        tokenizer = build_tokenizer(chat=cfg.model.tiny.chat)
        if checkpoint is not None:
            t = cfg.model.tiny
            check_checkpoint_model(checkpoint, {
                "model_type": "qwen2", "vocab_size": len(tokenizer),
                "hidden_size": t.hidden_size, "intermediate_size": 4 * t.hidden_size,
                "num_hidden_layers": t.layers, "num_attention_heads": t.heads,
                "num_key_value_heads": t.heads}, "the tiny model (model.tiny)", "--resume")
        return None, tokenizer, "the tiny model"
    model_path = Path(cfg.model.path)
    where = f"model.path {cfg.model.path}"
    if not (model_path / "config.json").is_file():
        raise InputError(f"{where}: not a local Hugging Face model directory (no config.json)")
    try:
        config = inputs.json_file(model_path / "config.json", "model.path")
    except inputs.FileInputError as exc:
        raise InputError(f"{where}: config.json is not readable JSON ({exc.reason})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise InputError(f"{where}: config.json has no model_type, so no library can load it")
    inputs.model_weights(model_path, "model.path")
    if checkpoint is not None:
        check_checkpoint_model(checkpoint, config, where, "--resume")
    # transformers "loads" a directory without tokenizer files as an empty tokenizer (one
    # token, every text encodes to nothing): look for the files first
    if not any((model_path / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(f"{where}: cannot load its tokenizer (none of "
                         f"{', '.join(TOKENIZER_FILES)} is there)")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    except Exception as exc:  # transformers raises many types for a broken tokenizer
        detail = " ".join(str(exc).split())[:300]
        raise InputError(f"{where}: cannot load its tokenizer ({type(exc).__name__}: "
                         f"{detail})") from None
    return model_path, tokenizer, where


def check_prompts(cfg: TrainConfig, prompts: Sequence[Prompt], tokenizer: Any,
                  where: str) -> None:
    """The prompts, as the run renders them, against the model (``where`` names it): each
    encodes to tokens (``check_encodes``), the longest fits ``rollout.max_model_len`` with
    ``rollout.max_tokens`` of answer (``check_lengths``) and one micro-batch
    (``check_token_budget``). ``InputError`` naming the prompts or the setting."""
    check_encodes(cfg, prompts, tokenizer, where)
    check_lengths(None, prompts, cfg.rollout.max_tokens, cfg.rollout.max_model_len,
                  tokenizer=tokenizer)
    longest = max(len(tokenizer.encode(p.text)) for p in prompts)
    try:
        check_token_budget(cfg.trainer.max_tokens_per_micro_batch, longest,
                           cfg.rollout.max_tokens)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def check_encodes(cfg: TrainConfig, prompts: Sequence[Prompt], tokenizer: Any,
                  where: str) -> None:
    """Every prompt, as the run renders it, encodes to tokens with the model's tokenizer, and
    with ``rollout.backend=fake`` with the fake engine's own tokenizer (digits, ``+`` and
    ``=``: before, another character passed ``--check`` and the run stopped with exit 70,
    ``ValueError: substring not found``). ``InputError`` naming the prompts."""
    empty = [p.index for p in prompts if not tokenizer.encode(p.text)][:3]
    if empty:
        raise InputError(f"{where}: its tokenizer encodes prompt(s) {empty} to no tokens")
    if cfg.rollout.backend == "fake":
        from .rollout.fake import CharTokenizer

        alphabet = set(CharTokenizer._chars)
        bad = [(p.index, ch) for p in prompts
               for ch in [next((c for c in p.text if c not in alphabet), None)] if ch][:3]
        if bad:
            shown = ", ".join(f"{i} ({ch!r})" for i, ch in bad)
            raise InputError(f"rollout.backend=fake: its engine reads only the characters "
                             f"{CharTokenizer._chars!r} (the arithmetic task's), and prompt(s) "
                             f"{shown} hold others (as the run renders them, a chat template "
                             f"included): use rollout.backend=vllm for this model and data")
        if not all(p.text for p in prompts):
            raise InputError("rollout.backend=fake: a prompt renders to no characters")


def _check_tiny_cache(cfg: TrainConfig, warn: Callable[[str], None]) -> None:
    """The tiny model's cache directory: a cached model that cannot load is rebuilt at the
    run's start (``ensure_tiny_model``; ``warn`` says so), and where the model must be built
    the cache must be writable (``InputError`` naming it and the variables that move it;
    before: the run failed at its start with a traceback). Creates nothing (a probe is
    removed)."""
    from .models.tiny import cache_damage, tiny_model_dir
    from .recovery.rundir import RunDirError, check_output_dir

    target = tiny_model_dir(cfg.tiny_spec())
    if (target / "model.safetensors").exists():
        damaged = cache_damage(target)
        if damaged is None:
            return
        warn(f"the cached tiny model in {target} is damaged ({damaged}); the run rebuilds it")
    try:
        check_output_dir(target.parent)
    except RunDirError as exc:
        why = str(exc).partition(": ")[2] or str(exc)
        raise InputError(f"the tiny model's cache {target.parent}: {why}; the tiny model is "
                         f"built there on first use: set RESERVE_OCCUPY_CACHE (or "
                         f"XDG_CACHE_HOME) to a writable directory") from None
