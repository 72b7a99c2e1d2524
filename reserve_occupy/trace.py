"""The trace format: protocol events as JSON-able dicts, and their validation.

A trace is JSON Lines. Line 1 is a header naming the format, its ``schema_version`` and the
``Config``; every later line is one protocol event (docs/porting/trace-format.md documents each
field; spec/trace.schema.json states the same rules as a JSON Schema). This module converts
between the core's ``Event`` and those dicts and validates dicts written by *any* implementation,
raising ``TraceFormatError`` that names the line and the field. Pure: it never opens a file; the
caller reads lines and hands them in.

Why validation is written out by hand rather than with ``jsonschema``: the core depends on
nothing but ``transitions``, and the checker must name the line and field in words a porter can
act on. The tests validate the same traces with ``jsonschema`` against the schema file so the two
cannot drift apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from itertools import accumulate, repeat
from operator import sub
from typing import Any, NamedTuple

from .config import Config
from .errors import ConfigError, ProtocolError
from .types import Batch, BatchUnit, Event, Move, MoveReason, SlotRef

FORMAT = "reserve-occupy-trace"
SCHEMA_VERSION = 1

OPS = ("reserve", "occupy", "abort", "filter", "release_stuck", "consume", "publish", "stream")
# Operations a controller may refuse without changing state (admission waits, nothing READY,
# head not STUCK, nothing new to stream). The core logs no event for a refusal; a trace may log
# one with refused=true.
REFUSABLE = frozenset({"reserve", "consume", "release_stuck", "stream"})
_UNIT_OPS = frozenset({"reserve", "occupy", "abort", "filter"})
_COMMON = frozenset({"op", "seq", "version", "head", "t", "meta"})
# op -> fields it may carry besides the common ones. Absent optional fields mean "not logged"
# and are not compared, except ``aborted``, where absent means "none".
_FIELDS: dict[str, frozenset[str]] = {
    "reserve": frozenset({"unit", "v_traj", "slot", "refused"}),
    "occupy": frozenset({"unit", "v_traj", "slot", "moves", "aborted", "served"}),
    "abort": frozenset({"unit", "slot", "moves", "aborted"}),
    "filter": frozenset({"unit", "slot", "moves", "aborted"}),
    "release_stuck": frozenset({"moves", "aborted", "refused"}),
    "consume": frozenset({"batch", "refused"}),
    "publish": frozenset(),
    "stream": frozenset({"batch", "refused"}),  # batch: the units handed, version = head
}
_CONFIG_FIELDS = ("max_staleness", "batch_size", "capacity", "max_concurrency")
# Written to a header only when on, so that a trace without streaming reads as before.
_FLAG_FIELDS = ("streaming",)
# The STUCK release's options (spec/PROTOCOL.md §6.2): written only when not the default, so a
# trace of the source protocol reads as before.
_STUCK_FIELDS = {"stuck_action": "release", "stuck_threshold": None}
_REASONS = {r.value: r for r in MoveReason}


class TraceFormatError(ProtocolError, ValueError):
    """A trace line is not valid JSON or breaks the trace format. ``line`` is 1-based (0 when
    unknown), ``field`` the offending field (None for the line as a whole)."""

    def __init__(self, line: int, field: str | None, message: str) -> None:
        self.line = line
        self.field = field
        self.reason = message
        where = f"line {line}" if line else "trace"
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


class TraceEntry(NamedTuple):
    """One validated event line. ``event`` carries what the line says (absent fields are None
    or empty); ``logged`` names the fields the line actually had, so a comparison can skip what
    an implementation did not log (``"batch.streamed"`` when a consume's batch logs
    ``streamed``, even empty: an empty list says "none streamed", absent says "not logged"). ``refused``: the operation was refused (reserve waits,
    nothing to consume, nothing to release) and changed nothing. ``served``: on an occupy, the
    weight versions the generators actually used for the unit's first and last token, when the
    implementation logs them (the core does not know them)."""

    line: int
    event: Event
    logged: frozenset[str]
    refused: bool = False
    served: tuple[int, int] | None = None  # occupy: weight versions of the first/last token

    @property
    def op(self) -> str:
        return self.event.op


# --------------------------------------------------------------------- Event -> dict ------

def _slot(ref: SlotRef) -> list[int] | int:
    return ref.buffer if ref.index is None else [ref.buffer, ref.index]


def header(config: Config, producer: str | None = None,
           granularity: str = "slot") -> dict[str, Any]:
    """The first line of a trace: format, schema version and the controller's parameters."""
    out: dict[str, Any] = {
        "op": "config",
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "config": {name: getattr(config, name) for name in _CONFIG_FIELDS},
    }
    for name in _FLAG_FIELDS:
        if getattr(config, name):
            out["config"][name] = True
    for name, default in _STUCK_FIELDS.items():
        if getattr(config, name) != default:
            out["config"][name] = getattr(config, name)
    if granularity != "slot":
        out["granularity"] = granularity
    if producer is not None:
        out["producer"] = producer
    return out


