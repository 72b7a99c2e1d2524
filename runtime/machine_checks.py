"""The checks of a ``train`` configuration that only this machine can answer, in one place.

``train`` and ``train --check`` call them before any engine starts (``runtime.train``'s
preflight), each refusing with one line naming the setting: the trainer device
(``resolve_device``), its precision (``check_precision``), the ranks it can give
(``check_world_size``), vLLM's engine arguments read from the installed vLLM's source
(``engine_arg_names``, ``check_engine_args``), and the prompts' lengths against the model's and
the micro-batch's budgets (``check_lengths``, ``check_token_budget``). Torch, vLLM and the
tokenizer are imported inside the checks that need them: validating a config imports none.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .inputs import InputError

if TYPE_CHECKING:
    from .tasks.base import Prompt


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
