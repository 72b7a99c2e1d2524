"""A ``model.safetensors`` written tensor by tensor, for the sharded trainer's export: rank 0
never holds more than one gathered tensor (``runtime.trainer.rank``).

Why not the ``safetensors`` library: its writers (``save_file``, ``save``, the Rust
``serialize_file``) take the whole state dict in memory, which is what the sharded export must
not gather. The format is small and documented (huggingface/safetensors README): an 8-byte
little-endian header length, a JSON header naming each tensor's dtype, shape and
``data_offsets`` (begin, end) into the data that follows, then the data, back to back. Every
tensor's dtype and shape are known before any data is gathered (a DTensor carries its global
shape), so the header is written first and each tensor's bytes follow as it arrives. The
result is read back by ``safetensors`` itself in the tests (``safe_open``, ``load_file``), by
transformers and by vLLM; ``runtime.inputs.safetensors_file`` checks it as any other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

import torch

from .._moved import renamed

# torch dtype -> the format's name (the subset a trainer's weights take)
DTYPE_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
               torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
               torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


class WriteError(ValueError):
    """A tensor that does not match what the header announced, or a dtype the writer lacks."""


def plan(entries: Iterable[tuple[str, torch.dtype, tuple[int, ...]]],
         ) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """The order tensors are written in: by element size, largest first, each group in the
    given order (so every tensor starts at a multiple of its element size after the 8-aligned
    header, as the library's own writer arranges). Every rank computes the same order."""
    listed = list(entries)
    for name, dtype, _ in listed:
        if dtype not in DTYPE_NAMES:
            raise WriteError(f"tensor {name!r}: dtype {dtype} has no safetensors name here")
    return sorted(listed, key=lambda e: -e[1].itemsize)


def header(order: list[tuple[str, torch.dtype, tuple[int, ...]]],
           metadata: dict[str, str] | None = None) -> bytes:
    """The 8-byte length and the JSON header for ``order`` (``plan``'s), padded with spaces
    to a multiple of 8 bytes."""
    head: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    at = 0
    for name, dtype, shape in order:
        n = torch.Size(shape).numel() * dtype.itemsize
        head[name] = {"dtype": DTYPE_NAMES[dtype], "shape": list(shape),
                      "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(head, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


def write_tensor(f: BinaryIO, name: str, dtype: torch.dtype, shape: tuple[int, ...],
                 t: torch.Tensor) -> None:
    """``t``'s bytes (little-endian, row-major), after checking it is what the header says."""
    if t.dtype != dtype or tuple(t.shape) != tuple(shape):
        raise WriteError(f"tensor {name!r}: announced {dtype} {list(shape)}, got {t.dtype} "
                          f"{list(t.shape)}")
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    f.write(memoryview(flat.view(torch.uint8).numpy()))


def write_file(path: Path, entries: Iterable[tuple[str, torch.dtype, tuple[int, ...]]],
               fetch: Callable[[str], torch.Tensor], metadata: dict[str, str] | None = None,
               ) -> int:
    """Write ``path`` as one safetensors file: the header from ``entries`` (name, dtype,
    shape), then ``fetch(name)`` for each in ``plan``'s order, each tensor dropped once
    written. Returns the file's size in bytes."""
    order = plan(entries)
    with open(path, "wb") as f:
        f.write(header(order, metadata))
        for name, dtype, shape in order:
            t = fetch(name)
            write_tensor(f, name, dtype, shape, t)
            del t
        return f.tell()


# the old names (issue 35: "stream" also names unit streaming), kept for one release
# ``write_streamed`` and ``StreamError``, the old names of ``write_file`` and ``WriteError``
# (they read as unit streaming), kept for one release; they warn (``DeprecationWarning``)
__getattr__ = renamed(__name__, {"write_streamed": "write_file", "StreamError": "WriteError"},
                      globals())
