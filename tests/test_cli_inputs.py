"""Bad input to every command (except ``train``, tests/test_train_*) is one line on stderr and
exit status 2, reported before any work, never a traceback, a hang or unbounded memory. One
parametrized case per option or file each command reads or writes (docs/cli.md is the table).
"""

from __future__ import annotations

import gzip
import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reserve_occupy import Config, ConfigError
from reserve_occupy.config import MAX_BATCH_SIZE, MAX_SLOTS, MAX_STALENESS
from runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
NOT_UTF8 = b"\xff\xfe\x00 not text\n"


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    binary = tmp_path / "binary.json"
    binary.write_bytes(NOT_UTF8)
    # A port that fails the same way every time: it reads the first request and exits
    # without answering. (``true`` raced: it could exit before or after the runner's first
    # write, which gives "exited before reading its input" instead.)
    python = shlex.quote(sys.executable)
    return {"FILE": str(a_file), "UNDER_FILE": str(a_file / "sub"), "BINARY": str(binary),
            "DIR": str(tmp_path), "MISSING": str(tmp_path / "missing.jsonl"),
            "READS_THEN_EXITS": f"{python} -c 'import sys; sys.stdin.readline()'"}


def _one_line_exit_2(capsys, argv: list[str], needle: str) -> None:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, (argv, err)
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and needle in err, err


SIMULATE = [
    (["--batch-size", "100000000"], "--batch-size"),
    (["--batch-size", "0"], "--batch-size"),
    (["--batch-size", "100000", "--eta", "12"], "slots"),
    (["--eta", "5000"], "--eta"),
    (["--capacity", "10000000"], "--capacity"),
    (["--capacity", "100000", "--batch-size", "16", "--eta", "12"], "slots"),
    (["--candidates", "100000000"], "--candidates"),
    (["--lookahead", "-1"], "--lookahead"),
    (["--batches", "1000000000"], "--batches"),
    (["--groups", "100000000"], "--groups"),
    (["--instances", "1000000000"], "--instances"),
    (["--concurrency", "0"], "--concurrency"),
    (["--seed", "-1"], "--seed"),
    (["--stuck-timeout", "inf"], "--stuck-timeout"),
    (["--stuck-timeout", "nan"], "--stuck-timeout"),
    (["--filter-rate", "nan"], "filter rate"),
    (["--filter-rate", "0.2", "--filter-skew", "inf"], "filter skew"),
    (["--cost", "BINARY"], "binary.json"),
    (["--cost", "MISSING"], "missing.jsonl"),
    (["--workload", "BINARY"], "binary.json"),
    (["--workload", "DIR"], "directory"),
    (["--out", "FILE"], "a_file"),
    (["--out", "UNDER_FILE"], "a_file"),
    (["regimes", "--tiny", "--seeds", "100000"], "--seeds"),
    (["regimes", "--tiny", "--results-dir", "FILE"], "--results-dir"),
    (["experiments", "--only", "3", "--img-dir", "UNDER_FILE"], "--img-dir"),
]


@pytest.mark.parametrize("argv,needle", SIMULATE, ids=[" ".join(a) for a, _ in SIMULATE])
def test_simulate_rejects(argv, needle, paths, capsys):
    argv = [paths.get(a, a) for a in argv]
    _one_line_exit_2(capsys, ["simulate", *argv, "--no-progress"], needle)


def test_simulate_out_is_checked_before_the_work(paths, capsys, monkeypatch):
    import reserve_occupy_sim.model.runner as runner

    monkeypatch.setattr(runner, "run_grid", lambda *a, **k: pytest.fail("ran before the check"))
    _one_line_exit_2(capsys, ["simulate", "--out", paths["FILE"], "--no-progress"], "--out")


CHECK_TRACE = [
    ("binary.jsonl", NOT_UTF8, "binary.jsonl"),
    ("huge-eta.jsonl", b'{"op":"config","schema_version":1,"config":{"max_staleness":1000000000,'
                       b'"batch_size":1000000000}}\n{"op":"publish"}\n', "max_staleness"),
    ("huge-batch.jsonl", b'{"op":"config","schema_version":1,"config":{"max_staleness":1,'
                         b'"batch_size":1000000000}}\n{"op":"publish"}\n', "batch_size"),
    ("huge-product.jsonl", b'{"op":"config","schema_version":1,"config":{"max_staleness":1000,'
                           b'"batch_size":100000}}\n', "open slots"),
]


