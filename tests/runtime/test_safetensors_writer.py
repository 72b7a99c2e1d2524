"""``runtime.trainer.safetensors_writer`` (``runtime.trainer.streamed`` before; its
``write_file`` and ``WriteError`` were ``write_streamed`` and ``StreamError``): the
tensor-by-tensor safetensors writer of the sharded export.
What it writes is read back by the safetensors library itself and passes the runtime's own file
check; it holds one fetched tensor at a time; a tensor unlike its announcement is refused."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from runtime.inputs import safetensors_file
from runtime.trainer import safetensors_writer as writer


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(5, 3, generator=g),
        "b.bias": torch.randn(7, generator=g).to(torch.bfloat16),  # 14 bytes: an odd size
        "c.count": torch.tensor(3, dtype=torch.int64),  # 0-dim
        "d.mask": torch.tensor([True, False, True]),
        "e.half": torch.randn(2, 2, generator=g).half(),
        "f.weight": torch.randn(4, 4, generator=g),
    }


def _entries(t: dict[str, torch.Tensor]) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    return [(k, v.dtype, tuple(v.shape)) for k, v in t.items()]


def test_round_trip_through_the_library(tmp_path):
    t = _tensors()
    path = tmp_path / "model.safetensors"
    size = writer.write_file(path, _entries(t), lambda n: t[n].clone(),
                             metadata={"format": "pt"})
    assert size == path.stat().st_size
    back = load_file(str(path))
    assert back.keys() == t.keys()
    for k, v in t.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    with safe_open(str(path), "pt") as f:
        assert f.metadata() == {"format": "pt"}
    safetensors_file(path, "weights")  # the runtime's own check of a weights file
    # the same tensors as the library writes them
    save_file(t, str(tmp_path / "lib.safetensors"))
    lib = load_file(str(tmp_path / "lib.safetensors"))
    assert all(torch.equal(lib[k], back[k]) for k in t)


def test_every_tensor_starts_at_a_multiple_of_its_element_size(tmp_path):
    t = _tensors()
    order = writer.plan(_entries(t))
    head = writer.header(order)
    assert len(head) % 8 == 0
    import json

    parsed = json.loads(head[8:])
    for name, dtype, _ in order:
        begin = parsed[name]["data_offsets"][0]
        assert (len(head) + begin) % dtype.itemsize == 0, name


def test_one_tensor_held_at_a_time(tmp_path):
    """The writer drops each tensor before it asks for the next (the point of writing tensor
    by tensor: rank 0 never holds the whole model)."""
    t = _tensors()
    alive: list[weakref.ref] = []
    held_at_fetch: list[int] = []

    def fetch(name: str) -> torch.Tensor:
        gc.collect()
        held_at_fetch.append(sum(r() is not None for r in alive))
        out = t[name].clone()
        alive.append(weakref.ref(out))
        return out

    writer.write_file(tmp_path / "m.safetensors", _entries(t), fetch)
    assert held_at_fetch == [0] * len(t)


def test_a_tensor_unlike_its_announcement_is_refused(tmp_path):
    t = _tensors()
    with pytest.raises(writer.WriteError, match="'f.weight': announced torch.float32 "
                                               r"\[4, 4\], got torch.float32 \[4, 5\]"):
        writer.write_file(tmp_path / "m.safetensors", _entries(t),
                          lambda n: torch.zeros(4, 5) if n == "f.weight" else t[n])
    with pytest.raises(writer.WriteError, match="'b.bias': announced torch.bfloat16"):
        writer.write_file(tmp_path / "m.safetensors", _entries(t),
                          lambda n: t[n].float() if n == "b.bias" else t[n])


def test_a_dtype_without_a_name_is_refused_before_writing(tmp_path):
    path = tmp_path / "m.safetensors"
    with pytest.raises(writer.WriteError, match="'z': dtype torch.complex64"):
        writer.write_file(path, [("z", torch.complex64, (2,))],
                          lambda n: torch.zeros(2, dtype=torch.complex64))
    assert not path.exists()
