"""A command's missing module is named with the extra that installs it for that command:
numpy is in both the ``sim`` and the ``runtime`` extras, so ``train`` lacking it names
``runtime`` (``sim`` would leave torch missing) and ``simulate`` names ``sim``. The slow test
tests/test_core_install.py checks the same in a real core-only install."""

from __future__ import annotations

import pytest

from runtime.cli import missing_extra


@pytest.mark.parametrize("prog, module, extra", [
    ("reserve-occupy train", "numpy", "runtime"),
    ("reserve-occupy simulate", "numpy", "sim"),
    ("reserve-occupy train", "pydantic", "runtime"),
    ("reserve-occupy simulate", "torch", "runtime"),
    ("reserve-occupy check-trace", "numpy", "sim"),  # no extra of its own: the first
    ("reserve-occupy train", "ray", "ray"),
])
def test_the_extra_named_is_the_command_s(capsys, prog, module, extra):
    assert missing_extra(prog, ModuleNotFoundError(f"No module named {module!r}",
                                                   name=module)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{prog}: needs the module {module!r}, which this install lacks; install it "
                   f"with pip install 'reserve-occupy[{extra}]'"]


def test_an_unknown_module_names_all_and_this_project_s_own_is_a_broken_install(capsys):
    assert missing_extra("reserve-occupy train", ModuleNotFoundError(name="nosuch")) == 2
    assert "pip install 'reserve-occupy[all]'" in capsys.readouterr().err
    with pytest.raises(ModuleNotFoundError):
        missing_extra("reserve-occupy train", ModuleNotFoundError(name="reserve_occupy_sim"))
