"""The old import names of the modules that left ``runtime/`` (issue 35) still import, for one
release, and give the SAME module objects as the new names (``runtime/_moved.py``): a class
checked with ``isinstance`` or a function monkeypatched under one name is the other's too."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MOVED = [
    ("runtime.sim.model.policies", "reserve_occupy_peers"),
    ("runtime.sim.model.policies.roll", "reserve_occupy_peers.roll"),
    ("runtime.sim.model.policies.base", "reserve_occupy_peers.base"),
]


@pytest.mark.parametrize("old,new", MOVED)
def test_an_old_name_is_the_new_module(old, new):
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        before = importlib.import_module(old)
    assert before is importlib.import_module(new)
    assert sys.modules[old] is sys.modules[new]
    assert before.__name__ == new


def test_an_old_name_warns_in_a_fresh_process():
    code = ("import warnings\nwarnings.simplefilter('error', DeprecationWarning)\n"
            f"import {MOVED[1][0]}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=120)
    assert out.returncode != 0 and "moved to reserve_occupy_peers" in out.stderr


def test_a_patch_through_the_old_name_is_seen_through_the_new(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("runtime.sim.model.policies")
    import reserve_occupy_peers

    monkeypatch.setattr(old, "SOURCE_BASELINES", ("patched",))
    assert reserve_occupy_peers.SOURCE_BASELINES == ("patched",)
    assert old.POLICIES["roll"] is reserve_occupy_peers.roll.Roll