def event_to_record(event: Event) -> dict[str, Any]:
    """The trace line for one core ``Event`` (every field the core knows is logged)."""
    op = event.op
    out: dict[str, Any] = {"op": op, "seq": event.seq, "version": event.version,
                           "head": event.head}
    if op in _UNIT_OPS:
        out["unit"] = event.unit_id
    if op in ("reserve", "occupy"):
        out["v_traj"] = event.v_traj
    if event.slot is not None:
        out["slot"] = _slot(event.slot)
    if op in ("occupy", "abort", "filter", "release_stuck"):
        out["moves"] = [{"unit": m.unit_id, "from": _slot(m.src), "to": _slot(m.dst),
                         "reason": m.reason.value} for m in event.moves]
        out["aborted"] = list(event.aborted)
    if op in ("consume", "stream"):
        b = event.batch
        out["batch"] = {"version": b.version,  # type: ignore[union-attr]
                        "units": [{"unit": u.unit_id, "v_traj": u.v_traj,
                                   "staleness": u.staleness} for u in b.units]}  # type: ignore
        if b.streamed:  # type: ignore[union-attr]
            out["batch"]["streamed"] = list(b.streamed)  # type: ignore[union-attr]
    return out


def refused_record(op: str, unit_id: object = None, version: int | None = None,
                   head: int | None = None) -> dict[str, Any]:
    """The trace line for a refused operation (the core logs no event for it)."""
    if op not in REFUSABLE:
        raise ValueError(f"{op!r} cannot be refused (only {sorted(REFUSABLE)})")
    out: dict[str, Any] = {"op": op}
    if version is not None:
        out["version"] = version
    if head is not None:
        out["head"] = head
    if op == "reserve":
        out["unit"] = unit_id
    out["refused"] = True
    return out


def trace_records(config: Config, events: Iterable[Event],
                  producer: str | None = None) -> Iterator[dict[str, Any]]:
    """Header, then one record per event: the core's ``.events`` as a trace."""
    yield header(config, producer)
    for event in events:
        yield event_to_record(event)


