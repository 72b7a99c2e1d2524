"""The conformance corpus and its runner: the committed corpus is what generation produces, the
vectors round-trip through check-trace, our core passes them through every kind of adapter, and
wrong ports fail them."""

from __future__ import annotations

import itertools
import json
import lzma
import os
import shutil
import sys
from pathlib import Path

import pytest

from reserve_occupy_porting import conformance, vectors
from reserve_occupy_porting.checker import check
from reserve_occupy_porting.vector_runner import ReferenceAdapter, SubprocessAdapter, run
from reserve_occupy_porting.vectors import SCENARIOS, load

from .test_trace import HEADER_VALIDATOR, VALIDATOR
from .toy_port import ToyAdapter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    """Every 8th vector of every family: ~1300 vectors, all configs and profiles represented."""
    return list(itertools.islice(load(), 0, None, 8))


@pytest.mark.slow
def test_committed_corpus_is_up_to_date(capsys) -> None:
    code = conformance.main(["--check"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "up to date" in err


def test_stale_or_corrupt_corpus_is_reported(tmp_path: Path, capsys) -> None:
    shutil.copy(vectors.path_for("scenarios"), tmp_path)
    shutil.copy(vectors.CORPUS_DIR / vectors.MANIFEST_NAME, tmp_path)  # a corpus holds it
    assert conformance.main(["--check", "--family", "scenarios", "--dir", str(tmp_path)]) == 0
    path = vectors.path_for("scenarios", tmp_path)
    lines = vectors.read_text(path).splitlines()
    v = json.loads(lines[0])
    v["events"][0]["slot"] = [0, 0]  # a hand edit, or an older core's behaviour
    path.write_bytes(lzma.compress(b"\n".join([json.dumps(v).encode(), *lines[1:]]) + b"\n"))
    capsys.readouterr()
    assert conformance.main(["--check", "--family", "scenarios", "--dir", str(tmp_path)]) == 1
    assert "stale" in capsys.readouterr().err
    assert conformance.main(["--regenerate", "--family", "scenarios", "--dir",
                             str(tmp_path)]) == 1
    assert "rewrote scenarios" in capsys.readouterr().err
    assert conformance.main(["--check", "--family", "scenarios", "--dir", str(tmp_path)]) == 0
    path.write_bytes(b"not xz at all")
    assert conformance.main(["--family", "scenarios", "--dir", str(tmp_path)]) == 2
    assert "corrupted" in capsys.readouterr().err
    path.unlink()
    assert conformance.main(["--family", "scenarios", "--dir", str(tmp_path)]) == 2
    assert "missing" in capsys.readouterr().err
    assert conformance.main(["--family", "nope"]) == 2


def test_manifest_matches_files() -> None:
    manifest = json.loads((vectors.CORPUS_DIR / "MANIFEST.json").read_text())
    assert manifest["schema_version"] == 1
    assert set(manifest["families"]) == set(vectors.family_names())
    total = sum(vectors.path_for(f).stat().st_size for f in vectors.family_names())
    assert total < 4_000_000  # the corpus stays small enough for git


def test_scenarios_show_their_rule() -> None:
    """Each scenario still exercises the rule it is named for (so it cannot go vacuous)."""
    by_id = {v["id"]: v for v in load(["scenarios"])}
    assert set(by_id) == {f"scenarios/{n}" for n in SCENARIOS}
    for name, (_, _, shows) in SCENARIOS.items():
        events = by_id[f"scenarios/{name}"]["events"]
        reasons = {m["reason"] for e in events for m in e.get("moves", [])}
        kind, _, what = shows.partition(": ")
        if kind == "move":
            assert what in reasons, name
        elif kind == "aborted":
            assert any(e.get("aborted") and e["op"] == "occupy" for e in events), name
        elif kind == "released":
            (released,) = [e["aborted"] for e in events if e["op"] == "release_stuck"]
            assert released == what.split(), name
        elif kind == "refused":
            assert any(e.get("refused") and e["op"] == what for e in events), name
        elif kind == "placed":
            unit, buffer = what.split()
            (slot,) = [e["slot"] for e in events if e["op"] == "occupy" and e["unit"] == unit]
            assert slot[0] == int(buffer), name
        else:
            assert name == "seed-example", f"{name}: unchecked 'shows' {shows!r}"
    batches = [sorted(u["unit"] for u in e["batch"]["units"])
               for e in by_id["scenarios/seed-example"]["events"] if e["op"] == "consume"]
    stale = [{u["staleness"] for u in e["batch"]["units"]}
             for e in by_id["scenarios/seed-example"]["events"] if e["op"] == "consume"]
    # spec/PROTOCOL.md's end-to-end example
    assert batches == [list("ACDE"), list("BFGH"), list("IJKL")] and stale == [{0}, {1}, {1}]


def test_spec_vectors_match_the_hand_written_scenarios() -> None:
    """The ``spec`` family is spec/scenarios replayed; its records agree with every outcome the
    scenario files state by hand (slots, refusals, moves, aborts, batches). Scenarios with
    streaming on are in the ``streaming`` family instead, as ``streaming/spec-<name>``."""
    vecs = {v["id"]: v for v in load(["spec"])}
    vecs.update((f"spec/{v['id'].removeprefix('streaming/spec-')}", v)
                for v in load(["streaming"]) if v["id"].startswith("streaming/spec-"))
    paths = sorted(vectors.SPEC_SCENARIOS.glob("*.json"))
    assert paths and set(vecs) == {f"spec/{p.stem}" for p in paths}
    checked = 0
    for path in paths:
        _, _, data = vectors.spec_scenario(path)
        steps = [s for s in data["steps"] if s["op"] in vectors._CONTROLLER_OPS
                 and "error" not in s]
        events = vecs[f"spec/{path.stem}"]["events"]
        assert len(steps) == len(events), path.name
        for step, event in zip(steps, events, strict=False):
            assert (step["op"], step.get("unit")) == (event["op"], event.get("unit"))
            assert bool(step.get("refused")) == bool(event.get("refused")), (path.name, step)
            if "slot" in step:
                assert event["slot"] == step["slot"], (path.name, step)
            if "moves" in step:
                assert ([[m["unit"], m["from"], m["to"], m["reason"]] for m in event["moves"]]
                        == step["moves"]), (path.name, step)
            if (step["op"] in ("occupy", "abort", "filter", "release_stuck")
                    and not step.get("refused")):
                assert sorted(event.get("aborted", [])) == sorted(step.get("aborted", []))
            if "batch" in step:
                assert ([[u["unit"], u["staleness"]] for u in event["batch"]["units"]]
                        == step["batch"]), (path.name, step)
                assert event["batch"].get("streamed", []) == step.get("streamed", [])
            checked += 1
    assert checked > 80


@pytest.mark.slow
def test_vectors_round_trip_through_check_trace(sample: list[dict], capsys) -> None:
    for v in sample[::40]:
        assert conformance.main(["--export", v["id"]]) == 0
        lines = capsys.readouterr().out.splitlines()
        HEADER_VALIDATOR.validate(json.loads(lines[0]))
        for line in lines[1:]:
            VALIDATOR.validate(json.loads(line))
        assert [json.loads(x) for x in lines[1:]] == v["events"]
        for mode in ("strict", "lenient"):
            assert check(lines, mode).ok, v["id"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_reference_core_passes(sample: list[dict], mode: str) -> None:
    result = run(ReferenceAdapter(), sample, mode)
    assert result.ok, result.failures[:3]
    assert result.vectors == len(sample) and result.steps > 50_000 and result.skipped == 0


def test_subprocess_adapter() -> None:
    """A port in another language: JSON Lines over stdin/stdout, one process for all vectors."""
    cmd = f"{sys.executable} {ROOT / 'tests' / 'porting' / 'json_port.py'}"
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT)
    try:
        adapter = SubprocessAdapter(cmd)
        vecs = list(load(["scenarios"])) + list(itertools.islice(load(["oversampling"]), 40))
        result = run(adapter, vecs, "strict")
    finally:
        if env_before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_before
    assert result.ok, result.failures[:3]
    assert adapter.proc is None  # closed at the end


@pytest.mark.slow
def test_different_but_legal_port(sample: list[dict]) -> None:
    """The toy port places differently: strict rejects it, lenient accepts it."""
    strict = run(ToyAdapter(), sample, "strict")
    assert len(strict.failures) > 20
    lenient = run(ToyAdapter(), sample, "lenient")
    assert lenient.ok, lenient.failures[:3]


class _Eager(ReferenceAdapter):
    """Admits every unit: never makes one wait."""

    def reserve(self, unit_id):
        got = self.c.reserve(unit_id)
        return True if got is None else got


class _ShortBatch(ReferenceAdapter):
    def consume(self):
        batch = self.c.consume()
        return None if batch is None else list(batch.unit_ids)[:-1]


class _NoClosingAborts(ReferenceAdapter):
    def occupy(self, unit_id):
        return self.c.occupy(unit_id).slot


@pytest.mark.parametrize("adapter,family,strict_field,lenient_invariant", [
    (_Eager, "basic", "decision", "capacity"),
    (_ShortBatch, "basic", "batch.units", "batch"),
    (_NoClosingAborts, "oversampling", "aborted", None),
])
def test_wrong_ports_fail(adapter, family: str, strict_field: str,
                          lenient_invariant: str | None) -> None:
    vecs = list(itertools.islice(load([family]), 0, 400, 4))
    strict = run(adapter(), vecs, "strict")
    assert strict.failures and strict_field + ":" in strict.failures[0].detail
    if lenient_invariant:
        lenient = run(adapter(), vecs, "lenient")
        assert f"violates '{lenient_invariant}'" in lenient.failures[0].detail


def test_runner_reports_adapter_exceptions() -> None:
    class Broken(ReferenceAdapter):
        def filter(self, unit_id):
            raise RuntimeError("not implemented")

    vecs = [v for v in itertools.islice(load(["groups"]), 100)
            if any(e["op"] == "filter" for e in v["events"])][:3]
    result = run(Broken(), vecs, "strict")
    assert len(result.failures) == 3
    assert "raised RuntimeError: not implemented" in result.failures[0].detail


def test_drive_is_deterministic() -> None:
    a = vectors.generate("groups", 3)
    b = vectors.generate("groups", 3)
    assert list(a) == list(b)
