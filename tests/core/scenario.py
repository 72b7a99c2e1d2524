"""Replays a spec/scenarios/*.json file against the real controller (format: spec/scenarios/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import reserve_occupy as ro
from reserve_occupy import Config, Group, StalenessController

SCENARIOS = Path(__file__).resolve().parents[2] / "spec" / "scenarios"
UNIT_OPS = {"reserve", "occupy", "abort", "filter"}
PLAIN_OPS = {"consume", "publish", "release_stuck", "stream"}
GROUP_OPS = {"group_open", "group_finish", "group_fail"}
STEP_KEYS = {"op", "unit", "refused", "slot", "moves", "aborted", "batch", "version", "error",
             "buffers", "status", "size", "candidates", "candidate", "complete", "failed",
             "surplus", "streamed", "note"}


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _moves(moves: tuple) -> list:
    return [[m.unit_id, list(m.src), list(m.dst), m.reason.value] for m in moves]


def run_scenario(data: dict[str, Any]) -> StalenessController:
    """Run every step; raise AssertionError naming the step at the first mismatch."""
    c = StalenessController(Config(**data["config"]))
    groups: dict[str, Group] = {}
    for n, step in enumerate(data["steps"]):
        where = f"{data['name']} step {n} ({step.get('op')} {step.get('unit', '')})"
        unknown = set(step) - STEP_KEYS
        assert not unknown, f"{where}: unknown fields {unknown}"
        op = step["op"]
        if "error" in step:
            before, n_events = c.snapshot(), len(c.events)
            err = getattr(ro, step["error"])
            try:
                _do(c, groups, step)
            except err:
                pass
            else:
                raise AssertionError(f"{where}: expected {step['error']}")
            assert c.snapshot() == before and len(c.events) == n_events, f"{where}: state changed"
        elif op in GROUP_OPS:
            progress = _do(c, groups, step)
            if progress is not None:
                got = {"complete": progress.complete, "failed": progress.failed,
                       "surplus": list(progress.surplus)}
                want = {"complete": step.get("complete", False), "failed": step.get("failed", False),
                        "surplus": step.get("surplus", [])}
                assert got == want, f"{where}: {got} != {want}"
        else:
            result = _do(c, groups, step)
            _compare(where, c, step, result)
        c.check()
        snap = c.snapshot()
        for b, text in step.get("buffers", {}).items():
            got = snap.buffer(int(b)).render()
            assert got == text, f"{where}: buffer {b} is {got!r}, expected {text!r}"
        for b, status in step.get("status", {}).items():
            got = snap.buffer(int(b)).status.value
            assert got == status, f"{where}: buffer {b} is {got}, expected {status}"
    return c


def _do(c: StalenessController, groups: dict[str, Group], step: dict[str, Any]) -> Any:
    op = step["op"]
    if op in UNIT_OPS:
        return getattr(c, op)(step["unit"])
    if op in PLAIN_OPS:
        return getattr(c, op)()
    if op == "group_open":
        groups[step["unit"]] = Group(step["unit"], step["size"], step.get("candidates"))
        return None
    if op == "group_finish":
        return groups[step["unit"]].finish(step["candidate"])
    if op == "group_fail":
        return groups[step["unit"]].fail(step["candidate"])
    raise AssertionError(f"unknown op {op!r}")


def _compare(where: str, c: StalenessController, step: dict[str, Any], result: Any) -> None:
    op = step["op"]
    if step.get("refused"):
        assert result in (None, [], ()), f"{where}: expected refusal, got {result!r}"
        return
    if op == "reserve":
        assert result is not None, f"{where}: reserve was refused"
        assert list(result.slot) == step["slot"], f"{where}: slot {list(result.slot)}"
    elif op in ("occupy", "abort", "filter"):
        assert list(result.slot) == step["slot"], f"{where}: slot {list(result.slot)}"
        assert _moves(result.moves) == step.get("moves", []), f"{where}: moves {_moves(result.moves)}"
        assert list(result.aborted) == step.get("aborted", []), f"{where}: aborted {result.aborted}"
    elif op == "consume":
        assert result is not None, f"{where}: consume was refused"
        got = [[u.unit_id, u.staleness] for u in result.units]
        assert got == step["batch"], f"{where}: batch {got}"
        assert list(result.streamed) == step.get("streamed", []), (
            f"{where}: streamed {list(result.streamed)}")
    elif op == "stream":
        got = [[u.unit_id, u.staleness] for u in result]
        assert got == step["batch"], f"{where}: handed {got}"
    elif op == "publish":
        assert result == step["version"], f"{where}: version {result}"
    elif op == "release_stuck":
        assert list(result) == step.get("aborted", []), f"{where}: aborted {result}"
        moves = _moves(c.events[-1].moves)
        assert moves == step.get("moves", []), f"{where}: moves {moves}"
