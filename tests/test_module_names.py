"""One module name, one thing, and one name for one value (issue 35 item 5).

``workload``, ``runner`` and ``checks`` each named a module of the simulator and another of the
porting kit or the fault harness; the simulator kept its names and the others were renamed
(``RENAMED``). The old paths stay for one release as shims that re-export the new module's public
names: (a) each still gives the very same objects, and warns that it is deprecated; (b) nothing
in the repo imports a shim (the code, the benchmarks and the tests use the new names), read from
every import statement of every .py file, including lazy ones and the old ``runtime.*`` aliases
(``runtime/_moved.py``).

``REFERENCE`` named Reserve–Occupy's policy in two modules and NeMo's in_order row in a third;
those are ``RESERVE_OCCUPY`` and ``IN_ORDER_AS_SHIPPED``, and ``REFERENCE`` is only an old name
that each module still answers, with a warning, for one release (``OLD_REFERENCE``); so are the
safetensors weight writer's ``write_streamed`` and ``StreamError`` (``OLD_WRITER_NAMES``), which
said "stream" as unit streaming does. The repo's code uses none of the old names.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from reserve_occupy_peers import RESERVE_OCCUPY

from runtime._moved import new_name

from .test_import_structure import imported_names as imported_modules

ROOT = Path(__file__).resolve().parents[1]

# old module -> the module that replaced it
RENAMED = {
    "reserve_occupy_porting.workload": "reserve_occupy_porting.drive",
    "reserve_occupy_porting.runner": "reserve_occupy_porting.vector_runner",
    "reserve_occupy_faults.checks": "reserve_occupy_faults.properties",
}


def public_names(module: str) -> set[str]:
    """The names a module's own top level defines (classes, functions, assignments), not those
    it imports, leaving out the private ones."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_the_old_path_gives_the_new_modules_objects(old: str, new: str) -> None:
    new_module = importlib.import_module(new)
    names = public_names(new)
    assert names, new
    sys.modules.pop(old, None)  # a shim holds nothing of its own: importing it again is harmless
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        old_module = importlib.import_module(old)
    assert set(old_module.__all__) == names
    for name in sorted(names):
        assert getattr(old_module, name) is getattr(new_module, name), f"{old}.{name}"
    doc = old_module.__doc__ or ""
    assert new in doc and "one release" in doc, f"{old}'s docstring names neither"


def shim_users(root: Path) -> list[str]:
    """``file: old -> new`` for every import of a shim in the repo's code, benchmarks and tests
    (this file, which imports them on purpose, aside)."""
    here = Path(__file__).resolve()
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and (
        p.name in ("runtime", "bench", "tests", "proofs") or p.name.startswith("reserve_occupy")))
    out = set()
    for top in dirs:
        for path in sorted(top.rglob("*.py")):
            if path.resolve() == here or ".venv" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            for imported in sorted(imported_modules(".".join(parts), path)):
                imported = new_name(imported) or imported  # runtime.porting.x -> ...porting.x
                for old, new in RENAMED.items():
                    if imported == old or imported.startswith(old + "."):
                        out.add(f"{path.relative_to(root)}: {old} -> {new}")
    return sorted(out)


def test_nothing_in_the_repo_imports_a_shim() -> None:
    users = shim_users(ROOT)
    assert not users, "import the new names:\n" + "\n".join(users)


def test_the_scan_finds_each_kind_of_import(tmp_path: Path) -> None:
    """The scan is not blind: a module-level, a ``from package import module``, a relative and a
    lazy import of a shim, and one through the old ``runtime.*`` alias, are each reported."""
    pkg = tmp_path / "reserve_occupy_porting"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .workload import drive\n")
    (pkg / "b.py").write_text("def f():\n    import reserve_occupy_faults.checks\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "c.py").write_text("from reserve_occupy_porting import runner\n")
    (tmp_path / "bench" / "d.py").write_text("from runtime.porting.workload import play\n")
    (tmp_path / "bench" / "e.py").write_text("from reserve_occupy_porting import drive\n")
    found = shim_users(tmp_path)
    assert sorted(f.split(":")[0] for f in found) == [
        "bench/c.py", "bench/d.py", "reserve_occupy_porting/a.py", "reserve_occupy_porting/b.py"]


# module that answered REFERENCE -> the name of what it meant there
OLD_REFERENCE = {
    "runtime.peers": "RESERVE_OCCUPY",
    "runtime.config": "RESERVE_OCCUPY",
    "reserve_occupy_porting.checker": "RESERVE_OCCUPY",
    "reserve_occupy_sim.studies.streaming_compute": "IN_ORDER_AS_SHIPPED",
    "reserve_occupy_sim.studies.streaming": "IN_ORDER_AS_SHIPPED",
}


@pytest.mark.parametrize("module, new", sorted(OLD_REFERENCE.items()))
def test_reference_is_an_old_name_that_warns(module: str, new: str) -> None:
    mod = importlib.import_module(module)
    assert "REFERENCE" not in vars(mod) and "REFERENCE" not in getattr(mod, "__all__", ())
    with pytest.warns(DeprecationWarning, match=new):
        value = mod.REFERENCE
    assert value == getattr(mod, new)
    with pytest.raises(AttributeError):
        getattr(mod, "NO_SUCH_NAME_HERE")


def test_reserve_occupy_is_one_value() -> None:
    for module, new in OLD_REFERENCE.items():
        if new == "RESERVE_OCCUPY":
            assert getattr(importlib.import_module(module), new) is RESERVE_OCCUPY, module


# the safetensors weight writer's names that said "stream" (which names unit streaming)
OLD_WRITER_NAMES = {"write_streamed": "write_file", "StreamError": "WriteError"}


@pytest.mark.parametrize("old, new", sorted(OLD_WRITER_NAMES.items()))
def test_the_weight_writer_s_old_names_warn(old: str, new: str) -> None:
    mod = importlib.import_module("runtime.trainer.safetensors_writer")
    assert old not in vars(mod)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
        value = getattr(mod, old)
    assert value is getattr(mod, new)


def test_nothing_in_the_repo_uses_an_old_name() -> None:
    """No name, attribute or import called REFERENCE, write_streamed or StreamError in the
    repo's code, benchmarks and tests (the old-name hooks compare strings, which are not
    names)."""
    old_names = {"REFERENCE", *OLD_WRITER_NAMES}
    here = Path(__file__).resolve()
    found = []
    for top in sorted(p for p in ROOT.iterdir() if p.is_dir() and (
            p.name in ("runtime", "bench", "tests", "proofs")
            or p.name.startswith("reserve_occupy"))):
        for path in sorted(top.rglob("*.py")):
            if path.resolve() == here:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                name = (node.id if isinstance(node, ast.Name) else
                        node.attr if isinstance(node, ast.Attribute) else
                        node.name if isinstance(node, ast.alias) else None)
                if name in old_names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not found, ("old names (REFERENCE: RESERVE_OCCUPY or IN_ORDER_AS_SHIPPED; "
                       f"{OLD_WRITER_NAMES}):\n" + "\n".join(found))
