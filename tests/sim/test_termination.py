"""Every simulated run ends: a policy that can make no progress raises ``SimulationStalled``
(exit status 1 from the command line) instead of looping. One test per detector of
``reserve_occupy_sim.model.core`` ("Termination")."""

from __future__ import annotations

import pytest

from runtime.cli import main
from reserve_occupy_sim.model import core
from reserve_occupy_sim.model.core import Policy, SimulationStalled, Simulator
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.runner import RunSpec, simulate
from reserve_occupy_sim.model.workload import MathReasoningShape, generate


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seconds", ["0.5", "0.01"])
def test_a_stuck_timeout_shorter_than_any_group_backs_off_and_the_run_ends(seconds, capsys):
    # With a fixed timeout every expiry aborts the head's reservations and re-admits fresh
    # groups whose prefill alone outlasts it: the run loops at 0/2 batches until the idle-timer
    # detector stops it (exit 1). A release followed by no placement doubles the next wait
    # (reserve_occupy.stuck), so re-admitted groups get the time they need.
    rc = main(["simulate", "--stuck-timeout", seconds, "--policy", "reserve_occupy", "--eta",
               "1", "--batches", "2", "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "SimulationStalled" not in captured.err


@pytest.mark.timeout(60)
def test_the_timeout_still_works_when_groups_can_finish():
    workload = generate(0, MathReasoningShape(groups=256))
    result, _ = simulate(RunSpec("reserve_occupy", 1, 2, options=(("stuck_timeout_s", 1.0),)),
                         workload, preset("qwen3-8b-h20"))
    assert result.settings["released_groups"] > 0  # the timer fired and the run finished


class Discarder(Policy):
    """Never forms a batch: admits while there is room and drops every finished group."""

    name = "discarder"

    def admit(self) -> None:
        while self.sim.rollout_has_room():
            self.sim.admit()

    def on_group_done(self, group) -> None:
        self.sim.drop(group.requests)

    def take_batch(self):
        return None


@pytest.mark.timeout(60)
def test_a_policy_that_never_forms_a_batch_stalls(monkeypatch):
    # The workload is cyclic: without the event limit, admissions and completions go on
    # for ever.
    monkeypatch.setattr(core, "MAX_EVENTS_PER_BATCH", 2_000)
    sim = Simulator(Discarder(1), generate(0, MathReasoningShape(groups=64)), preset("toy"),
                    batches=1, batch_size=1)
    with pytest.raises(SimulationStalled, match="events since the last publish"):
        sim.run()
