"""The plugins' entry points get the command line's treatment (issue 36, class 9): ``--help``
prints the plugin's help and exits 0; the plugin's own values are checked before the framework
starts (one line, exit 2); a framework, or a module it imports, that is not installed is one
line naming the module and what to install (exit 2), never a traceback. For the entries
without a command line, the values they take are checked the same way.

A missing module is made so with ``sys.modules[name] = None`` in the child process (an import of
it raises ``ModuleNotFoundError``), so the tests do not depend on what this machine has."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

from reserve_occupy.integrations.nemo_rl import NemoSamplerError, ReserveOccupySampler

ROOT = Path(__file__).resolve().parents[2]
OPENRLHF = "reserve_occupy.integrations.openrlhf"
VERL = "reserve_occupy.integrations.verl"


def _entry(module: str, *argv: str, missing: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """``python -m module argv`` with the modules ``missing`` made unimportable."""
    code = (f"import runpy, sys\nfor name in {list(missing)!r}:\n    sys.modules[name] = None\n"
            f"sys.argv = [{module!r}, *{list(argv)!r}]\n"
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env={"PATH": "/usr/bin:/bin",
                                                      "PYTHONPATH": str(ROOT),
                                                      "HF_HUB_OFFLINE": "1"})
    return run.returncode, run.stdout, run.stderr


def _one_line_exit_2(code: int, out: str, err: str, *needles: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.startswith("error:")]
    assert code == 2 and "Traceback" not in err, (code, err[-3000:])
    assert len(lines) == 1, err[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------- OpenRLHF -----------------

def test_openrlhf_help_is_help_exit_0():
    code, out, err = _entry(OPENRLHF, "--help", missing=("openrlhf",))
    # before: "error: --reserve_occupy.max_staleness=None: is required", exit 2
    assert code == 0, (code, err)
    assert out.startswith("usage: python -m reserve_occupy.integrations.openrlhf")
    assert "--reserve_occupy.max_staleness N" in out and "--train.async_enable" in out
    assert "None" not in out + err


@pytest.mark.parametrize("argv, says", [
    (["--train.async_enable"], "--reserve_occupy.max_staleness is required"),
    (["--reserve_occupy.max_staleness"], "--reserve_occupy.max_staleness needs a value"),
    (["--reserve_occupy.max_staleness", "5000", "--train.async_enable"], "must be <= 1024"),
    (["--reserve_occupy.max_staleness", "1", "--reserve_occupy.stuck_timeout_s", "inf",
      "--train.async_enable"], "must be finite and > 0"),
    (["--reserve_occupy.max_staleness", "1", "--reserve_occupy.max_staleness", "2",
      "--train.async_enable"], "given twice"),
])
def test_openrlhf_values_are_checked_before_openrlhf_is_imported(argv, says):
    # OpenRLHF unimportable: a value checked only after its import would show as the missing
    # module (before: the 5000, inf and twice cases; "=None:" in the first two)
    line = _one_line_exit_2(*_entry(OPENRLHF, *argv, missing=("openrlhf",)), says)
    assert "None" not in line and "openrlhf'" not in line


@pytest.mark.parametrize("missing, names, how", [
    ("openrlhf", "'openrlhf'", "--no-deps openrlhf==0.11.2"),
    ("flash_attn", "'flash_attn'", "flash-attn"),
])
def test_openrlhf_without_a_module_it_needs_is_one_line(missing, names, how):
    if missing != "openrlhf" and importlib.util.find_spec("openrlhf") is None:
        pytest.skip("OpenRLHF is not installed: its imports are not reached")
    # before: a traceback ending in ModuleNotFoundError, exit 1
    _one_line_exit_2(*_entry(OPENRLHF, "--reserve_occupy.max_staleness", "1",
                             "--train.async_enable", missing=(missing,)),
                     f"needs the module {names}", how, "reserve-occupy[openrlhf]")


# ---------------------------------------------------------------- verl ---------------------

def test_verl_without_verl_is_one_line_and_its_help_still_works():
    # before: a traceback ending in ModuleNotFoundError (the module imports verl at its top)
    _one_line_exit_2(*_entry(VERL, "trainer.v1.trainer_mode=reserve_occupy_colocate_async",
                             missing=("verl",)),
                     "needs the module 'verl'", "reserve-occupy[verl]")
    code, out, err = _entry(VERL, "--help", missing=("verl",))
    assert code == 0, (code, err[-3000:])
    assert out.startswith("usage: python -m reserve_occupy.integrations.verl")
    assert "sampler_kwargs.max_staleness" in out


def _verl_config(**sampler_kwargs):
    omegaconf = pytest.importorskip("omegaconf")
    kwargs = {"max_staleness": 1, "batch_size": 4, **sampler_kwargs}
    return omegaconf.OmegaConf.create({
        "data": {"train_batch_size": 4},
        "trainer": {"v1": {
            "trainer_mode": "reserve_occupy_colocate_async",
            "colocate_async": {"parameter_sync_step": 1},
            "sampler": {"max_off_policy_threshold": None, "sampler_kwargs": kwargs,
                        "custom_sampler": {"path": f"pkg://{VERL}",
                                           "name": "ReserveOccupyReplayBuffer"}}}}})


@pytest.mark.verl
@pytest.mark.parametrize("edit, says", [
    ({"max_staleness": 5000}, "sampler_kwargs.max_staleness"),
    ({"max_staleness": -1}, "sampler_kwargs.max_staleness"),
    ({"stuck_timeout_s": math.nan}, "stuck_timeout_s"),
    ({"batch_size": 8}, "data.train_batch_size=4"),
    ({"eta": 1}, "unknown sampler_kwargs"),
])
def test_verl_settings_are_checked_in_the_driver_before_verl_starts(edit, says):
    verl = pytest.importorskip(VERL)
    verl.check_config(_verl_config())  # the good one passes
    # before: no check_config; these surfaced in verl's task runner, on Ray, if at all
    with pytest.raises(verl.VerlIntegrationError, match=says.replace(".", r"\.")):
        verl.check_config(_verl_config(**edit))


@pytest.mark.verl
def test_verl_help_is_the_plugins_help():
    code, out, err = _entry(VERL, "--help")
    # before: Hydra's help, which says nothing of the plugin's settings
    assert code == 0, (code, err[-3000:])
    assert "sampler_kwargs.max_staleness=ETA" in out and "--hydra-help" in out


# ---------------------------------------------------------------- NeMo-RL ------------------

@pytest.mark.parametrize("key, value", [
    ("stuck_timeout_s", math.inf), ("stuck_timeout_s", True), ("stuck_timeout_s", "600"),
    ("poll_s", math.inf), ("poll_s", math.nan), ("poll_s", True), ("poll_s", "0.1"),
])
def test_nemo_rl_seconds_are_finite_numbers(key, value):
    # before: inf and True taken (a fail-safe that never fires, a 1 s poll), "600" TypeError
    with pytest.raises(NemoSamplerError, match=key):
        ReserveOccupySampler(object(), max_staleness=1, groups_per_step=2, **{key: value})
