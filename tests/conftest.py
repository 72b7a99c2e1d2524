"""The whole suite: no test reads or writes the repository's ``out/``.

``out/`` is where a user's own runs go by default (``make demo`` fills ``out/runtime/demo/``,
the benches ``out/bench/``, ``simulate --tiny`` ``out/sim-tiny/``). A test that ran a command on
a default directory read the user's run (``train --check`` then answers "holds a run ...
--resume", exit 2: the README's ``make demo`` then ``make test`` failed) or wrote into it. Every
test passes its own directory (``tmp_path``); this guard fails a test that created, removed or
rewrote anything in ``out/`` down to the files of a run directory (``out/runtime/demo/*``),
whether or not ``out/`` existed before (a clean clone has none).

The tiny models in ``~/.cache/reserve-occupy`` (``runtime.models.tiny.cache_root``) are shared
with the user's runs on purpose: a directory is named by the hash of everything that builds it
and appears whole or not at all (built aside, then renamed), so a user's run leaves exactly what
the suite would build.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

OUT = Path(__file__).resolve().parents[1] / "out"


def _stamps() -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of ``out/`` and of every entry up to three levels below it."""
    stamps: dict[str, tuple[int, int]] = {}
    frontier = [OUT]
    for level in range(4):
        deeper = []
        for path in frontier:
            try:
                st = path.stat()
            except OSError:
                continue
            stamps[str(path)] = (st.st_mtime_ns, st.st_size)
            if level < 3 and path.is_dir() and not path.is_symlink():
                try:
                    deeper += [Path(e.path) for e in os.scandir(path)]
                except OSError:
                    pass
        frontier = deeper
    return stamps


@pytest.fixture(autouse=True)
def _out_is_left_alone():
    before = _stamps()
    yield
    after = _stamps()
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        pytest.fail(f"the test changed the repository's out/ (a user's default output "
                    f"directory): {changed[:5]}; give it its own directory (tmp_path)")


# ------------------------------------------------- pytest-xdist workers (make test XDIST=...) --
# `make test XDIST="-n N --dist loadgroup"` runs the suite on N pytest-xdist workers (`make
# test` itself runs one process). Most of the suite's time is spent starting processes (an
# interpreter importing torch and vLLM for each engine, rank and CLI run), one core's work
# each. Each test file stays on one worker (its module-scoped engines and fixtures are started
# once, as in one process), and every test that starts a Ray cluster (markers ray, verl,
# openrlhf) runs on the same worker, one at a time: two local Ray clusters on one host share
# its object-store memory and /tmp/ray session directory. Without xdist the groups are inert.
_ONE_AT_A_TIME = ("ray", "verl", "openrlhf")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in _ONE_AT_A_TIME):
            group = "ray"
        else:
            group = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
