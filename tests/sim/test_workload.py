"""Workload files (schema, errors naming the line) and the synthetic generator."""

from __future__ import annotations

import numpy as np
import pytest

from reserve_occupy_sim.model.workload import (
    MathReasoningShape,
    WorkloadError,
    generate,
    load_workload,
    parse_workload,
    write_workload,
)

GOOD = '{"group": "a", "prompt_len": 10, "response_lens": [5, 6]}'


@pytest.mark.parametrize("bad, message", [
    ('{"group": "b", "prompt_len": 10, "response_lens": [5, 6]', "not valid JSON"),
    ('[1, 2]', "must be a JSON object"),
    ('{"group": "b", "response_lens": [5, 6]}', "missing field 'prompt_len'"),
    ('{"group": "b", "prompt_len": "10", "response_lens": [5, 6]}',
     "'prompt_len' must be an integer"),
    ('{"group": "b", "prompt_len": 0, "response_lens": [5, 6]}', "'prompt_len' must be >= 1"),
    ('{"group": "b", "prompt_len": 10, "response_lens": []}', "non-empty list"),
    ('{"group": "b", "prompt_len": 10, "response_lens": [5, -1]}', "'response_lens'[1]"),
    ('{"group": "b", "prompt_len": 10, "response_lens": [5, true]}', "'response_lens'[1]"),
    ('{"group": "b", "prompt_len": 10, "response_lens": [5, 6, 7]}', "group size must be fixed"),
    ('{"group": "a", "prompt_len": 10, "response_lens": [5, 6]}', "already defined on line 1"),
    ('{"group": [1], "prompt_len": 10, "response_lens": [5, 6]}', "string or integer"),
    ('{"group": "b", "prompt_len": 10, "response_lens": [5, 6], "x": 1}', "unknown field 'x'"),
])
def test_malformed_line_names_its_number_and_fault(bad, message):
    lines = [GOOD, "# a comment", "", bad]
    with pytest.raises(WorkloadError) as err:
        parse_workload(lines, "t.jsonl")
    assert err.value.line == 4
    assert str(err.value).startswith("t.jsonl:4: ")
    assert message in str(err.value)


def test_empty_and_unreadable_files(tmp_path):
    with pytest.raises(WorkloadError, match="no groups"):
        parse_workload(["# nothing", ""], "e.jsonl")
    with pytest.raises(WorkloadError, match="can't read"):
        load_workload(tmp_path / "missing.jsonl")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WorkloadError, match="UTF-8"):
        load_workload(binary)


def test_round_trip(tmp_path):
    w = generate(3, MathReasoningShape(groups=20))
    path = tmp_path / "w.jsonl"
    write_workload(w, path)
    back = load_workload(path)
    assert back.groups == w.groups


def test_generator_is_seeded_and_has_the_documented_shape():
    a, b, c = generate(0), generate(0), generate(1)
    assert a.groups == b.groups and a.groups != c.groups
    s = a.stats()
    assert s["groups"] == 1024 and s["group_size"] == 8
    assert s["prompt_max"] <= 1024 and s["response_max"] == 38912
    assert 0.02 < s["fraction_at_max"] < 0.1  # a point mass at the cap
    assert s["response_mean"] > 1.3 * s["response_median"]  # heavy right tail
    assert s["log_length_icc"] > 0.3  # lengths correlated within a group
    # the within-group correlation is real: shuffling members across groups destroys it
    lens = np.array([g.response_lens for g in a.groups], dtype=float)
    shuffled = np.random.default_rng(0).permutation(lens.ravel()).reshape(lens.shape)
    def icc(x):
        logs = np.log(x)
        return logs.mean(axis=1).var() / logs.var()
    assert icc(lens) > 2 * icc(shuffled)


def test_the_older_names_still_import():
    import reserve_occupy_sim
    from reserve_occupy_sim.model import workload

    assert (workload.TraceError, workload.parse_trace, workload.load_trace,
            workload.write_trace) == (WorkloadError, parse_workload, load_workload,
                                      write_workload)
    assert (reserve_occupy_sim.TraceError, reserve_occupy_sim.load_trace) == (WorkloadError,
                                                                              load_workload)