def dumps(record: dict[str, Any]) -> str:
    """One trace line (compact, no trailing newline)."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------- validation ---------

def _int(line: int, field: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(line, field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise TraceFormatError(line, field, f"must be >= {minimum}, got {value}")
    return value


def _unit(line: int, field: str, value: object) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TraceFormatError(line, field, f"a unit id must be a string or an integer, "
                                            f"got {value!r}")
    return value


def _slot_ref(line: int, field: str, value: object) -> SlotRef:
    # A bare buffer number is allowed: an implementation that keeps per-buffer counters rather
    # than slot arrays has no slot index to log. The index is then None and not compared.
    if isinstance(value, int) and not isinstance(value, bool):
        return SlotRef(_int(line, field, value), None)  # type: ignore[arg-type]
    if not isinstance(value, list) or len(value) != 2:
        raise TraceFormatError(line, field, f"must be [buffer, index] or a buffer number, "
                                            f"got {value!r}")
    return SlotRef(_int(line, field, value[0]), _int(line, field, value[1]))


def _obj(line: int, field: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TraceFormatError(line, field, f"must be an object, got {value!r}")
    return value


def _list(line: int, field: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TraceFormatError(line, field, f"must be a list, got {value!r}")
    return value


def _moves(line: int, value: object) -> tuple[Move, ...]:
    out = []
    for k, item in enumerate(_list(line, "moves", value)):
        f = f"moves[{k}]"
        m = _obj(line, f, item)
        extra = set(m) - {"unit", "from", "to", "reason"}
        if extra:
            raise TraceFormatError(line, f, f"unknown field {min(extra)!r}")
        for key in ("unit", "from", "to", "reason"):
            if key not in m:
                raise TraceFormatError(line, f, f"missing {key!r}")
        if not isinstance(m["reason"], str) or m["reason"] not in _REASONS:
            raise TraceFormatError(line, f + ".reason",
                                   f"must be one of {sorted(_REASONS)}, got {m['reason']!r}")
        out.append(Move(_unit(line, f + ".unit", m["unit"]),
                        _slot_ref(line, f + ".from", m["from"]),
                        _slot_ref(line, f + ".to", m["to"]), _REASONS[m["reason"]]))
    return tuple(out)


def _batch(line: int, value: object) -> Batch:
    b = _obj(line, "batch", value)
    extra = set(b) - {"version", "units", "streamed"}
    if extra:
        raise TraceFormatError(line, "batch", f"unknown field {min(extra)!r}")
    if "version" not in b:
        raise TraceFormatError(line, "batch.version", "missing (the version this batch trains "
                                                      "from: 0 for the first batch)")
    if "units" not in b:
        raise TraceFormatError(line, "batch.units", "missing")
    version = _int(line, "batch.version", b["version"])
    units = []
    for k, item in enumerate(_list(line, "batch.units", b["units"])):
        f = f"batch.units[{k}]"
        u = _obj(line, f, item)
        extra = set(u) - {"unit", "v_traj", "staleness"}
        if extra:
            raise TraceFormatError(line, f, f"unknown field {min(extra)!r}")
        if "unit" not in u:
            raise TraceFormatError(line, f + ".unit", "missing")
        v_traj = _int(line, f + ".v_traj", u["v_traj"]) if "v_traj" in u else None
        stale = u.get("staleness")
        if stale is not None:
            if isinstance(stale, bool) or not isinstance(stale, int):
                raise TraceFormatError(line, f + ".staleness", f"must be an integer, got {stale!r}")
            if v_traj is not None and stale != version - v_traj:
                raise TraceFormatError(line, f + ".staleness",
                                       f"is {stale} but batch.version - v_traj = "
                                       f"{version - v_traj}")
        elif v_traj is not None:
            stale = version - v_traj
        units.append(BatchUnit(_unit(line, f + ".unit", u["unit"]), v_traj, stale))  # type: ignore
    streamed = (tuple(_unit(line, f"batch.streamed[{k}]", u)
                      for k, u in enumerate(_list(line, "batch.streamed", b["streamed"])))
                if "streamed" in b else ())
    return Batch(version, tuple(units), streamed)


class TraceHeader(NamedTuple):
    """The first line of a trace. ``granularity``: "slot" when placements are logged as
    [buffer, index], "buffer" when the implementation tracks buffers only."""

    config: Config
    granularity: str = "slot"
    producer: str | None = None


def parse_config(obj: object, line: int = 1) -> Config:
    """The ``Config`` from a trace's header line (already decoded from JSON)."""
    return parse_header(obj, line).config


