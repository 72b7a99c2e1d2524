"""Every JSON reader has a depth limit and a size limit (issue 25, class 6).

A line nested 1,000 deep is two kilobytes, and the standard decoder answers it with
``RecursionError``; a line of hundreds of megabytes, read whole, takes memory and time without
bound. Each reader here -- check-trace, train's data.path, the event log of --resume,
conformance --dir, simulate --workload and --cost -- must refuse both with exit status 2 and
one line naming the file and the line, after reading at most its limit.
"""

from __future__ import annotations

import io
import json
import lzma
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reserve_occupy import Config
from reserve_occupy.trace import (
    MAX_JSON_DEPTH,
    JSONDepthError,
    dumps,
    header,
    json_depth,
    loads_bounded,
)
from runtime import inputs
from runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEEP = "[" * 1000 + "]" * 1000  # 2 KB, 1,000 levels


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


_text = st.text(alphabet=st.sampled_from('ab[]{}"\\\n\u00e9'), max_size=6)
_json = st.recursive(st.none() | st.integers() | _text,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text, inner, max_size=3), max_leaves=30)


# Derandomized, without the example database (as the proofs' Hypothesis tests): every run
# draws the same 300 documents, and none replays what an earlier run left in .hypothesis/.
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(_json, st.booleans())
def test_json_depth_is_the_nesting_depth_whatever_the_strings_hold(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert json_depth(text) == _depth(value)
    assert json_depth(text.encode()) == _depth(value)


def test_loads_bounded_refuses_deep_documents_with_a_typed_error():
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert _depth(loads_bounded(at_limit)) == MAX_JSON_DEPTH
    for deep in (DEEP, "[" * 1000, '{"a":' * 1000 + "1" + "}" * 1000,
                 "[" * 65 + '"]]]]"' + "]" * 65):
        with pytest.raises(JSONDepthError, match="nested deeper than 64 levels"):
            loads_bounded(deep)
    # brackets inside strings, escaped quotes included, do not count
    assert loads_bounded('["' + "[" * 1000 + '\\"' + '"]') == ["[" * 1000 + '"']
    with pytest.raises(json.JSONDecodeError):  # JSONDepthError is one: old handlers hold
        loads_bounded(DEEP)


class Endless(io.RawIOBase):
    """A stream of one line that never ends, counting what is read from it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        n = len(buffer)
        buffer[:n] = b"x" * n
        self.read_bytes += n
        return n


def test_a_line_reader_stops_at_its_limit_on_a_line_that_never_ends():
    raw = Endless()
    with pytest.raises(inputs.LineTooLong, match="endless:1: the line is longer than 1 MiB"):
        list(inputs.raw_lines(io.BufferedReader(raw), 1 << 20, "endless"))
    assert raw.read_bytes <= (1 << 20) + (1 << 17)  # the limit and one buffer, not the line


# ----------------------------------------------------------------- every reader, end to end --

def _exit_2_naming(capsys, argv: list[str], *needles: str) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, (argv, err)
    assert len(err.splitlines()) <= 2 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_check_trace_refuses_a_deep_line(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(dumps(header(Config(1, 2))) + "\n" + '{"op":"publish","meta":' + DEEP
                    + "}\n")
    _exit_2_naming(capsys, ["check-trace", str(path)], "line 2", "nested deeper than 64")


def test_train_data_refuses_a_deep_line_and_a_long_one(tmp_path, capsys, monkeypatch):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": "4", '
                    '"x": ' + DEEP + '}\n')
    _exit_2_naming(capsys, ["train", "--set", f"data.path={data}", "--check"],
                   f"{data}:2", "nested deeper than 64")
    monkeypatch.setattr(inputs, "DATA_LINE_BYTES", 100)
    monkeypatch.setattr("runtime.data.DATA_LINE_BYTES", 100)
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "' + "1" * 200
                    + '", "answer": "2"}\n')
    _exit_2_naming(capsys, ["train", "--set", f"data.path={data}", "--check"],
                   f"{data}:2", "longer than 100 bytes")


def test_a_5_mb_prompt_line_is_refused_in_bounded_memory(tmp_path):
    # Reading the line whole and tokenizing the prompt would take ~2.7 GB at 5 MB. The child
    # runs under a 1.5 GB address-space limit, so a regression fails here, not the host.
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "' + "1" * 5_000_000 + '", "answer": "2"}\n')
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))
        from runtime.cli import main
        sys.exit(main(["train", "--set", "data.path={data}", "--check"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{data}:1: the line is longer than 4 MiB" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_prompt_longer_than_the_limit_is_refused(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "' + "1" * (inputs.MAX_PROMPT_CHARS + 1) + '", "answer": "2"}\n')
    _exit_2_naming(capsys, ["train", "--set", f"data.path={data}", "--check"],
                   f"{data}:1", "1,048,577 characters; at most 1,048,576")


def test_resume_refuses_an_event_log_with_a_deep_line(tmp_path, capsys):
    from runtime.config import TrainConfig

    run = tmp_path / "run"
    run.mkdir()
    cfg = TrainConfig()
    (run / "config.json").write_text(cfg.model_dump_json())
    config = cfg.driver_settings().controller_config()
    (run / "events.jsonl").write_text(dumps(header(config)) + "\n" + '{"op":"publish","meta":'
                                      + DEEP + '}\n{"op":"publish"}\n')
    _exit_2_naming(capsys, ["train", "--resume", str(run), "--check"],
                   "events.jsonl: line 2", "nested deeper than 64")


def test_resume_refuses_an_event_log_line_over_the_limit(tmp_path, monkeypatch):
    from runtime.recovery import journal

    monkeypatch.setattr(journal, "MAX_LOG_LINE_BYTES", 1000)
    path = tmp_path / "events.jsonl"
    path.write_text(dumps(header(Config(1, 2))) + "\n" + '{"op":"publish","x_pad":"'
                    + "a" * 2000 + '"}\n{"op":"publish"}\n')
    with pytest.raises(journal.LogCorrupt, match="line 2 is longer than"):
        journal.read_log(path)


def _corpus(directory: Path, line: str) -> None:
    import hashlib

    text = (line + "\n").encode()
    (directory / "basic.jsonl.xz").write_bytes(lzma.compress(text))
    (directory / "MANIFEST.json").write_text(json.dumps({"families": {"basic": {
        "file": "basic.jsonl.xz", "vectors": 1, "events": 0,
        "sha256": hashlib.sha256(text).hexdigest()}}}))


def test_conformance_dir_refuses_a_deep_vector(tmp_path, capsys):
    _corpus(tmp_path, '{"id": "basic/0", "config": ' + DEEP + ', "events": []}')
    _exit_2_naming(capsys, ["conformance", "--family", "basic", "--dir", str(tmp_path)],
                   "basic.jsonl.xz: line 1", "nested deeper than 64")


def test_simulate_workload_and_cost_refuse_deep_and_long_input(tmp_path, capsys, monkeypatch):
    workload = tmp_path / "w.jsonl"
    workload.write_text('{"group": 1, "prompt_len": 3, "response_lens": [1, 2]}\n'
                        '{"group": 2, "prompt_len": 3, "response_lens": [1, 2], "x": '
                        + DEEP + '}\n')
    _exit_2_naming(capsys, ["simulate", "--workload", str(workload), "--no-progress"],
                   f"{workload}:2", "nested deeper than 64")
    cost = tmp_path / "c.json"
    cost.write_text('{"name": ' + DEEP + '}')
    _exit_2_naming(capsys, ["simulate", "--cost", str(cost), "--no-progress"],
                   str(cost), "nested deeper than 64")
    monkeypatch.setattr("reserve_occupy_sim.model.workload.DATA_LINE_BYTES", 100)
    workload.write_text('{"group": 1, "prompt_len": 3, "response_lens": [' + "1, " * 100
                        + '1]}\n')
    _exit_2_naming(capsys, ["simulate", "--workload", str(workload), "--no-progress"],
                   f"{workload}:1", "longer than 100 bytes")
    monkeypatch.setattr("reserve_occupy_sim.model.cost.COST_FILE_BYTES", 100)
    cost.write_text('{"name": "' + "a" * 200 + '"}')
    _exit_2_naming(capsys, ["simulate", "--cost", str(cost), "--no-progress"],
                   str(cost), "larger than 100 bytes")


def test_a_deep_config_file_or_set_value_is_one_line(tmp_path, capsys):
    """YAML too: PyYAML's composer recurses, so a 1,000-deep config was a RecursionError."""
    config = tmp_path / "c.yaml"
    for text in ("run: " + DEEP + "\n", "run: " + "[" * 100_000 + "\n",
                 "a:\n" + "".join("  " * (k + 1) + f"k{k}:\n" for k in range(1000))):
        config.write_text(text)
        _exit_2_naming(capsys, ["train", "--config", str(config), "--check"], str(config),
                       "nested deeper than 64 levels")
    _exit_2_naming(capsys, ["train", "--set", f"run.x={DEEP}", "--check"], "--set run.x",
                   "nested deeper than 64 levels")


def test_a_config_whose_aliases_expand_past_a_million_values_is_one_line(tmp_path, capsys):
    """"Billion laughs": nine lines of aliases load at once (PyYAML shares an aliased node)
    and then take ~387 M values (gigabytes) in the run's config.json. Before: accepted."""
    lines = ["  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    config = tmp_path / "c.yaml"
    config.write_text("reward:\n  options:\n" + "\n".join("  " + line for line in lines) + "\n")
    _exit_2_naming(capsys, ["train", "--config", str(config), "--check"], str(config),
                   "expand it to more than 1,000,000 values")
    # a chain of 100 aliases, each one level deeper: within the parser's depth, not expanded
    config.write_text("reward:\n  options:\n    a0: &a0 [1]\n" + "".join(
        f"    a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 100)))
    _exit_2_naming(capsys, ["train", "--config", str(config), "--check"], str(config),
                   "nest it deeper than 64 levels")
    _exit_2_naming(capsys, ["train", "--set", "reward.options={a: &a [*a]}", "--check"],
                   "--set reward.options", "refers to a value that contains it")
    # aliases that expand to little are a config like any other
    config.write_text("staleness:\n  batch_size: &n 4\n  group_size: *n\n")
    assert main(["train", "--config", str(config), "--set", "rollout.backend=fake",
                 "--output-dir", str(tmp_path / "run"), "--check"]) == 0
