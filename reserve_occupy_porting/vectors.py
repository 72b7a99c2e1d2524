"""The conformance corpus: seeded generation, and reading and writing
``reserve_occupy_porting/corpus``.

A *vector* is one reference run: a config and the trace records the reference controller produced
(refusals included). Each record is both an input -- its ``op`` and ``unit`` are what the runner
asks a port to do -- and that input's expected outcome. One JSON object per line:

    {"id": "basic/00017", "family": "basic", "seed": 17, "config": {...}, "events": [...]}

Families (``FAMILIES``) draw a config and a runtime profile from their seed; ``spec`` replays the
worked examples of spec/scenarios (their controller operations; the expected outcomes here are
the reference's, which tests/core checks against the hand-written ones); ``scenarios`` holds the
shortest run in which each rule decides an outcome; ``streaming`` holds runs with
``Config.streaming`` (a trainer that streams at random idle moments, and the spec/scenarios
files whose config streams, which ``spec`` leaves to it). Each family is stored as
``<family>.jsonl.xz``: xz because the JSON repeats itself (about 25x smaller than plain text),
so the corpus stays at a few MB in git; ``MANIFEST.json`` records counts and the SHA-256 of
each uncompressed file. Generation is deterministic: the same code and core give byte-identical
text, which is how ``--check`` detects a stale corpus.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import lzma
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reserve_occupy import Config, StalenessController
from reserve_occupy.trace import SCHEMA_VERSION, dumps, header, loads_bounded

from runtime import atomic_io, inputs

from .drive import Profile, Step, drive, play

# The normative corpus, package data (spec/conformance/README.md says why it lives here).
CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
# What the spec family is generated from (a checkout only: --regenerate, not --check or a run).
SPEC_SCENARIOS = Path(__file__).resolve().parents[1] / "spec" / "scenarios"
# Scenario steps that are not controller operations: Group bookkeeping, and steps whose expected
# outcome is an exception (an interface error, not a protocol outcome a trace can record).
_CONTROLLER_OPS = {"reserve", "occupy", "abort", "filter", "consume", "publish", "release_stuck",
                   "stream"}
# The corpus format's name in MANIFEST.json, kept as it was written when this module was
# runtime.porting.vectors (issue 35 moved it): a name, not an import path; changing it would
# rewrite the committed, normative corpus for no change of its content.
GENERATOR = "runtime.porting.vectors/1"


@dataclass(frozen=True)
class Family:
    """A config family: how a seed picks the config and the runtime's behaviour."""

    name: str
    count: int
    description: str
    pick: Callable[[random.Random], tuple[Config, Profile]]


def _sync(r: random.Random) -> tuple[Config, Profile]:
    b = r.choice((1, 2, 3))
    return (Config(0, b, max_concurrency=r.choice((None, None, b + 1))),
            Profile(steps=r.randint(30, 90)))


def _basic(r: random.Random) -> tuple[Config, Profile]:
    return (Config(r.choice((1, 2, 3)), r.choice((1, 2, 3, 4))),
            Profile(steps=r.randint(30, 110), int_ids=r.random() < 0.3))


def _concurrency(r: random.Random) -> tuple[Config, Profile]:
    b = r.choice((2, 3, 4))
    return (Config(r.choice((1, 2)), b, max_concurrency=r.choice((1, 2, b, b + 2))),
            Profile(steps=r.randint(30, 110), admit=4.0))


def _oversampling(r: random.Random) -> tuple[Config, Profile]:
    b = r.choice((1, 2, 3))
    return (Config(r.choice((1, 2)), b, capacity=b + r.choice((1, 2)),
                   max_concurrency=r.choice((None, None, 2 * b + 2))),
            Profile(steps=r.randint(30, 110), fail=0.1))


def _groups(r: random.Random) -> tuple[Config, Profile]:
    b, size = r.choice((2, 3)), r.choice((2, 3, 4))
    return (Config(r.choice((1, 2)), b, capacity=b + r.choice((0, 0, 1))),
            Profile(steps=r.randint(50, 140), finish=5.0, filter=0.4, fail=0.08,
                    group_size=size, candidates=size + r.choice((0, 1, 2)), int_ids=True))


def _stragglers(r: random.Random) -> tuple[Config, Profile]:
    b = r.choice((2, 3, 4))
    return (Config(r.choice((1, 2, 3)), b, capacity=b + r.choice((0, 0, 1))),
            Profile(steps=r.randint(30, 110), finish=1.5, train=2.5, release=0.45, fail=0.12))


