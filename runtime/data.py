"""Prompts from a local JSONL or Parquet file (or the shipped arithmetic task).

Each record needs a prompt field (``prompt_field``) and, for rewards that check an answer, an
answer field. The prompt is a string, or a conversation: a list of ``{"role", "content"}``
messages (the format TRL and verl data sets use), which ``runtime.prompts`` renders with the
model's chat template once the tokenizer is known. Problems are reported as ``DataError`` naming the file and the line (JSONL) or row
(Parquet), before anything starts.
"""

from __future__ import annotations

import math
from pathlib import Path

from .inputs import DATA_LINE_BYTES, MAX_PROMPT_CHARS, InputError, json_line, text_lines
from .tasks.arithmetic import DATA_FILE
from .tasks.base import Prompt


class DataError(ValueError):
    """The prompt file is missing, unreadable or has a bad record."""


def _prompt(record: object, where: str, index: int, prompt_field: str,
            answer_field: str | None) -> Prompt:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected an object, got {type(record).__name__}")
    text = record.get(prompt_field)
    messages = None
    if isinstance(text, list):
        messages = _messages(text, where, prompt_field)
        text = ""
    elif not isinstance(text, str) or not text:
        raise DataError(f"{where}: field {prompt_field!r} must be a non-empty string or a list "
                        f"of {{\"role\", \"content\"}} messages, got {_short(text)}")
    elif not text.strip():
        raise DataError(f"{where}: field {prompt_field!r} is only whitespace, got "
                        f"{_short(text)}")
    for label, value in ((f"field {prompt_field!r}", text),
                         *((f"{prompt_field}[{i}]", m["content"])
                           for i, m in enumerate(messages or ()))):
        _encodable(value, where, label)
    size = len(text) + sum(len(m["content"]) for m in messages or ())
    if size > MAX_PROMPT_CHARS:
        raise DataError(f"{where}: field {prompt_field!r} is {size:,} characters; at most "
                        f"{MAX_PROMPT_CHARS:,}")
    answer = None
    if answer_field is not None:
        if answer_field not in record:
            raise DataError(f"{where}: missing field {answer_field!r}")
        answer = record[answer_field]
        if isinstance(answer, float) and not math.isfinite(answer):
            raise DataError(f"{where}: field {answer_field!r} is {answer!r}, not a number an "
                            f"answer can equal")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str) or not answer.strip():
            raise DataError(f"{where}: field {answer_field!r} must be a non-empty string or a "
                            f"number, got {_short(answer)}")
        _encodable(answer, where, f"field {answer_field!r}")
    meta = {k: v for k, v in record.items() if k not in (prompt_field, answer_field)}
    return Prompt(text, answer, index, meta, messages, source=where)


def _encodable(text: str, where: str, label: str) -> None:
    """JSON's ``"\\ud800"`` escape decodes to a lone surrogate, which is no Unicode text: the
    tokenizer would fail on it mid-run, so it is refused here, naming the line."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(f"{where}: {label} holds a lone surrogate "
                        f"(\\u{ord(text[exc.start]):04x} at character "
                        f"{exc.start}), not Unicode text") from None


ROLES = ("system", "user", "assistant", "tool")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _messages(value: list, where: str, prompt_field: str) -> tuple[dict[str, str], ...]:
    if not value:
        raise DataError(f"{where}: field {prompt_field!r} is an empty conversation")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content"), str):
            raise DataError(f"{where}: {prompt_field}[{i}] must be an object with string "
                            f"'role' and 'content', got {_short(m)}")
        if m["role"] not in ROLES:
            raise DataError(f"{where}: {prompt_field}[{i}] has role {m['role']!r}; expected "
                            f"one of {', '.join(ROLES)}")
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["content"].strip() for m in out):
        raise DataError(f"{where}: field {prompt_field!r} is a conversation with no text (every "
                        f"message's content is empty or whitespace)")
    if out[-1]["role"] == "assistant":
        raise DataError(f"{where}: {prompt_field} ends with an assistant message; a prompt "
                        f"ends with the turn the model answers")
    return tuple(out)


def load_prompts(path: str | Path | None = None, prompt_field: str = "prompt",
                 answer_field: str | None = "answer", limit: int | None = None) -> list[Prompt]:
    """Load prompts from ``path`` (``.jsonl``/``.json`` lines or ``.parquet``); None: the
    shipped arithmetic task. Blank JSONL lines are skipped."""
    path = Path(path) if path is not None else DATA_FILE
    if path.is_dir():
        raise DataError(f"{path}: is a directory, not a file of prompts")
    if not path.exists():
        raise DataError(f"{path}: no such file")
    if not path.is_file():  # a device, a fifo, a socket: never opened (a fifo would block)
        raise DataError(f"{path}: not a regular file")
    out: list[Prompt] = []
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(
                f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises several unrelated types
            raise DataError(f"{path}: not a readable Parquet file ({exc})") from None
        for i, row in enumerate(rows):
            out.append(_prompt(row, f"{path} row {i}", i, prompt_field, answer_field))
            if limit is not None and len(out) >= limit:
                break
    else:
        try:
            out = _read_jsonl(path, prompt_field, answer_field, limit)
        except InputError as exc:  # unreadable, not UTF-8, a line too long or not JSON
            raise DataError(str(exc)) from None
    if not out:
        raise DataError(f"{path}: no prompts")
    return out


def _read_jsonl(path: Path, prompt_field: str, answer_field: str | None,
                limit: int | None) -> list[Prompt]:
    """Each line read with a bounded ``readline`` (at most ``DATA_LINE_BYTES``) and decoded
    with a depth limit, so a huge or deeply nested line is one error naming it."""
    out: list[Prompt] = []
    for lineno, line in text_lines(path, DATA_LINE_BYTES, "data.path"):
        if not line.strip():
            continue
        record = json_line(line, path, lineno)
        out.append(_prompt(record, f"{path}:{lineno}", len(out), prompt_field, answer_field))
        if limit is not None and len(out) >= limit:
            break
    return out