def parse_header(obj: object, line: int = 1) -> TraceHeader:
    """Validate a trace's header line (already decoded from JSON)."""
    if not isinstance(obj, dict):
        raise TraceFormatError(line, None, "the first line must be the header object")
    h: dict[str, Any] = obj
    if h.get("op") != "config":
        raise TraceFormatError(line, "op", f"the first line must be the header with op "
                                           f"'config', got {h.get('op')!r}")
    if h.get("format", FORMAT) != FORMAT:
        raise TraceFormatError(line, "format", f"must be {FORMAT!r}, got {h.get('format')!r}")
    if "schema_version" not in h:
        raise TraceFormatError(line, "schema_version", "missing")
    version = _int(line, "schema_version", h["schema_version"], 1)
    if version > SCHEMA_VERSION:
        raise TraceFormatError(line, "schema_version",
                               f"is {version}, newer than this checker's {SCHEMA_VERSION}: "
                               f"upgrade reserve-occupy")
    granularity = h.get("granularity", "slot")
    if granularity not in ("slot", "buffer"):
        raise TraceFormatError(line, "granularity", f"must be 'slot' or 'buffer', got "
                                                    f"{granularity!r}")
    extra = set(h) - {"op", "format", "schema_version", "config", "producer", "granularity",
                      "t", "meta"}
    extra = {k for k in extra if not k.startswith("x_")}
    if extra:
        raise TraceFormatError(line, min(extra), "unknown header field")
    c = _obj(line, "config", h.get("config"))
    unknown = set(c) - set(_CONFIG_FIELDS) - set(_FLAG_FIELDS) - set(_STUCK_FIELDS)
    if unknown:
        raise TraceFormatError(line, "config." + min(unknown), "unknown config field")
    for name in ("max_staleness", "batch_size"):
        if name not in c:
            raise TraceFormatError(line, "config." + name, "missing")
    try:
        config = Config(**{k: c.get(k) for k in _CONFIG_FIELDS},
                        **{k: c[k] for k in (*_FLAG_FIELDS, *_STUCK_FIELDS) if k in c})
    except ConfigError as exc:
        raise TraceFormatError(line, "config." + exc.field, exc.requirement) from None
    producer = h.get("producer")
    if producer is not None and not isinstance(producer, str):
        raise TraceFormatError(line, "producer", f"must be a string, got {producer!r}")
    return TraceHeader(config, granularity, producer)


