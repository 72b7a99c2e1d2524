"""The core-only install (``pip install .``, no extras) runs the porting kit, and every command
that needs an extra says which one in one line (docs/cli.md, "What each install runs").

A fresh virtual environment gets this project's wheel and nothing else but ``transitions``
(the core's one dependency), and the console script is run from a working directory outside
the checkout, so nothing of the checkout can leak in. Offline: the wheel is built by the
test's own interpreter (``pip wheel --no-build-isolation``), installed with that pip into the
new environment (``pip --python``); ``transitions`` is a pure-Python package with no wheel
cached on the test machines, so its installed files (and those of ``six``, which it needs) are
copied from the test's environment.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.venv  # every test here runs in the fresh environment (about a minute)

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = "from reserve_occupy_porting.vector_runner import ReferenceAdapter as Adapter\n"


def _copy_distribution(name: str, site: Path) -> None:
    dist = importlib.metadata.distribution(name)
    for file in dist.files or ():
        src = Path(dist.locate_file(file))
        if src.is_file() and ".." not in file.parts:
            dst = site / file
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


# What the wheel is built from (a copy, so the build leaves nothing in the checkout).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "reserve_occupy", "runtime",
           "reserve_occupy_peers", "reserve_occupy_sim", "reserve_occupy_porting",
           "reserve_occupy_faults")


@pytest.fixture(scope="module")
def core_env(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("core")
    env_dir, wheels, src = tmp / "venv", tmp / "wheels", tmp / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(wheels), str(src)],
                   check=True, cwd=tmp, env=clean)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", *map(str, wheels.glob("*.whl"))], check=True,
                   cwd=tmp, env=clean)
    assert (env_dir / "bin" / "reserve-occupy").is_file()
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    for name in ("transitions", "six"):  # the core's dependency, and its own
        _copy_distribution(name, Path(purelib))
    assert sysconfig.get_paths()["purelib"] != purelib
    return env_dir


def _run(env_dir: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(env_dir / "bin" / "reserve-occupy"), *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": str(env_dir / "bin") + ":/usr/bin:/bin",
                               "HOME": str(cwd)})


@pytest.mark.slow
def test_the_core_install_is_core_only(core_env, tmp_path):
    probe = subprocess.run([str(core_env / "bin" / "python"), "-c",
                            "import importlib.util as u; "
                            "print([m for m in ('torch', 'numpy', 'pydantic', 'yaml') "
                            "if u.find_spec(m)])"], capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_core_install_exports_and_runs_the_conformance_vectors(core_env, tmp_path):
    # The vectors travel in the wheel (package data), not only in the checkout.
    proc = _run(core_env, tmp_path, "conformance", "--export", "basic/00000")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('{"op": "config"') or '"config"' in proc.stdout.splitlines()[0]
    (tmp_path / "mymod.py").write_text(ADAPTER)  # beside the user, as docs/porting.md says
    # The console script puts the working directory on the path, so the user's module loads.
    proc = _run(core_env, tmp_path, "conformance", "--adapter", "mymod:Adapter", "--family",
                "spec")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("argv,extra", [(["train", "--check"], "runtime"),
                                        (["simulate", "list"], "sim")])
def test_a_command_that_needs_an_extra_names_it_in_one_line(core_env, tmp_path, argv, extra):
    # A missing extra is an ImportError deep inside the command: the line names the extra.
    proc = _run(core_env, tmp_path, *argv)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'reserve-occupy[{extra}]'" in lines[0], proc.stderr