def _streaming(r: random.Random) -> tuple[Config, Profile]:
    b = r.choice((1, 2, 3, 4))
    return (Config(r.choice((0, 1, 2, 3)), b, capacity=b + r.choice((0, 0, 1)),
                   max_concurrency=r.choice((None, None, b + 1)), streaming=True),
            Profile(steps=r.randint(30, 110), filter=0.4, fail=0.08, release=0.1,
                    stream=r.choice((0.3, 0.7))))


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("sync", 1000, "eta = 0 (synchronous RL), with and without a concurrency limit", _sync),
    Family("basic", 2000, "eta 1..3, batch 1..4, capacity = batch, no concurrency limit", _basic),
    Family("concurrency", 2000, "max_concurrency from 1 to batch + 2", _concurrency),
    Family("oversampling", 2000, "capacity > batch_size: closing moves and aborts",
           _oversampling),
    Family("groups", 2000, "GRPO groups as units, group-level oversampling, failed groups "
                           "aborted, zero-variance groups filtered", _groups),
    Family("stragglers", 1500, "slow units: STUCK head buffers released, frequent aborts",
           _stragglers),
    Family("streaming", 1000, "Config.streaming: the idle trainer streams the head buffer's "
                              "finished units; filters, aborts, oversampling", _streaming),
)}


def _letters(s: str) -> list[Step]:
    """``"reserve A B; occupy A; consume"`` -> [("reserve", "A"), ("reserve", "B"), ...]."""
    steps: list[Step] = []
    for part in s.split(";"):
        op, *units = part.split()
        steps.extend([(op, u) for u in units] if units else [(op,)])
    return steps


# name -> (config, script, what it shows). The seed example is spec/PROTOCOL.md's; the others are
# the shortest runs (found by seeded search, then shrunk) in which one rule decides the outcome,
# so that a port breaking that rule fails at least one scenario. ``shows`` is checked by the
# tests: "move: R" (a move for reason R happens), "refused: OP", "released: UNITS" (what
# release_stuck aborts), "placed: UNIT BUFFER" (where UNIT is occupied), "aborted" (a closing
# abort).
SCENARIOS: dict[str, tuple[Config, str, str]] = {
    "seed-example": (Config(1, 4, max_concurrency=6),
                     ("reserve A B C D E F G; occupy A; reserve G; occupy D; reserve H; occupy C; "
                     "reserve I; occupy E; consume; occupy F G; publish; reserve I J K L; "
                     "occupy J H K B; consume; occupy L I; publish; consume; publish"),
                     "batches A,C,D,E / B,F,G,H / I,J,K,L with staleness 0, 1, 1"),
    "sync": (Config(0, 2), ("reserve A B C; occupy B A; consume; reserve C; publish; reserve C D; "
                           "occupy C D; consume; publish"), "refused: reserve"),
    "shift": (Config(1, 2), "reserve A B C D; occupy A; occupy D", "move: shift"),
    "relabel": (Config(3, 2), ("reserve A B; occupy A; reserve C; occupy C; reserve D; consume; "
                              "publish; reserve E F G; occupy B; occupy E"), "move: relabel"),
    "relabel-first-of-run": (Config(2, 3),
                             ("reserve A B C; occupy A; reserve D; occupy B C D; reserve E F G; "
                             "consume; publish; reserve H I J K; occupy E; abort I"),
                             "move: relabel"),
    "abort-shift": (Config(1, 2), "reserve A B C D; abort A; reserve E; occupy E",
                    "move: shift"),
    "filter-fill": (Config(1, 2), ("reserve A; occupy A; reserve B; occupy B; filter A; "
                                  "reserve C; occupy C; consume"), "move: fill"),
    "release-stuck": (Config(1, 2), ("reserve A B C D; occupy D B A; reserve E; consume; "
                                    "publish; reserve E; occupy E; release_stuck"),
                      "released: C"),
    "release-stuck-all": (Config(2, 3),
                          ("reserve A; occupy A; reserve B C; occupy C; reserve D E F G; "
                          "occupy F B; reserve H; occupy H; reserve I; consume; publish; "
                          "occupy D; consume; publish; release_stuck"), "released: E I G"),
    "consume-waits": (Config(1, 2), "reserve A; occupy A; consume", "refused: consume"),
    "fill-takes-last": (Config(1, 3),
                        ("reserve A; occupy A; reserve B; occupy B; reserve C D; occupy C D; "
                        "reserve E; consume; reserve F; publish; reserve G; occupy G; "
                        "reserve H; occupy H; filter D"), "move: fill"),
    "oversampling-close": (Config(2, 2, capacity=3),
                           ("reserve A; occupy A; reserve B C; occupy B; reserve D E; filter A; "
                           "occupy D; reserve F G H; consume; publish; abort F; "
                           "reserve I J K L; occupy C; occupy K"), "move: close"),
    "oversampling-ready-is-closed": (Config(1, 2, capacity=3),
                                     "reserve A B; occupy B; reserve C D E; occupy E; reserve F",
                                     "refused: reserve"),
    "oversampling-place-not-in-ready": (Config(1, 2, capacity=3),
                                        "reserve A; occupy A; reserve B C; occupy C; occupy B",
                                        "placed: B 1"),
    "oversampling-abort": (Config(1, 2, capacity=3),
                           "reserve A B C D E; occupy D; reserve F; occupy E", "aborted"),
}