def parse_record(obj: object, line: int) -> TraceEntry:
    """Validate one decoded event line and turn it into a ``TraceEntry``."""
    if not isinstance(obj, dict):
        raise TraceFormatError(line, None, f"an event line must be a JSON object, got {obj!r}")
    r: dict[str, Any] = obj
    op = r.get("op")
    if not isinstance(op, str) or op not in _FIELDS:
        hint = " (only the first line may be the header)" if op == "config" else ""
        raise TraceFormatError(line, "op", f"must be one of {list(OPS)}, got {op!r}{hint}")
    allowed = _FIELDS[op] | _COMMON
    for key in r:
        if key not in allowed and not key.startswith("x_"):
            raise TraceFormatError(line, key, f"is not a field of a {op!r} event")
    refused = r.get("refused", False)
    if not isinstance(refused, bool):
        raise TraceFormatError(line, "refused", f"must be true or false, got {refused!r}")
    if refused:
        for key in _FIELDS[op] - {"unit", "refused"}:
            if key in r:
                raise TraceFormatError(line, key, f"a refused {op} has no {key}")
    if op in _UNIT_OPS and "unit" not in r:
        raise TraceFormatError(line, "unit", f"missing (a {op} names its unit)")
    if op == "consume" and not refused and "batch" not in r:
        raise TraceFormatError(line, "batch", "missing (log refused=true for a consume that "
                                              "found nothing READY)")
    if op == "stream" and not refused and "batch" not in r:
        raise TraceFormatError(line, "batch", "missing (the units handed; log refused=true for "
                                              "a stream that handed nothing)")
    seq = _int(line, "seq", r["seq"]) if "seq" in r else line - 2
    version = _int(line, "version", r["version"]) if "version" in r else None
    head = _int(line, "head", r["head"]) if "head" in r else None
    if "t" in r and (isinstance(r["t"], bool) or not isinstance(r["t"], (int, float))):
        raise TraceFormatError(line, "t", f"must be a number (wall time), got {r['t']!r}")
    event = Event(
        seq, op, version, head,  # type: ignore[arg-type]
        unit_id=_unit(line, "unit", r["unit"]) if "unit" in r else None,
        v_traj=_int(line, "v_traj", r["v_traj"]) if "v_traj" in r else None,
        slot=_slot_ref(line, "slot", r["slot"]) if "slot" in r else None,
        moves=_moves(line, r["moves"]) if "moves" in r else (),
        aborted=tuple(_unit(line, f"aborted[{k}]", u)
                      for k, u in enumerate(_list(line, "aborted", r["aborted"])))
        if "aborted" in r else (),
        batch=_batch(line, r["batch"]) if "batch" in r else None,
    )
    batch_streamed = isinstance(r.get("batch"), dict) and "streamed" in r["batch"]
    if op == "stream" and batch_streamed:
        raise TraceFormatError(line, "batch.streamed", "a stream's batch has no 'streamed' (its "
                                                       "units are the units it hands); only a "
                                                       "consume's batch names them")
    served = None
    if "served" in r:
        pair = r["served"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise TraceFormatError(line, "served", f"must be [first, last] weight versions, got "
                                                   f"{pair!r}")
        served = (_int(line, "served", pair[0]), _int(line, "served", pair[1]))
        if served[0] > served[1]:
            raise TraceFormatError(line, "served", f"first version {served[0]} is after the "
                                                   f"last {served[1]}")
    logged = frozenset([k for k in r if k in allowed and k not in ("t", "meta", "refused")]
                       + ["batch.streamed"] * batch_streamed)
    return TraceEntry(line, event, logged, refused, served)


# Deepest nesting of arrays and objects a JSON document may have. A trace record is about 5
# deep (a consume's batch, its units, a slot); every JSON reader of this project (traces, event
# logs, data, workloads, cost models, conformance vectors) takes at most this, so a line nested
# 1,000 deep is an error naming the line, not a ``RecursionError`` of the decoder.
MAX_JSON_DEPTH = 64


class JSONDepthError(json.JSONDecodeError):
    """A JSON document nests arrays and objects deeper than its reader allows. A subclass of
    ``json.JSONDecodeError``, so every handler of undecodable JSON handles it too."""

    def __init__(self, depth: int, max_depth: int) -> None:
        ValueError.__init__(self, f"nested deeper than {max_depth} levels ({depth})")
        self.depth, self.max_depth = depth, max_depth
        self.msg, self.doc, self.pos, self.lineno, self.colno = str(self), "", 0, 1, 1

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.depth, self.max_depth)


class DuplicateKeyError(json.JSONDecodeError):
    """A JSON object gives one key twice. ``json.loads`` keeps the last value without a word,
    so a record could say two things and be read as one of them; every reader of this project
    refuses it. A subclass of ``json.JSONDecodeError`` (every handler of undecodable JSON
    handles it too); ``msg`` names the key, and the line where the document has more than one."""

    def __init__(self, key: str, doc: str, pos: int) -> None:
        json.JSONDecodeError.__init__(self, "", doc, pos)
        where = f" on line {self.lineno}" if "\n" in doc.rstrip("\n") else ""
        self.key, self.msg = key, f"duplicate key {key[:80]!r}{where}"
        self.args = (f"{self.msg} (column {self.colno})",)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.key, self.doc, self.pos)


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object as a dict, or ``_Duplicate`` naming a repeated key."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return obj


