"""The porting docs stay true: their example trace conforms, their logging snippet produces
checkable traces, and the divergence they show is what the checker prints."""

from __future__ import annotations

from pathlib import Path

from reserve_occupy import Config, StalenessController
from reserve_occupy_porting.checker import check
from reserve_occupy_porting.report import render_text
from reserve_occupy_porting.vectors import load
from reserve_occupy_porting.drive import Profile, drive

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _blocks(path: Path, lang: str) -> list[str]:
    """Fenced code blocks with this info string ("" for a bare fence)."""
    blocks: list[str] = []
    inside, keep, body = False, False, []
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if inside and keep:
                blocks.append("".join(body))
            inside, keep, body = not inside, line[3:].strip() == lang, []
        elif inside:
            body.append(line)
    return blocks


def test_format_reference_example_conforms() -> None:
    (example,) = [b for b in _blocks(DOCS / "porting" / "trace-format.md", "json")
                  if b.count("\n") > 3]
    report = check(example.splitlines())
    assert report.ok and report.batches == 1


def test_logging_snippet_makes_checkable_traces(tmp_path: Path) -> None:
    (snippet,) = [b for b in _blocks(DOCS / "porting.md", "python") if "class TraceLog" in b]
    namespace: dict = {}
    exec(snippet, namespace)  # noqa: S102 -- our own documentation
    config = Config(1, 2, capacity=3, max_concurrency=5)
    c = StalenessController(config)
    drive(c, 11, Profile(steps=300), reraise=True)
    path = tmp_path / "run.jsonl"
    log = namespace["TraceLog"](path, 1, 2, capacity=3, max_concurrency=5)
    for e in c.events:  # replay what the controller did through the documented logger
        if e.op == "reserve":
            log.reserve(e.unit_id, v_traj=e.v_traj, slot=list(e.slot))
        elif e.op in ("occupy",):
            log.occupy(e.unit_id, slot=list(e.slot), aborted=e.aborted)
        elif e.op in ("abort", "filter"):
            getattr(log, e.op)(e.unit_id, aborted=e.aborted)
        elif e.op == "consume":
            log.consume(e.batch.version, e.batch.unit_ids)
        elif e.op == "publish":
            log.publish()
    log.f.close()
    has_release = any(e.op == "release_stuck" for e in c.events)
    assert not has_release  # the snippet has no release_stuck; this run must not need it
    lines = path.read_text().splitlines()
    for mode in ("strict", "lenient"):
        assert check(lines, mode).ok


def test_walkthrough_divergence_is_what_the_checker_prints() -> None:
    (vector,) = [v for v in load(["scenarios"]) if v["id"] == "scenarios/seed-example"]
    from reserve_occupy.trace import dumps, header, parse_config

    lines = [dumps(header(parse_config({"op": "config", "schema_version": 1,
                                        "config": vector["config"]})))]
    lines += [dumps(r) for r in vector["events"]]
    assert check(lines).ok
    lines[8] = lines[8].replace('"slot":[0,0]', '"slot":[1,0]', 1)
    text = render_text(check(lines), "seed.jsonl")
    shown = next(b for b in _blocks(DOCS / "porting.md", "") if "DIVERGES" in b)
    for line in shown.splitlines():
        if '"moves":[...]' in line:  # abbreviated in the doc
            line = line.split('"moves"')[0]
        assert line.strip() in text, line
