"""Reserve–Occupy as NeMo-RL's ``custom`` sampler, loaded and driven the way NeMo-RL's
SingleController does it (NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909, read, not
installed: NeMo-RL does not install here), and every run's trace strict-checked.

``create_sampler`` (``nemo_rl/algorithms/async_utils/staleness_sampler.py`` 558–595) takes
``async_rl.sampler.target: "module:ClassName"``, imports the module, builds
``cls(buffer, **extra_yaml_keys)`` and refuses an object that lacks the ``PromptGroupSampler``
members (a ``runtime_checkable`` Protocol: names only); the actor then calls
``set_dispatch_index`` and ``required_buffer_capacity`` before the first ``admit``. The pumps are
``tests/integrations/test_nemo_rl.py``'s ``SingleControllerDriver`` (docs/porting/nemo-rl.md,
"How it is tested")."""

from __future__ import annotations

import importlib

import pytest

from reserve_occupy.trace import dumps, trace_records
from reserve_occupy_porting.checker import STRICT, check
from tests import virtual_loop

from .test_nemo_rl import SingleControllerDriver, schedule

TARGET = "reserve_occupy.integrations.nemo_rl:ReserveOccupySampler"
# PromptGroupSampler's members (staleness_sampler.py 63–118)
MEMBERS = ("admit", "select", "evict", "should_abort_inflight", "is_on_policy",
           "required_buffer_capacity", "set_dispatch_index")


def create_sampler(buffer, target: str, extra: dict):
    """What NeMo-RL's ``create_sampler`` does with ``name: custom``."""
    if ":" not in target:
        raise ValueError(f"custom sampler target {target!r} must be 'module:ClassName'")
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    sampler = cls(buffer, **extra)
    missing = [m for m in MEMBERS if not hasattr(sampler, m)]
    if missing:
        raise TypeError(f"{target} is not a PromptGroupSampler (lacks {', '.join(missing)})")
    return sampler


def trace_lines(sampler) -> list[str]:
    return [dumps(r) for r in trace_records(sampler.config, sampler.controller.events,
                                            "test_nemo_rl_custom")]


@pytest.mark.parametrize("eta, streaming", [(0, False), (1, False), (2, False), (1, True),
                                             (2, True)])
def test_the_custom_target_loads_runs_and_its_trace_is_strictly_valid(eta, streaming):
    extra = {"max_staleness": eta, "groups_per_step": 4, "streaming": streaming}
    d = SingleControllerDriver(lambda buf: create_sampler(buf, TARGET, extra),
                               groups_per_step=4, steps=10, durations=schedule(),
                               min_groups_for_streaming_train=2 if streaming else 1)
    virtual_loop.run(d.run())
    assert len(d.step_sizes) == 10 and max(d.staleness) <= eta
    assert d.evicted == 0 and d.sampler.orphans == 0
    report = check(trace_lines(d.sampler), STRICT)
    assert report.ok, report.problem
    assert report.batches == 10 and report.max_staleness == max(d.staleness)
    assert report.config.max_staleness == eta


def test_a_trace_that_breaks_the_bound_is_refused():
    """The check can fail: the same run's trace, its header claiming a smaller eta than the
    sampler kept, is refused (a consume trains a unit staler than the header's bound)."""
    extra = {"max_staleness": 2, "groups_per_step": 4}
    d = SingleControllerDriver(lambda buf: create_sampler(buf, TARGET, extra),
                               groups_per_step=4, steps=10, durations=schedule())
    virtual_loop.run(d.run())
    assert max(d.staleness) == 2
    lines = trace_lines(d.sampler)
    lines[0] = lines[0].replace('"max_staleness":2', '"max_staleness":1')
    assert '"max_staleness":1' in lines[0]
    report = check(lines, STRICT)
    assert not report.ok


def test_a_bad_target_or_extra_key_is_refused_as_nemo_rl_would():
    with pytest.raises(ValueError, match="module:ClassName"):
        create_sampler(None, "reserve_occupy.integrations.nemo_rl.ReserveOccupySampler", {})
    with pytest.raises(TypeError, match="unexpected keyword argument 'eta'"):
        create_sampler(None, TARGET, {"eta": 1, "groups_per_step": 4})
    with pytest.raises(AttributeError):
        create_sampler(None, "reserve_occupy.integrations.nemo_rl:NoSuchSampler", {})
