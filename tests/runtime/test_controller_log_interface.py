"""The run's counts and its written log read the controller through the declared interface
(issue 35, "The driver guesses..."): ``Controller`` names ``metas`` and ``trace_records``, both
controllers answer them, and ``runtime/session.py`` and ``runtime/accounting.py`` probe nothing.

Before: ``session._write_outputs`` asked ``hasattr(ctl, "trace_records")`` (a peer's rule) and
else rebuilt the trace from ``ctl.config``, and both modules read ``getattr(controller,
"metas", {})``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reserve_occupy import Config
from reserve_occupy.trace import event_to_record, header
from runtime.controller import Controller
from runtime.peers import PeerController
from runtime.recovery.journal import JournaledController

from .helpers import make, run
from .test_controller_interface import _probes, members

ROOT = Path(__file__).resolve().parents[2]


def test_the_protocol_names_the_log_reads():
    assert {"metas", "trace_records", "events", "events_since"} <= members(Controller)


@pytest.mark.parametrize("policy", ["reserve_occupy", "nemo_in_order"])
def test_trace_records_is_the_header_then_every_event_with_its_meta(policy):
    driver, _, _, clock = make(steps=3, policy=policy)
    run(driver, clock)
    ctl = driver.controller
    assert ctl.metas, "the run logged no meta: the check below would be vacuous"
    records = list(ctl.trace_records("test"))
    head = header(ctl.config, "test")
    assert {k: records[0][k] for k in head} == head
    want = []
    for event in ctl.events:
        record = event_to_record(event)
        if event.seq in ctl.metas:
            record["meta"] = ctl.metas[event.seq]
        want.append(record)
    assert records[1:] == want


def test_a_journaled_controller_writes_what_its_event_log_would():
    ctl = JournaledController(Config(max_staleness=1, batch_size=1))
    ctl.reserve("a", meta={"prompt": 4})
    ctl.abort("a", meta={"reason": "timeout"})
    records = list(ctl.trace_records("p"))
    assert records[0] == header(ctl.config, "p")
    assert [(r["op"], r.get("meta")) for r in records[1:]] == [
        ("reserve", {"prompt": 4}), ("abort", {"reason": "timeout"})]


def test_a_peer_header_names_its_rule():
    ctl = PeerController("nemo_in_order", Config(max_staleness=1, batch_size=2), 2,
                         now=lambda: 0.0)
    assert next(iter(ctl.trace_records("p")))["x_policy"] == "nemo_in_order"


@pytest.mark.parametrize("path", ["runtime/session.py", "runtime/accounting.py"])
def test_the_outputs_probe_nothing_of_the_controller(path):
    tree = ast.parse((ROOT / path).read_text())
    assert _probes(tree) == []
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
                and n.args and ast.unparse(n.args[0]) == "ctl"]