def _vector(vid: str, family: str, config: Config, events: list[dict[str, Any]],
            **extra: Any) -> str:
    records = [{k: v for k, v in e.items() if k != "seq"} for e in events]
    return dumps({"id": vid, "family": family, **extra,
                  "config": header(config)["config"], "events": records})


def spec_scenario(path: Path) -> tuple[Config, list[Step], dict[str, Any]]:
    """A spec/scenarios file as a config and the script of its controller operations."""
    data = json.loads(path.read_text())
    c = data["config"]
    config = Config(c["max_staleness"], c["batch_size"], c.get("capacity"),
                    c.get("max_concurrency"), c.get("streaming", False))
    script = [(s["op"], s["unit"]) if "unit" in s else (s["op"],) for s in data["steps"]
              if s["op"] in _CONTROLLER_OPS and "error" not in s]
    return config, script, data


def generate(family: str, count: int | None = None) -> Iterator[str]:
    """The family's vectors as JSON lines (deterministic)."""
    if family in ("spec", "streaming"):
        for path in sorted(SPEC_SCENARIOS.glob("*.json")):
            config, script, data = spec_scenario(path)
            if config.streaming != (family == "streaming"):
                continue
            rec = play(StalenessController(config), script)
            if family == "streaming":
                yield _vector(f"streaming/spec-{path.stem}", family, config, rec.records,
                              source=data.get("source", ""))
                continue
            yield _vector(f"spec/{path.stem}", "spec", config, rec.records,
                          source=data.get("source", ""))
        if family == "spec":
            return
    if family == "scenarios":
        for name, (config, script, shows) in SCENARIOS.items():
            rec = play(StalenessController(config), _letters(script))
            yield _vector(f"scenarios/{name}", "scenarios", config, rec.records, shows=shows)
        return
    fam = FAMILIES[family]
    for seed in range(fam.count if count is None else count):
        config, profile = fam.pick(random.Random(f"{family}/{seed}"))
        rec = drive(StalenessController(config), seed, profile, reraise=True)
        yield _vector(f"{family}/{seed:05d}", family, config, rec.records, seed=seed)


def family_names() -> list[str]:
    return ["spec", "scenarios", *FAMILIES]


def family_text(family: str) -> bytes:
    return "".join(line + "\n" for line in generate(family)).encode()


def path_for(family: str, directory: Path = CORPUS_DIR) -> Path:
    return directory / f"{family}.jsonl.xz"


MAX_FAMILY_BYTES = 256 << 20  # decompressed; the largest committed family is ~12 MB


class CorpusError(ValueError):
    """A corpus file (``--dir`` may point anywhere) is not a valid family of vectors."""


def read_text(path: Path) -> bytes:
    """A family file, decompressed; at most ``MAX_FAMILY_BYTES`` (an xz bomb is refused)."""
    try:  # the compressed file is refused at the same size: no family is near it
        packed = inputs.read_bounded(path, MAX_FAMILY_BYTES, "corpus file")
    except inputs.FileInputError as exc:
        if not path.exists():  # the callers report a missing family as such
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)) from None
        raise CorpusError(str(exc)) from None
    decompressor = lzma.LZMADecompressor()
    text = decompressor.decompress(packed, max_length=MAX_FAMILY_BYTES + 1)
    if len(text) > MAX_FAMILY_BYTES:
        raise CorpusError(f"{path}: decompresses to more than {MAX_FAMILY_BYTES >> 20} MB")
    if not decompressor.eof:
        raise lzma.LZMAError(f"{path}: compressed data ended before the end-of-stream marker")
    return text


