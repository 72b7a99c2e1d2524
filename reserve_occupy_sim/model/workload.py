"""Workloads: the prompt groups a simulation draws from, read from a workload file or generated.

Workload file (JSONL, one GRPO group per line)::

    {"group": "q-00017", "prompt_len": 212, "response_lens": [5120, 3301, 38912, ...]}

``group`` is any string or integer id, ``prompt_len`` an integer >= 1, ``response_lens`` a
non-empty list of integers >= 1 (one per trajectory). Every group must have the same number of
responses (the group size). Blank lines and lines starting with ``#`` are skipped. A malformed
line raises ``WorkloadError`` naming the line number and what is wrong.

The default generator is *synthetic*: it mimics the shape the source describes for its
dapo-math-17k run with Qwen3-8B (1024 groups of 8, prompts <= 1024 tokens, responses <= 38,912
tokens with a heavy tail, lengths correlated within a group, a point mass at the cap). Its
parameters are assumptions, documented in docs/simulator.md; it is not the source's data.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from runtime import atomic_io
from reserve_occupy.trace import loads_bounded

from runtime.inputs import DATA_LINE_BYTES, FileInputError, json_reason, text_lines


class WorkloadError(ValueError):
    """A workload file line is malformed. ``line`` is 1-based (0: the file as a whole)."""

    def __init__(self, path: str, line: int, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class GroupSpec:
    """One prompt group: its id, prompt length and the response length of each trajectory."""

    group: str | int
    prompt_len: int
    response_lens: tuple[int, ...]
    # Extra candidates of the same prompt, for group-level oversampling (``candidate_lens``).
    # (Neither is part of a workload file, so neither takes part in equality.)
    spare_lens: tuple[int, ...] = field(default=(), compare=False)
    # Mean response length of this prompt's group in an earlier epoch (None: never seen).
    hint: float | None = field(default=None, compare=False)

    def candidate_lens(self, k: int) -> tuple[int, ...]:
        """Response lengths of ``k >= len(response_lens)`` candidates of this prompt: the group's
        own, then its spares, then (workload files have none) the group's own lengths again, cycled
        from a seeded shuffle so the result is deterministic."""
        n = len(self.response_lens)
        if k <= n:
            return self.response_lens[:k]
        out = self.response_lens + self.spare_lens[: k - n]
        if len(out) < k:
            rng = np.random.default_rng([zlib.crc32(str(self.group).encode()), k])
            pool = list(rng.permutation(self.response_lens))
            out += tuple(int(pool[i % n]) for i in range(k - len(out)))
        return out


@dataclass(frozen=True)
class Workload:
    """An ordered list of groups; a simulation admits them in order and wraps around."""

    name: str
    groups: tuple[GroupSpec, ...]

    @property
    def group_size(self) -> int:
        return len(self.groups[0].response_lens)

    def __len__(self) -> int:
        return len(self.groups)

    def stats(self) -> dict[str, float]:
        """Summary numbers of the length distributions (for docs and JSON)."""
        resp = np.array([r for g in self.groups for r in g.response_lens], dtype=np.float64)
        prompts = np.array([g.prompt_len for g in self.groups], dtype=np.float64)
        per_group = resp.reshape(len(self.groups), self.group_size)
        cap = resp.max()
        logs = np.log(per_group)
        # Share of the variance of log-length that lies between groups (intra-class correlation).
        between = logs.mean(axis=1).var()
        within = logs.var(axis=1, ddof=1).mean() if self.group_size > 1 else 0.0
        icc = (between - within / self.group_size) / max(between - within / self.group_size
                                                          + within, 1e-12)
        return {
            "groups": float(len(self.groups)),
            "group_size": float(self.group_size),
            "prompt_mean": float(prompts.mean()),
            "prompt_max": float(prompts.max()),
            "response_mean": float(resp.mean()),
            "response_median": float(np.median(resp)),
            "response_p90": float(np.percentile(resp, 90)),
            "response_p99": float(np.percentile(resp, 99)),
            "response_max": float(cap),
            "fraction_at_max": float((resp == cap).mean()),
            "group_max_mean": float(per_group.max(axis=1).mean()),
            "log_length_icc": float(icc),
        }


# ------------------------------------------------------------------------ workload files ----

def _int_field(record: dict, key: str, path: str, lineno: int) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(path, lineno, f"{key!r} must be an integer, got {value!r}")
    if value < 1:
        raise WorkloadError(path, lineno, f"{key!r} must be >= 1, got {value}")
    return value


def parse_workload(lines: Iterable[str], path: str = "<workload>") -> Workload:
    """Parse JSONL workload lines (see the module docstring); raise ``WorkloadError`` on the first
    malformed line."""
    groups: list[GroupSpec] = []
    seen: dict[str | int, int] = {}
    size: int | None = None
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            record = loads_bounded(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(path, lineno, json_reason(exc)) from None
        if not isinstance(record, dict):
            raise WorkloadError(path, lineno, f"must be a JSON object, got {type(record).__name__}")
        for key in ("group", "prompt_len", "response_lens"):
            if key not in record:
                raise WorkloadError(path, lineno, f"missing field {key!r}")
        extra = sorted(set(record) - {"group", "prompt_len", "response_lens"})
        if extra:
            raise WorkloadError(path, lineno, f"unknown field {extra[0]!r} (expected group, "
                                              f"prompt_len, response_lens)")
        gid = record["group"]
        if isinstance(gid, bool) or not isinstance(gid, (str, int)):
            raise WorkloadError(path, lineno, f"'group' must be a string or integer, got {gid!r}")
        if gid in seen:
            raise WorkloadError(path, lineno, f"group {gid!r} already defined on line {seen[gid]}")
        prompt = _int_field(record, "prompt_len", path, lineno)
        lens = record["response_lens"]
        if not isinstance(lens, list) or not lens:
            raise WorkloadError(path, lineno,
                                f"'response_lens' must be a non-empty list, got {lens!r}")
        for i, n in enumerate(lens):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise WorkloadError(path, lineno, f"'response_lens'[{i}] must be an integer >= 1, "
                                                  f"got {n!r}")
        if size is None:
            size = len(lens)
        elif len(lens) != size:
            raise WorkloadError(path, lineno, f"group {gid!r} has {len(lens)} responses but "
                                              f"earlier groups have {size} (the group size must "
                                              f"be fixed)")
        seen[gid] = lineno
        groups.append(GroupSpec(gid, prompt, tuple(lens)))
    if not groups:
        raise WorkloadError(path, 0, "no groups (the file is empty or only comments)")
    return Workload(Path(path).name, tuple(groups))


def load_workload(path: str | Path) -> Workload:
    """A workload file, read line by line (a line longer than ``DATA_LINE_BYTES`` is refused
    after that many bytes)."""
    p = Path(path)
    try:
        return parse_workload((text for _, text in text_lines(p, DATA_LINE_BYTES, "workload")),
                              str(p))
    except FileInputError as exc:
        raise WorkloadError(str(p), exc.line, exc.reason) from None


def write_workload(workload: Workload, path: str | Path) -> None:
    with atomic_io.atomic(path) as fh:
        for g in workload.groups:
            fh.write(json.dumps({"group": g.group, "prompt_len": g.prompt_len,
                                 "response_lens": list(g.response_lens)}) + "\n")


# The older names, from before "trace" meant only the event log's format (reserve_occupy.trace);
# kept so that code written against them still imports.
TraceError, parse_trace, load_trace, write_trace = (
    WorkloadError, parse_workload, load_workload, write_workload)


def iter_lines(workload: Workload) -> Iterator[str]:
    for g in workload.groups:
        yield json.dumps({"group": g.group, "prompt_len": g.prompt_len,
                          "response_lens": list(g.response_lens)})


# --------------------------------------------------------------------------- the generator --

@dataclass(frozen=True)
class MathReasoningShape:
    """Parameters of the synthetic math-reasoning workload (all assumptions; see docs).

    Response length of trajectory j of group g: ``exp(log(median) + sd_group*z_g + sd_resp*z_gj)``
    clipped to ``[min_response, max_response]``; with probability
    ``sigmoid(logit(truncated) + truncated_slope*z_g)`` the response runs to ``max_response``
    instead (a reasoning loop cut at the cap), so hard groups are long and truncate more often.
    """

    groups: int = 1024
    group_size: int = 8
    prompt_median: float = 160.0
    prompt_sd: float = 0.5
    max_prompt: int = 1024
    min_prompt: int = 24
    response_median: float = 4500.0
    sd_group: float = 0.55
    sd_resp: float = 0.5
    truncated: float = 0.03
    truncated_slope: float = 1.2
    max_response: int = 38912
    min_response: int = 64


def _responses(rng: np.random.Generator, s: MathReasoningShape, z_g: np.ndarray,
               p_cut: np.ndarray, n: int) -> np.ndarray:
    """``n`` more responses per group, with the groups' difficulties ``z_g``."""
    z_r = rng.standard_normal((len(z_g), n))
    lens = np.exp(math.log(s.response_median) + s.sd_group * z_g[:, None] + s.sd_resp * z_r)
    cut = rng.random((len(z_g), n)) < p_cut[:, None]
    return np.where(cut, s.max_response, np.clip(np.rint(lens), s.min_response, s.max_response))