def _duplicate_at(text: str) -> tuple[str, int]:
    """(key, position) of the first key given twice in one object of ``text`` (valid JSON that
    has one): decoded again with the pure-Python scanner, whose objects are read here key by
    key, so the repeated key's position is known. Runs only once a duplicate was found."""
    from json.decoder import WHITESPACE, JSONObject, scanstring
    from json.scanner import py_make_scanner

    decoder = json.JSONDecoder()

    def parse_object(s_and_end: tuple[str, int], strict: bool, scan_once: Any, hook: Any,
                     pairs_hook: Any, memo: Any = None) -> Any:
        s, pos = s_and_end
        keys: set[str] = set()
        pos = WHITESPACE.match(s, pos).end()
        while s[pos] == '"':
            key, after = scanstring(s, pos + 1, strict)
            if key in keys:
                raise _Found(key, pos)
            keys.add(key)
            after = WHITESPACE.match(s, after).end() + 1  # the ':'
            _, after = scan_once(s, WHITESPACE.match(s, after).end())
            after = WHITESPACE.match(s, after).end()
            if s[after] != ",":
                break
            pos = WHITESPACE.match(s, after + 1).end()
        return JSONObject(s_and_end, strict, scan_once, hook, pairs_hook, memo)

    class _Found(Exception):
        def __init__(self, key: str, pos: int) -> None:
            self.key, self.pos = key, pos

    decoder.parse_object = parse_object  # type: ignore[assignment]
    decoder.scan_once = py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except _Found as found:
        return found.key, found.pos
    return "", 0  # not reached: the caller found a duplicate


_ESCAPE = re.compile(rb"\\.", re.S)  # a backslash escape in a string (``\"``, ``\\``, ``\n``)
_NOT_MARK = bytes(c for c in range(256) if c not in b'[]{}"')
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # +1 / -1, plus one


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON document ``text`` (brackets in
    strings do not count), in linear time without decoding it. On text that is not JSON the
    figure is a guess; the decoder then reports the syntax error."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)  # now every quote opens or closes a string
    # Keep brackets and quotes. Two adjacent quotes enclose no bracket (an empty string, or
    # the gap between two strings), so dropping them keeps every other quote's parity.
    marks = raw.translate(None, _NOT_MARK).replace(b'""', b"")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])  # the brackets outside strings
    return max(accumulate(map(sub, marks.translate(_STEP), repeat(1))), default=0)


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that refuses a document nested deeper than ``max_depth`` with
    ``JSONDepthError`` (never ``RecursionError``), and one whose object gives a key twice
    with ``DuplicateKeyError``. Bytes must be UTF-8 (``UnicodeDecodeError``
    otherwise). The caller bounds the text's size."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    depth = 0
    if text.count("[") + text.count("{") > max_depth:  # else it cannot be too deep: no scan
        depth = json_depth(text)
    if depth > max_depth:
        raise JSONDepthError(depth, max_depth)
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except RecursionError:  # not reachable within MAX_JSON_DEPTH; kept as a last guard
        raise JSONDepthError(depth, max_depth) from None
    except _Duplicate as dup:
        key, pos = _duplicate_at(text)
        raise DuplicateKeyError(key or dup.key, text, pos) from None


def decode(text: str, line: int) -> object:
    """``loads_bounded`` with the error turned into a ``TraceFormatError`` naming the line."""
    try:
        return loads_bounded(text)
    except JSONDepthError as exc:
        raise TraceFormatError(line, None, f"not valid JSON: {exc.msg}") from None
    except json.JSONDecodeError as exc:
        raise TraceFormatError(line, None, f"not valid JSON ({exc.msg} at column {exc.colno}); "
                                           f"a truncated or corrupted line?") from None


def parse_lines(lines: Iterable[str]) -> tuple[TraceHeader, Iterator[TraceEntry]]:
    """Read a whole trace lazily: the header is parsed now, events as the iterator advances.
    Blank lines are skipped; ``seq`` must increase where it is logged."""
    it = iter(enumerate(lines, 1))
    for number, text in it:
        if text.strip():
            head = parse_header(decode(text, number), number)
            break
    else:
        raise TraceFormatError(0, None, "empty trace: no header line")

    def entries() -> Iterator[TraceEntry]:
        last_seq = -1
        for n, body in it:
            if not body.strip():
                continue
            entry = parse_record(decode(body, n), n)
            if "seq" in entry.logged:
                if entry.event.seq <= last_seq:
                    raise TraceFormatError(n, "seq", f"is {entry.event.seq}, not after the "
                                                     f"previous seq {last_seq}")
                last_seq = entry.event.seq
            yield entry

    return head, entries()