def write_family(family: str, text: bytes, directory: Path = CORPUS_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    atomic_io.write_bytes(path_for(family, directory),
                        lzma.compress(text, preset=9 | lzma.PRESET_EXTREME))


def manifest_entry(name: str, text: bytes) -> dict[str, Any]:
    """What MANIFEST.json records of a family's decompressed text."""
    return {"file": path_for(name, Path(".")).name,
            "vectors": text.count(b"\n"),
            "events": sum(len(json.loads(line)["events"]) for line in text.splitlines()),
            "sha256": hashlib.sha256(text).hexdigest()}


def manifest(texts: dict[str, bytes]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": GENERATOR,
        "families": {name: manifest_entry(name, text) for name, text in texts.items()},
    }


MANIFEST_NAME = "MANIFEST.json"
_ENTRY_FIELDS = {"file": str, "vectors": int, "events": int, "sha256": str}


def read_manifest(directory: Path = CORPUS_DIR) -> dict[str, dict[str, Any]]:
    """MANIFEST.json's families (name -> file, vectors, events, sha256), checked for form;
    ``CorpusError`` naming the file if it is missing or malformed."""
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise CorpusError(f"{path}: missing, so the corpus's files cannot be checked (a "
                          f"corpus directory holds MANIFEST.json with each family's counts and "
                          f"SHA-256; `--regenerate --dir {directory}` writes one)")
    try:
        data = inputs.json_file(path, "the manifest")
    except inputs.InputError as exc:
        raise CorpusError(str(exc)) from None
    families = data.get("families") if isinstance(data, dict) else None
    if not isinstance(families, dict):
        raise CorpusError(f"{path}: not a corpus manifest (no 'families' object)")
    for name, entry in families.items():
        if not isinstance(entry, dict) or any(
                not isinstance(entry.get(k), t) or isinstance(entry.get(k), bool)
                for k, t in _ENTRY_FIELDS.items()):
            raise CorpusError(f"{path}: family {name!r} must have "
                              f"{', '.join(_ENTRY_FIELDS)} (got {entry!r:.200})")
    return families


def verified_text(family: str, directory: Path = CORPUS_DIR,
                  families: dict[str, dict[str, Any]] | None = None,
                  text: bytes | None = None) -> bytes:
    """A family's decompressed text, checked against MANIFEST.json: its SHA-256 and vector
    count are the ones recorded, and it holds at least one vector. ``CorpusError`` otherwise
    (``FileNotFoundError``, ``lzma.LZMAError`` for a missing or damaged file)."""
    path = path_for(family, directory)
    text = read_text(path) if text is None else text
    entries = read_manifest(directory) if families is None else families
    entry = entries.get(family)
    where = directory / MANIFEST_NAME
    if entry is None:
        raise CorpusError(f"{where} lists no family {family!r}")
    if hashlib.sha256(text).hexdigest() != entry["sha256"]:
        raise CorpusError(f"{path}: its SHA-256 is not the one {where} records: the file was "
                          f"changed or damaged after the manifest was written")
    vectors = text.count(b"\n")
    if vectors != entry["vectors"]:
        raise CorpusError(f"{path}: {vectors} vectors, but {where} records "
                          f"{entry['vectors']}")
    if not vectors:
        raise CorpusError(f"{path}: holds no vectors (an empty family checks nothing)")
    return text


def load(families: list[str] | None = None,
         directory: Path = CORPUS_DIR) -> Iterator[dict[str, Any]]:
    """The committed vectors, decoded, family by family; each family checked against
    MANIFEST.json first (``verified_text``), each line at most ``TRACE_LINE_BYTES`` and
    decoded with the JSON depth limit."""
    entries = None
    for family in families or family_names():
        path = path_for(family, directory)
        text = read_text(path)  # a missing or damaged file is reported before the manifest
        entries = read_manifest(directory) if entries is None else entries
        text = verified_text(family, directory, entries, text)
        events = 0
        try:
            for number, line in inputs.raw_lines(io.BytesIO(text), inputs.TRACE_LINE_BYTES,
                                                 str(path)):
                try:
                    vector = loads_bounded(line)
                except ValueError as exc:  # not JSON, too deep, not UTF-8
                    raise CorpusError(f"{path}: line {number}: not a JSON vector "
                                      f"({inputs.json_reason(exc)})") from None
                if (not isinstance(vector, dict) or not {"id", "config", "events"} <= set(vector)
                        or not isinstance(vector["events"], list)):
                    raise CorpusError(f"{path}: line {number}: a vector needs 'id', 'config' "
                                      f"and a list of 'events'")
                events += len(vector["events"])
                yield vector
        except inputs.LineTooLong as exc:
            raise CorpusError(str(exc)) from None
        if events != entries[family]["events"]:
            raise CorpusError(f"{path}: {events} events, but {directory / MANIFEST_NAME} "
                              f"records {entries[family]['events']}")