def generate(seed: int = 0, shape: MathReasoningShape | None = None) -> Workload:
    """A seeded synthetic workload (numpy ``default_rng(seed)``; same seed, same workload)."""
    s = shape or MathReasoningShape()
    if s.groups < 1 or s.group_size < 1:
        raise ValueError("groups and group_size must be >= 1")
    rng = np.random.default_rng(seed)
    z_g = rng.standard_normal(s.groups)
    z_r = rng.standard_normal((s.groups, s.group_size))
    lens = np.exp(math.log(s.response_median) + s.sd_group * z_g[:, None] + s.sd_resp * z_r)
    logit = math.log(s.truncated / (1 - s.truncated)) + s.truncated_slope * z_g
    p_cut = 1.0 / (1.0 + np.exp(-logit))
    cut = rng.random((s.groups, s.group_size)) < p_cut[:, None]
    lens = np.where(cut, s.max_response, np.clip(np.rint(lens), s.min_response, s.max_response))
    prompts = np.exp(math.log(s.prompt_median) + s.prompt_sd * rng.standard_normal(s.groups))
    prompts = np.clip(np.rint(prompts), s.min_prompt, s.max_prompt)
    # Separate streams, drawn after the main one so the groups above do not change: spare
    # candidates of each prompt (group-level oversampling) and the prompt's previous epoch (its
    # mean response length is the hint of length-aware admission). Both keep the prompt's
    # difficulty z_g and draw fresh per-response noise and truncation.
    spares = _responses(np.random.default_rng([seed, 1]), s, z_g, p_cut, s.group_size)
    previous = _responses(np.random.default_rng([seed, 2]), s, z_g, p_cut, s.group_size)
    groups = tuple(GroupSpec(i, int(prompts[i]), tuple(int(x) for x in lens[i]),
                             spare_lens=tuple(int(x) for x in spares[i]),
                             hint=float(previous[i].mean()))
                   for i in range(s.groups))
    return Workload(f"synthetic-math(seed={seed})", groups)
