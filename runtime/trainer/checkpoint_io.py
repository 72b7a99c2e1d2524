"""The GRPO trainer's weights on disk: exported versions and checkpoints.

Checkpoints and exported weights are Hugging Face model directories (``save_pretrained``:
``config.json``, ``model.safetensors``, and in checkpoints the tokenizer, ``optimizer.pt`` and
``trainer_state.json``), so ``AutoModelForCausalLM.from_pretrained`` and vLLM load them as they
are; each is written whole or not at all (``atomic_io.atomic_dir``). ``CheckpointIO`` holds
``GRPOTrainer``'s methods for them (``runtime.trainer.grpo``); the sharded trainer's ranks
override some (``runtime.trainer.rank``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from .. import atomic_io
from .dcp import SHARDED_DIR

# Safetensors has no file-size limit; one file per directory is what the engine's weight
# reload and the Ray backend's weight transfer read.
_ONE_SHARD = "100000GB"
CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "trainer_state.json")


def torch_save(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)``, a failed write raised as the ``OSError`` it is (torch says
    ``RuntimeError: ... unexpected pos ...`` for a full disk)."""
    with open(path, "wb") as f:
        stream = atomic_io.KeepWriteError(f)
        try:
            torch.save(obj, stream)
        except RuntimeError as exc:
            if stream.error is not None:
                raise stream.error from exc
            raise


def tied_keys(model: torch.nn.Module) -> set[str]:
    """The state-dict keys ``save_pretrained`` leaves out as tied to another weight."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return set()
    keys = getattr(model, "_tied_weights_keys", None) or ()
    return set(keys.keys() if isinstance(keys, dict) else keys)


def check_keys(model: torch.nn.Module, keys: Any, path: Path) -> None:
    """Raise ``ValueError`` naming the difference unless ``keys`` (a checkpoint's weights) are
    exactly ``model``'s, a tied weight allowed absent (``save_pretrained`` stores it once)."""
    expected = set(model.state_dict().keys())
    absent = sorted(k for k in expected - set(keys) if k not in tied_keys(model))
    unexpected = sorted(set(keys) - expected)
    if absent or unexpected:
        raise ValueError(f"{path}: checkpoint does not match the model (missing "
                         f"{absent[:3]}, unexpected {unexpected[:3]})")


class CheckpointIO:
    """``GRPOTrainer``'s weights, exports and checkpoints (a base class of it): these methods
    use its ``model``, ``opt``, ``tokenizer``, ``device``, ``precision``, ``steps``,
    ``out_dir`` and ``keep_weights``."""


    def _state_dict(self) -> dict[str, torch.Tensor]:
        """The weights on the CPU, a tied weight once (safetensors refuses shared tensors)."""
        out, seen = {}, set()
        for k, v in self.model.state_dict().items():
            if v.data_ptr() in seen:
                continue
            seen.add(v.data_ptr())
            out[k] = v.detach().to("cpu").contiguous()
        return out

    def _write_model(self, path: Path) -> None:
        """``path`` as a Hugging Face model directory (config, generation config, one
        ``model.safetensors``; tied weights stored once, as ``from_pretrained`` expects)."""
        from transformers.utils import logging as hf_logging

        path.mkdir(parents=True, exist_ok=True)
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a "Writing model shards" bar at every publish
        try:
            self.model.save_pretrained(path, safe_serialization=True, max_shard_size=_ONE_SHARD)
        except Exception as exc:  # safetensors reports a full disk as SafetensorError
            atomic_io.reraise_os_error(exc, path / "model.safetensors")
            raise
        finally:
            if bar:
                hf_logging.enable_progress_bar()

    def _export(self, version: int) -> Path:
        """``weights/vN``, whole or not at all (``atomic_io.atomic_dir``)."""
        root = self.out_dir / "weights"
        path = root / f"v{version}"
        with atomic_io.atomic_dir(path) as tmp:
            self._write_model(tmp)
        old = root / f"v{version - self.keep_weights}"
        if version - self.keep_weights >= 0 and old.exists():
            shutil.rmtree(old, ignore_errors=True)
        return path

    async def export_weights(self, version: int) -> Path:
        return await asyncio.to_thread(self._export, version)

    def _save(self, path: Path) -> None:
        """A checkpoint directory, whole or not at all (``atomic_io.atomic_dir``)."""
        with atomic_io.atomic_dir(path) as tmp:
            self._write_model(tmp)
            self.tokenizer.save_pretrained(tmp)
            torch_save(self.opt.state_dict(), tmp / "optimizer.pt")
            atomic_io.write_text(tmp / "trainer_state.json", json.dumps(
                {"steps": self.steps, "precision": self.precision}))

    def _load(self, path: Path) -> None:
        from safetensors.torch import load_file

        if (path / SHARDED_DIR).is_dir() and (path / "trainer_state.json").is_file():
            from .dcp import load_dcp  # the sharded trainer's checkpoint, in one process

            load_dcp(self.model, self.opt, path)
            self.steps = json.loads((path / "trainer_state.json").read_text())["steps"]
            return
        missing = [n for n in CHECKPOINT_FILES if not (path / n).exists()]
        if missing:
            raise FileNotFoundError(f"{path}: not a checkpoint (missing {', '.join(missing)})")
        state = load_file(str(path / "model.safetensors"), device=str(self.device))
        dtype = next(self.model.parameters()).dtype
        state = {k: v.to(dtype) for k, v in state.items()}
        check_keys(self.model, state.keys(), path)  # before anything is loaded
        self.model.load_state_dict(state, strict=False)  # a tied weight is stored once
        if tied_keys(self.model):
            self.model.tie_weights()
        self.opt.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.device))
        self.steps = json.loads((path / "trainer_state.json").read_text())["steps"]

    async def save_checkpoint(self, path: Path) -> None:
        await asyncio.to_thread(self._save, Path(path))

    async def load_checkpoint(self, path: Path) -> None:
        await asyncio.to_thread(self._load, Path(path))
