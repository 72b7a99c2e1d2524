"""Inputs that passed a check and should not (issue 25, classes 6 and 7): a whole-file reader
that read the whole file before its size check, a lone surrogate in a prompt, a data.path that
is a device or a fifo. Each is one line naming the file, exit status 2."""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import inputs
from runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _exit_2(capsys, argv: list[str], *expected: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for text in expected:
        assert text in err, err
    return err


def test_text_file_reads_at_most_its_limit(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 1000)
    with pytest.raises(inputs.InputError, match="larger than 100 bytes"):
        inputs.text_file(big, "--cost", 100)
    assert inputs.text_file(big, "--cost", 1000) == "x" * 1000
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(1 << 40)  # sparse: 1 TiB that takes no disk; read whole, it never returns
    with pytest.raises(inputs.InputError, match="larger than 1,000 bytes"):
        inputs.text_file(huge, "--page", 1000)


def test_simulate_cost_of_a_huge_file_is_refused_in_bounded_memory(tmp_path):
    # The child runs under a 1.5 GB address-space limit: reading a 4 GiB file whole ends in
    # MemoryError (a traceback, exit 1) there, not on the host.
    huge = tmp_path / "cost.json"
    with open(huge, "wb") as f:
        f.truncate(4 << 30)  # sparse: takes no disk
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))
        from runtime.cli import main
        sys.exit(main(["simulate", "--cost", {str(huge)!r}, "--no-progress"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--cost {huge}: larger than 1 MiB" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("where", ["prompt", "content", "answer"])
def test_a_lone_surrogate_in_a_prompt_is_refused_at_load(tmp_path, capsys, where):
    data = tmp_path / "d.jsonl"
    bad = '"a \\ud800 b"'
    prompt = {"prompt": bad, "content": '[{"role": "user", "content": ' + bad + '}]'}.get(
        where, '"1+1="')
    answer = bad if where == "answer" else '"2"'
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n'
                    '{"prompt": ' + prompt + ', "answer": ' + answer + '}\n')
    _exit_2(capsys, ["train", "--set", f"data.path={data}", "--check"],
            f"{data}:2: ", "lone surrogate")


def test_data_path_that_is_not_a_regular_file_says_so(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came: never opened
    for path in ("/dev/null", str(fifo)):
        _exit_2(capsys, ["train", "--set", f"data.path={path}", "--check"],
                f"{path}: not a regular file")
    _exit_2(capsys, ["train", "--set", f"data.path={tmp_path / 'missing'}", "--check"],
            "missing: no such file")


@pytest.mark.parametrize("setting, reason", [
    ("trainer.lr=true", "trainer.lr: must be a number, not a boolean"),
    ("trainer.clip_high=yes", "trainer.clip_high: must be a number, not a boolean"),
    ("rollout.temperature=true", "rollout.temperature: must be a number, not a boolean"),
    ("staleness.max_staleness=true", "staleness.max_staleness: must be a number, not a boolean"),
    ("trainer.betas=[true, 0.9]", "trainer.betas: must be a number, not a boolean"),
    ("staleness.batch_size=16.0", "staleness.batch_size: must be a whole number, not a float"),
    ("run.seed=0.0", "run.seed: must be a whole number, not a float"),
])
def test_a_boolean_or_a_float_is_no_number_of_the_config(capsys, setting, reason):
    assert main(["train", "--set", setting, "--check"]) == 2
    assert reason in capsys.readouterr().err


@pytest.mark.parametrize("setting", ["trainer.lr=1e-3", "trainer.lr=1", "run.steps=5",
                                     "trainer.max_grad_norm=null", "trainer.streaming=true",
                                     "staleness.max_staleness=0"])
def test_numbers_the_config_still_takes(tmp_path, capsys, setting):
    # its own output directory: the default one (out/runtime/demo) holds a run after `make
    # demo`, and --check then answers "holds a run ... --resume" (exit 2)
    assert main(["train", "--set", setting, "--check", "--output-dir", str(tmp_path / "run")]
                ) == 0, capsys.readouterr().err


@pytest.mark.parametrize("out", ["/proc/x", "/proc", "/sys/x"])
def test_check_refuses_an_output_dir_the_run_would_refuse(capsys, out):
    # As root os.access says every directory is writable; /proc and /sys refuse all the same,
    # and --check said OK to a run that then failed on its first write.
    _exit_2(capsys, ["train", "--check", "--output-dir", out], f"run.output_dir {out}: ")


def test_check_of_an_output_dir_leaves_no_trace(tmp_path, capsys):
    existing = tmp_path / "run"
    existing.mkdir()
    for out in (existing, tmp_path / "new" / "deeper"):
        assert main(["train", "--check", "--output-dir", str(out)]) == 0, capsys.readouterr()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["run"]


@pytest.mark.parametrize("option", ["--workload", "--cost"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_input_that_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path, option,
                                                                          kind):
    # Opening a fifo for reading waits for a writer: the check hung for ever on old code (the
    # subprocess timeout turns that into a failure here); then it was opened non-blocking and
    # read as empty or not, depending on whether a writer had opened it yet. Now every input
    # file is refused unless it is a regular file, as data.path is, whatever the timing.
    path = tmp_path / "fifo" if kind == "fifo" else Path("/dev/zero")
    if kind == "fifo":
        os.mkfifo(path)
    proc = subprocess.run([sys.executable, "-m", "runtime", "simulate", option, str(path),
                           "--no-progress"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{option} {path}: not a regular file" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_a_conformance_family_file_is_read_only_up_to_its_limit(tmp_path, monkeypatch):
    # The compressed family was read whole before the decompressed size was checked.
    from reserve_occupy_porting import vectors as vec

    monkeypatch.setattr(vec, "MAX_FAMILY_BYTES", 1000)
    path = tmp_path / "basic.jsonl.xz"
    path.write_bytes(lzma.compress(os.urandom(5000), preset=0))
    with pytest.raises(vec.CorpusError, match="larger than"):
        vec.read_text(path)
    with pytest.raises(vec.CorpusError, match="not a regular file"):
        vec.read_text(Path("/dev/zero"))