@pytest.mark.parametrize("name,data,needle", CHECK_TRACE, ids=[c[0] for c in CHECK_TRACE])
def test_check_trace_rejects(name, data, needle, tmp_path, capsys):
    path = tmp_path / name
    path.write_bytes(data)
    rc = main(["check-trace", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err, err


def test_check_trace_memory_is_bounded_on_an_absurd_header(tmp_path):
    # Allocating (eta + 1) * capacity slots up front for the header below takes 24 GB. The
    # child runs under an address-space limit, so a regression fails here, not the host.
    path = tmp_path / "absurd.jsonl"
    path.write_text('{"op":"config","schema_version":1,"config":{"max_staleness":1000000000,'
                    '"batch_size":1000000000}}\n{"op":"publish"}\n')
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from runtime.cli import main
        sys.exit(main(["check-trace", {str(path)!r}]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "max_staleness" in proc.stderr and "Traceback" not in proc.stderr


def test_check_trace_caps_a_decompressed_line(tmp_path, capsys, monkeypatch):
    import reserve_occupy_porting.check_trace as ct

    monkeypatch.setattr(ct, "MAX_LINE_BYTES", 1 << 16)
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"a" * (1 << 20)))
    rc = main(["check-trace", str(bomb)])
    assert rc == 2 and "longer than" in capsys.readouterr().err


def test_config_limits_are_typed_errors():
    for kwargs, field in [({"max_staleness": MAX_STALENESS + 1, "batch_size": 1}, "max_staleness"),
                          ({"max_staleness": 0, "batch_size": 10**7}, "batch_size"),
                          ({"max_staleness": 0, "batch_size": 1, "capacity": MAX_BATCH_SIZE + 1},
                           "capacity"),
                          ({"max_staleness": 3, "batch_size": MAX_SLOTS // 2}, "batch_size"),
                          ({"max_staleness": 3, "batch_size": 1, "capacity": MAX_SLOTS // 2},
                           "capacity")]:
        with pytest.raises(ConfigError) as info:
            Config(**kwargs)
        assert info.value.field == field
    Config(max_staleness=MAX_STALENESS, batch_size=MAX_SLOTS // (MAX_STALENESS + 1))  # the edge
    Config(max_staleness=0, batch_size=MAX_BATCH_SIZE)


CONFORMANCE = [
    (["--adapter-cmd", "MISSING"], "cannot be started"),
    (["--adapter-cmd", "READS_THEN_EXITS"], "closed its output"),
    (["--adapter-cmd", "sleep 30", "--adapter-timeout", "0.3"], "no answer within 0.3 s"),
    (["--adapter-cmd", "'unbalanced"], "quotation"),
    (["--adapter-cmd", " "], "empty"),
    (["--adapter", "os:getcwd"], "is not an adapter"),
    (["--adapter", "no_such_module_xyz:A"], "cannot load adapter"),
    (["--stride", "0"], "--stride"),
    (["--adapter-timeout", "nan"], "--adapter-timeout"),
    (["--dir", "MISSING"], "does not exist"),
    (["--dir", "FILE"], "not a directory"),
    (["--save-failures", "FILE"], "--save-failures"),
    (["--family", "nope"], "unknown family"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv,needle", CONFORMANCE, ids=[" ".join(a) for a, _ in CONFORMANCE])
def test_conformance_rejects(argv, needle, paths, capsys):
    argv = [paths.get(a, a) for a in argv]
    _one_line_exit_2(capsys, ["conformance", *argv], needle)


def test_an_adapter_that_dies_midway_is_one_line(tmp_path, capsys):
    port = tmp_path / "port.py"  # acknowledges the header, then exits
    port.write_text("import sys\nsys.stdin.readline()\nprint('ok', flush=True)\n")
    _one_line_exit_2(capsys, ["conformance", "--family", "basic", "--adapter-cmd",
                              f"{sys.executable} {port}"], "(exit status 0)")


FAULTS = [
    (["--schedules", "0"], "--schedules"),
    (["--schedules", "100000000"], "--schedules"),
    (["--seed", "-5"], "--seed"),
    (["--sim-share", "nan"], "--sim-share"),
    (["--json", "DIR"], "is a directory"),
    (["--json", "UNDER_FILE"], "not a directory"),
    (["--variant", "nope"], "unknown variant"),
]


@pytest.mark.parametrize("argv,needle", FAULTS, ids=[" ".join(a) for a, _ in FAULTS])
def test_faults_rejects(argv, needle, paths, capsys):
    argv = [paths.get(a, a) for a in argv]
    _one_line_exit_2(capsys, ["faults", *argv, "--quiet"], needle)


def test_faults_json_is_checked_before_the_schedules(paths, capsys, monkeypatch):
    import reserve_occupy_faults.cli as cli

    monkeypatch.setattr(cli, "run_schedule", lambda *a, **k: pytest.fail("ran before the check"))
    _one_line_exit_2(capsys, ["faults", "--schedules", "1", "--json", paths["UNDER_FILE"]],
                     "--json")


@pytest.mark.slow
def test_regimes_tiny_counts_the_cells_it_lists(tmp_path, capsys):
    rc = main(["simulate", "regimes", "--tiny", "--results-dir", str(tmp_path / "r"),
               "--img-dir", str(tmp_path / "i"), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    said = int(out.split("the regime map (")[1].split(" cells")[0])
    payload = json.loads((tmp_path / "r" / "regimes.json").read_text())
    keys = {(c["eta"], c["train_mult"], c["concurrency"], c["truncated"], c["filter_rate"])
            for c in payload["cells"]}
    rows = [line for line in out.splitlines() if line.startswith("|") and "---" not in line][1:]
    listed = sum(int(r.split("|")[3]) for r in rows)  # the summary's "cells" column
    assert said == len(keys) == listed


def write_corpus(directory: Path, family: str, text: bytes, events: int = 0) -> None:
    """A family file and a MANIFEST.json that describes it truly (so that what is checked
    next is the file's content)."""
    import hashlib
    import lzma

    (directory / f"{family}.jsonl.xz").write_bytes(lzma.compress(text))
    entry = {"file": f"{family}.jsonl.xz", "vectors": text.count(b"\n"), "events": events,
             "sha256": hashlib.sha256(text).hexdigest()}
    (directory / "MANIFEST.json").write_text(json.dumps({"families": {family: entry}}))


@pytest.mark.parametrize("line,needle", [
    (b"not json", "not a JSON vector"),
    (b'{"id": "basic/0"}', "needs 'id', 'config'"),
    (b'{"id": "basic/0", "config": {"max_staleness": 1000000000, "batch_size": 1000000000}, '
     b'"events": []}', "max_staleness"),
])
def test_conformance_rejects_an_invalid_corpus(line, needle, tmp_path, capsys):
    write_corpus(tmp_path, "basic", line + b"\n")
    _one_line_exit_2(capsys, ["conformance", "--family", "basic", "--dir", str(tmp_path)],
                     needle)


def test_conformance_refuses_an_xz_bomb(tmp_path, capsys, monkeypatch):
    import lzma

    import reserve_occupy_porting.vectors as vec

    monkeypatch.setattr(vec, "MAX_FAMILY_BYTES", 1 << 16)
    (tmp_path / "basic.jsonl.xz").write_bytes(lzma.compress(b"\n" * (1 << 20)))
    _one_line_exit_2(capsys, ["conformance", "--family", "basic", "--dir", str(tmp_path)],
                     "decompresses to more than")


class StartRaises:
    def start(self, config):
        raise RuntimeError("port not ready")

    reserve = occupy = abort = filter = consume = publish = release_stuck = start


def test_an_adapter_whose_start_raises_fails_the_vectors(capsys):
    rc = main(["conformance", "--family", "spec", "--adapter", f"{__name__}:StartRaises"])
    out = capsys.readouterr().out
    assert rc == 1 and "start(config)" in out and "port not ready" in out
