"""No import circle in ``reserve_occupy/`` or ``runtime/``, counting every import a reader meets:
at module level, inside functions and under ``if TYPE_CHECKING:``. Python tolerates a circle
closed by a lazy import; a reader following the imports does not (which of the two modules is
the lower layer?). The check is shown to find a circle closed by each kind of lazy import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reserve_occupy", "runtime")


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the packages (a package is its
    ``__init__``)."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name an import anywhere in the file names, relative imports resolved
    (``from .x import y`` names both ``pkg.x`` and ``pkg.x.y``: y may be a module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return found


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports (a name resolves to its longest
    prefix that is a module)."""
    files = module_files(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_names(name, path):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, each sorted."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    comps = {frozenset([a] + [b for b in reach[a] if a in reach[b]]) for a in graph}
    return sorted(sorted(c) for c in comps if len(c) > 1)


def test_no_import_circle_counting_lazy_imports():
    assert circles(import_graph(ROOT)) == []


@pytest.mark.parametrize("back_edge", [
    "from .a import f\n",
    "def g():\n    from .a import f\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n",
    "from . import a\n",
    "import pkg.a\n",
])
def test_a_circle_closed_by_any_kind_of_import_is_found(tmp_path, back_edge):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub.c import h\n\ndef f():\n    pass\n")
    (pkg / "sub" / "c.py").write_text("from ..b import k\n\ndef h():\n    pass\n")
    (pkg / "b.py").write_text(back_edge + "\ndef k():\n    pass\n")
    (pkg / "d.py").write_text("from .a import f\n")  # imports into the circle, not part of it
    assert circles(import_graph(tmp_path, ("pkg",))) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_no_circle_is_reported_where_imports_run_one_way(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("def f():\n    from .b import k\n")
    (pkg / "b.py").write_text("import math\n")
    assert circles(import_graph(tmp_path, ("pkg",))) == []
