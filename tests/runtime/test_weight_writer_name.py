"""The safetensors weight writer's module is named for what it writes
(``runtime.trainer.safetensors_writer``), not ``streamed``, which read as unit streaming
(issue 35); the old name still imports for one release, as the same module object
(``runtime/_moved.py``), with a ``DeprecationWarning`` naming the new one."""

from __future__ import annotations

import importlib
import sys
import warnings

import runtime  # noqa: F401  (installs the old names' finder)


def test_the_old_name_is_the_safetensors_writer(monkeypatch):
    new = importlib.import_module("runtime.trainer.safetensors_writer")
    monkeypatch.delitem(sys.modules, "runtime.trainer.streamed", raising=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        old = importlib.import_module("runtime.trainer.streamed")
    assert old is new
    assert old.write_file is new.write_file and old.WriteError is new.WriteError
    assert [str(w.message) for w in seen if issubclass(w.category, DeprecationWarning)] == [
        "runtime.trainer.streamed moved to runtime.trainer.safetensors_writer (issue 35); the "
        "old name is an alias for one release"]
