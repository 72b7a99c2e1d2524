"""Old import names of modules that left ``runtime/`` (issue 35), kept for one release, and of
one renamed inside it: ``runtime.trainer.streamed``, the safetensors weight writer, is
``runtime.trainer.safetensors_writer`` (its old name read as unit streaming).

``runtime/`` is the production path; the peers' rules, the simulator, the porting kit and the
fault harness moved out of it to top-level packages of their own (``MOVED`` maps each old
prefix to its new name). An import of an old name gives the module under its new name, the same
object (``import runtime.sim.model.core`` *is* ``reserve_occupy_sim.model.core``), so
``isinstance`` checks and monkeypatching see one module whichever name was used; it warns with a
``DeprecationWarning`` naming the new name. ``python -m`` with an old name runs the new module.

Why a finder on ``sys.meta_path`` and not a package of stub files: the stubs would have to list
every submodule (a hundred) and would create second copies of each module unless every one of
them aliased itself in ``sys.modules``; one table here does that for all of them, and the import
structure (``imports.py --layers``) sees no import from ``runtime`` into a tool, because there
is none: the new names are only strings here. Installed by ``runtime/__init__.py``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType

# old prefix -> new name; longest first (the peers' rules moved out of the simulator's package)
MOVED: dict[str, str] = {
    "runtime.sim.model.policies": "reserve_occupy_peers",
    "runtime.sim": "reserve_occupy_sim",
    "runtime.porting": "reserve_occupy_porting",
    "runtime.faults": "reserve_occupy_faults",
    "runtime.trainer.streamed": "runtime.trainer.safetensors_writer",
}


def new_name(fullname: str) -> str | None:
    """The module's name now, if ``fullname`` is an old name (else None)."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new} (issue 35); the old name is an alias "
                      f"for one release", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing: the module ran under its new name."""

    def get_code(self, fullname: str):  # type: ignore[no-untyped-def]
        """``python -m OLD`` (runpy asks the loader for the code): the new module's code."""
        new = new_name(fullname) or self.new
        spec = importlib.util.find_spec(new)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"no code for {new}", name=fullname)
        return spec.loader.get_code(new)  # type: ignore[union-attr]


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        new = new_name(fullname)
        if new is None:
            return None
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        # origin: the new module's file (``python -m OLD`` runs it with its own __file__)
        spec = importlib.util.spec_from_loader(
            fullname, _AliasLoader(new), origin=real.origin,
            is_package=real.submodule_search_locations is not None)
        return spec


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


def renamed(module: str, names: dict[str, str], space: dict) -> Callable[[str], object]:
    """A module's ``__getattr__`` answering its renamed attributes, kept for one release:
    ``names`` maps each old name to the new one, looked up in ``space`` (the module's
    ``globals()``) when asked, with a ``DeprecationWarning`` naming the new name. Any other
    missing name is an ``AttributeError``, as without it. One helper for the modules that
    renamed a public name (issue 35), so each says only what was renamed."""

    def __getattr__(name: str) -> object:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is now {new} (issue 35); the old name is kept for "
                      "one release", DeprecationWarning, stacklevel=2)
        return space[new]

    return __getattr__
