"""A header never switches ``check-trace`` off the reference check: a log naming a peer's rule
(``x_policy``) is checked by that rule's terms only when the command line names the rule
(``--peer NAME``), with the bound and eta the named rule enforces, never the header's
``x_bounded``/``x_eta``; the verdict is the rule's (PEER RULE HELD/BROKEN), not CONFORMING.

The log here is a Reserve–Occupy port's that breaks the bound: eta 0, a second unit reserved
while the first is in flight and trained at staleness 1 (the strict check fails it: capacity).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reserve_occupy.trace import TraceFormatError
from runtime.cli import main
from runtime.peers import PEER_POLICIES
from reserve_occupy_porting.checker import PeerHeaderError, check

HEADER = {"op": "config", "format": "reserve-occupy-trace", "schema_version": 1,
          "config": {"max_staleness": 0, "batch_size": 1}}
EVENTS = [
    {"op": "reserve", "unit": "a", "version": 0, "v_traj": 0},
    {"op": "reserve", "unit": "b", "version": 0, "v_traj": 0},
    {"op": "occupy", "unit": "a", "version": 0, "v_traj": 0},
    {"op": "occupy", "unit": "b", "version": 0, "v_traj": 0},
    {"op": "consume", "version": 0,
     "batch": {"version": 0, "units": [{"unit": "a", "v_traj": 0, "staleness": 0}]}},
    {"op": "publish", "version": 0},
    {"op": "consume", "version": 1,
     "batch": {"version": 1, "units": [{"unit": "b", "v_traj": 0, "staleness": 1}]}},
    {"op": "publish", "version": 1},
]


def _lines(**header: object) -> list[str]:
    return [json.dumps({**HEADER, **header}), *(json.dumps(e) for e in EVENTS)]


def _write(tmp_path: Path, **header: object) -> str:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(_lines(**header)) + "\n")
    return str(path)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check-trace", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line_exit_2(capsys, *argv: str) -> str:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_the_log_fails_the_strict_check(tmp_path, capsys):
    code, out, _ = _run(capsys, _write(tmp_path))
    assert code == 1 and "violates invariant 'capacity'" in out


@pytest.mark.parametrize("header", [
    {"x_policy": "not_a_rule", "x_bounded": False},
    {"x_policy": "not_a_rule", "x_eta": 5},
    {"x_policy": "unbounded", "x_bounded": False},
    {"x_policy": "nemo_in_order", "x_bounded": True, "x_eta": 5},
])
def test_a_peer_header_does_not_switch_the_check_off(tmp_path, capsys, header):
    # before: CONFORMING (peer), exit 0, for every one of these headers
    err = _one_line_exit_2(capsys, _write(tmp_path, **header))
    assert "x_policy" in err and repr(header["x_policy"]) in err
    if header["x_policy"] in PEER_POLICIES:
        assert f"--peer {header['x_policy']}" in err and "a peer's log" in err
    else:
        assert all(name in err for name in PEER_POLICIES)
    with pytest.raises(PeerHeaderError, match="x_policy"):
        check(_lines(**header))
    with pytest.raises(PeerHeaderError, match="x_policy"):  # --lenient neither
        check(_lines(**header), "lenient")


def test_peer_must_be_the_rule_the_header_names(tmp_path, capsys):
    relabelled = _write(tmp_path, x_policy="not_a_rule", x_bounded=False)
    err = _one_line_exit_2(capsys, relabelled, "--peer", "unbounded")
    assert "x_policy: is 'not_a_rule', not the rule named by --peer ('unbounded')" in err
    # a Reserve–Occupy log is not a peer's
    err = _one_line_exit_2(capsys, _write(tmp_path), "--peer", "unbounded")
    assert "x_policy: absent" in err
    with pytest.raises(PeerHeaderError, match="x_policy"):
        check(_lines(x_policy="not_a_rule"), peer="unbounded")


def test_the_named_rule_sets_the_bound_not_the_header(tmp_path, capsys):
    # nemo_in_order at eta 0 promises staleness 0: the unit trained at 1 breaks it
    code, out, _ = _run(capsys, _write(tmp_path, x_policy="nemo_in_order"), "--peer",
                        "nemo_in_order")
    assert code == 1 and "PEER RULE BROKEN (nemo_in_order)" in out
    assert "staleness-bound" in out and "CONFORMING" not in out
    # a header cannot widen the bound (x_eta) or waive it (x_bounded)
    err = _one_line_exit_2(capsys, _write(tmp_path, x_policy="nemo_in_order", x_eta=5),
                           "--peer", "nemo_in_order")
    assert "x_eta: is 5, but nemo_in_order enforces eta 0" in err
    err = _one_line_exit_2(capsys, _write(tmp_path, x_policy="nemo_in_order", x_bounded=False),
                           "--peer", "nemo_in_order")
    assert "x_bounded: is false, but nemo_in_order promises the bound" in err
    # nor claim a bound the rule does not promise
    err = _one_line_exit_2(capsys, _write(tmp_path, x_policy="unbounded", x_bounded=True),
                           "--peer", "unbounded")
    assert "x_bounded: is true, but unbounded does not promise the bound" in err
    report = check(_lines(x_policy="nemo_in_order"), peer="nemo_in_order")
    assert not report.ok and report.eta == 0 and report.bounded
    assert report.problem.violation.invariant == "staleness-bound"
    with pytest.raises(TraceFormatError, match="x_eta"):
        check(_lines(x_policy="nemo_in_order", x_eta=5), peer="nemo_in_order")


def test_an_unbounded_rule_named_reports_its_staleness_and_is_not_conforming(tmp_path, capsys):
    path = _write(tmp_path, x_policy="unbounded", x_bounded=False, x_eta=0)
    code, out, _ = _run(capsys, path, "--peer", "unbounded")
    assert code == 0 and "PEER RULE HELD (unbounded)" in out and "CONFORMING" not in out
    assert "1 units trained staler than eta 0" in out
    code, out, _ = _run(capsys, path, "--peer", "unbounded", "--json")
    report = json.loads(out)
    assert code == 0 and report["mode"] == "peer" and report["policy"] == "unbounded"
    assert report["over_eta"] == 1 and report["eta"] == 0 and report["bounded"] is False


def test_an_unknown_peer_or_peer_with_lenient_is_exit_2(tmp_path, capsys):
    path = _write(tmp_path, x_policy="unbounded")
    err = _one_line_exit_2(capsys, path, "--peer", "not_a_rule")
    assert "--peer: unknown rule 'not_a_rule'" in err
    assert all(name in err for name in PEER_POLICIES)
    err = _one_line_exit_2(capsys, path, "--peer", "unbounded", "--lenient")
    assert "--peer with --lenient" in err
    with pytest.raises(ValueError, match="unknown peer policy 'not_a_rule'"):
        check(_lines(x_policy="unbounded"), peer="not_a_rule")
