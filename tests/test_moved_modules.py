"""The old import names of the modules that left ``runtime/`` (issue 35) still import, for one
release, and give the SAME module objects as the new names (``runtime/_moved.py``): a class
checked with ``isinstance`` or a function monkeypatched under one name is the other's too."""

from __future__ import annotations

import importlib
import os

import runtime
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
    ("runtime.sim", "reserve_occupy_sim"),
    ("runtime.sim.model.core", "reserve_occupy_sim.model.core"),
    ("runtime.sim.studies.pages", "reserve_occupy_sim.studies.pages"),
    ("runtime.porting", "reserve_occupy_porting"),
    ("runtime.porting.checker", "reserve_occupy_porting.checker"),
    ("runtime.faults", "reserve_occupy_faults"),
    ("runtime.faults.harness", "reserve_occupy_faults.harness"),
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
    assert out.returncode != 0 and "runtime.sim moved to reserve_occupy_sim" in out.stderr


def test_import_runtime_sim_model_core_gives_the_new_module():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import runtime.sim.model.core as old
        from runtime.sim.model.core import Simulator as OldSimulator
    import reserve_occupy_sim.model.core as new

    assert old is new and OldSimulator is new.Simulator
    assert runtime.sim.model.core is new  # the attribute path of the old name, too


def test_python_m_with_an_old_name_runs_the_new_module():
    out = subprocess.run([sys.executable, "-m", "runtime.sim.studies.pages", "--check"],
                         capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "agrees" in out.stdout


def test_a_patch_through_the_old_name_is_seen_through_the_new(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("runtime.sim.model.policies")
    import reserve_occupy_peers

    monkeypatch.setattr(old, "SOURCE_BASELINES", ("patched",))
    assert reserve_occupy_peers.SOURCE_BASELINES == ("patched",)
    assert old.POLICIES["roll"] is reserve_occupy_peers.roll.Roll


def test_the_driver_trainer_records_live_with_the_driver_records():
    """``Sample``, ``GroupSample``, ``TrainBatch`` and ``assemble`` moved from
    ``runtime.trainer.base`` (beside torch code) to ``runtime.records``; the old place
    re-exports the same objects."""
    import runtime.records as records
    import runtime.trainer.base as base

    for name in ("Sample", "GroupSample", "TrainBatch", "assemble"):
        assert getattr(base, name) is getattr(records, name)
        assert getattr(records, name).__module__ == "runtime.records"
