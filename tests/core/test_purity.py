"""The core is pure: nothing in ``reserve_occupy/`` outside ``integrations/`` imports I/O, clocks,
threads, asyncio, randomness, torch, vLLM or an RL framework -- at module level or inside a
function. The check is an allow-list (what a protocol core may use), so a new impure import fails
without anyone having to name it here first. ``integrations/`` binds the core to frameworks and
may import them; it is the only place that may.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "reserve_occupy"

# Pure standard-library modules (data structures, typing, arithmetic, text encoding) and the
# state-machine library. ``json`` only turns values into text: the trace module writes no file.
ALLOWED = {
    "__future__", "abc", "bisect", "collections", "dataclasses", "enum", "functools", "heapq",
    "itertools", "json", "math", "numbers", "operator", "re", "typing", "transitions",
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute module an import in ``path`` names (relative imports stay in the core)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def impure_imports(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if "integrations" in rel.parts:
            continue
        for lineno, module in imported_modules(path):
            top = module.split(".")[0]
            if top not in ALLOWED and top != "reserve_occupy":
                out.append(f"{rel}:{lineno}: imports {module}")
    return out


def test_core_imports_only_pure_modules():
    assert impure_imports(CORE) == []


@pytest.mark.parametrize("line, module", [("import time", "time"),
                                          ("from threading import Lock", "threading"),
                                          ("def f():\n    import torch", "torch"),
                                          ("import os.path", "os.path")])
def test_an_impure_import_is_caught(tmp_path, line, module):
    pkg = tmp_path / "reserve_occupy"
    (pkg / "integrations").mkdir(parents=True)
    (pkg / "machine.py").write_text(f"from .types import Event\n{line}\n")
    (pkg / "integrations" / "torchy.py").write_text("import torch\nimport time\n")
    found = impure_imports(pkg)
    assert len(found) == 1, found
    assert found[0].startswith("reserve_occupy/machine.py:") and found[0].endswith(f"imports {module}")


def test_every_core_module_is_scanned():
    names = {p.name for p in CORE.glob("*.py")}
    assert {"machine.py", "table.py", "trace.py", "invariants.py"} <= names
