"""The peers' rules beneath both callers (issue 35): ``reserve_occupy_peers`` holds every rule
and the rule API; a rule asks its host only what ``Host`` names, and both hosts (the simulator,
the runtime's ``PeerController``) answer every one of those calls. Before, the runtime kept a
hand-made copy of the simulator's host API (``runtime.peers._SimView``) that nothing compared
with what the rules call; and the rules lived inside the simulator, which the production path
imported to run them."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import reserve_occupy_peers
from reserve_occupy import Config
from reserve_occupy_peers import POLICIES, Host, SimulatorHost
from runtime.peers import PEER_POLICIES, PeerController

ROOT = Path(__file__).resolve().parents[2]


def protocol_members(proto: type) -> set[str]:
    """The names a Protocol declares (attributes, properties, methods), its bases' included."""
    names: set[str] = set()
    for cls in proto.__mro__:
        if cls in (object,) or cls.__name__ in ("Protocol", "Generic"):
            continue
        names.update(getattr(cls, "__annotations__", {}))
        names.update(n for n, v in vars(cls).items()
                     if not n.startswith("_") and (callable(v) or isinstance(v, property)))
    return names


def host_calls(cls: type) -> set[str]:
    """What the rule class (and its bases in the rules package) reads of its host: every
    ``self.sim.X`` and ``sim.X`` where ``sim = self.sim``."""
    calls: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("reserve_occupy_peers") \
                or klass.__module__ == "reserve_occupy_peers.api":
            continue
        tree = ast.parse(inspect.getsource(klass))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            v = node.value
            if (isinstance(v, ast.Attribute) and v.attr == "sim"
                    and isinstance(v.value, ast.Name) and v.value.id == "self") \
                    or (isinstance(v, ast.Name) and v.id == "sim"):
                calls.add(node.attr)
    return calls


HOST = protocol_members(Host)


def test_host_names_the_calls_of_the_rule_api():
    assert HOST == {"batch_size", "group_size", "version", "now", "paused", "trainer_idle",
                    "rollout_has_room", "admit", "abort_group", "drop", "filter", "set_timer"}


@pytest.mark.parametrize("name", PEER_POLICIES)
def test_every_rule_the_runtime_drives_asks_only_what_host_names(name):
    calls = host_calls(POLICIES[name])
    assert calls, name  # the scan sees the rule's calls
    assert calls <= HOST, (name, calls - HOST)


@pytest.mark.parametrize("name", sorted(set(POLICIES) - set(PEER_POLICIES)))
def test_a_simulator_only_rule_asks_only_what_simulator_host_names(name):
    calls = host_calls(POLICIES[name])
    allowed = protocol_members(SimulatorHost)
    assert calls <= allowed, (name, calls - allowed)


def test_both_hosts_answer_every_call_of_host():
    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.cost import preset
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate

    sim = Simulator(POLICIES["unbounded"](1), generate(1, MathReasoningShape(groups=8)),
                    preset("qwen3-8b-h20"), batches=1, batch_size=2)
    for member in protocol_members(SimulatorHost):
        assert hasattr(sim, member), member
    ctl = PeerController("unbounded", Config(max_staleness=1, batch_size=2), 2,
                         now=lambda: 0.0)
    for member in HOST:
        assert hasattr(ctl, member), member
    assert ctl.rule.sim is ctl  # the controller is the rule's host: no copy of its API between
    assert ctl.now == 0.0 and ctl.trainer_idle and not ctl.paused


def test_the_runtime_host_answers_a_rule_abort_as_before():
    """``abort_group`` (the rule's L2) and ``abort`` (the driver's: the runtime lost the unit)
    are two calls with two answers on one object."""
    ctl = PeerController("unbounded", Config(max_staleness=1, batch_size=2), 2)
    ctl.reserve("u0")
    group = ctl._units["u0"]
    ctl.abort_group(group)
    assert ctl.take_aborted() == ["u0"] and ctl.unit_state("u0").value == "ABORTED"
    ctl.reserve("u1")
    ctl.abort("u1")  # the driver's abort: the rule's group waits for the next unit
    assert ctl.take_aborted() == [] and ctl._waiting and ctl._waiting[0].unit_id is None


def _imported_after(code: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code += "\nimport sys\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_the_rules_package_imports_no_simulator_runtime_torch_or_vllm():
    mods = _imported_after("import reserve_occupy_peers")
    bad = sorted(m for m in mods if m.split(".")[0] in (
        "runtime", "reserve_occupy_sim", "reserve_occupy_porting", "reserve_occupy_faults",
        "torch", "vllm", "numpy"))
    assert bad == []
    assert reserve_occupy_peers.__file__.startswith(str(ROOT / "reserve_occupy_peers"))


def test_validating_a_peer_config_imports_no_tool(tmp_path):
    """``train --check``'s validation of a config that names a peer's rule (it asks the rule
    whether it streams): before, that loaded the simulator (reserve_occupy_sim.model.policies)."""
    mods = _imported_after(
        "from runtime.config import load_config\n"
        "cfg = load_config('configs/demo.yaml', {'staleness.policy': 'nemo_in_order',\n"
        "                  'trainer.streaming': True, 'recovery.enabled': False})\n"
        "from runtime.peers import peer_streams\n"
        "assert peer_streams('nemo_in_order')\n")
    tools = sorted(m for m in mods if m.split(".")[0] in (
        "reserve_occupy_sim", "reserve_occupy_porting", "reserve_occupy_faults")
        or m.startswith(("reserve_occupy_sim", "reserve_occupy_porting", "reserve_occupy_faults")))
    assert tools == []
