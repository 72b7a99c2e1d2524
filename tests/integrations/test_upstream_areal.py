"""The simulator's AReaL baseline against AReaL's own code (areal==1.0.4), event for event.

* admission: a simulated run drives the real ``StalenessManager`` in lockstep with the
  simulator's ``areal`` policy (same submissions, completions, rejections and weight versions);
  the two capacities must agree at every decision;
* batch contents: every ``wait_results`` call the policy makes is also made on a real
  ``BatchTaskDispatcher`` holding the same finished results; both must return the same ones;
* the input gate: AReaL's real ``active_submit_and_wait`` feeds its input queue ``B`` prompts
  per 1 s wait; its submission times must match the policy's.
"""

from __future__ import annotations

import logging
import threading

import pytest

from . import areal_import  # noqa: E402,F401  (skips without AReaL; keeps asyncio's policy)

from areal.infra.async_task_runner import TimedResult  # noqa: E402
from areal.infra.staleness_manager import StalenessManager  # noqa: E402
from areal.infra.workflow_executor import BatchTaskDispatcher  # noqa: E402

from reserve_occupy_sim.model.core import Simulator  # noqa: E402
from reserve_occupy_sim.model.cost import preset  # noqa: E402
from reserve_occupy_sim.model.filtering import RewardFilter  # noqa: E402
from reserve_occupy_peers.areal import Areal  # noqa: E402
from reserve_occupy_sim.model.workload import MathReasoningShape, generate  # noqa: E402


class _SimVersion:
    def __init__(self, sim):
        self.sim = sim

    def get_version(self):
        return self.sim.version


class LockstepAreal(Areal):
    """The simulator's policy, mirrored into AReaL's real manager and dispatcher."""

    def attach(self, sim) -> None:
        super().attach(sim)
        self.real = StalenessManager(_SimVersion(sim), self.max_concurrent, self.batch_size,
                                     self.eta)
        self.dispatcher = BatchTaskDispatcher(max_queue_size=10**6, task_factory=None,
                                              staleness_manager=self.real)
        self.checked = {"capacity": 0, "waits": 0, "rejected": 0}
        submit = sim.admit

        def admit_and_mirror(*args, **kwargs):  # each submission reaches both, in order
            group = submit(*args, **kwargs)
            self.real.on_rollout_enqueued()
            self.real.on_rollout_submitted()
            return group

        sim.admit = admit_and_mirror

    def capacity(self) -> int:
        ours = super().capacity()
        real = self.real.get_capacity()
        assert ours == real, (self.sim.now, ours, real, self.running, self.accepted)
        self.checked["capacity"] += 1
        return ours

    def on_group_done(self, group) -> None:
        if group.no_grad:
            self.real.on_rollout_rejected()
            self.checked["rejected"] += 1
        else:
            self.real.on_rollout_accepted()
        # the result the runner hands the dispatcher: created at submission, None if rejected
        self.dispatcher._pending_results[group.gid] = TimedResult(
            create_time=group.gid, data=None if group.no_grad else group.gid, task_id=group.gid)
        self.dispatcher._active_task_ids.add(group.gid)
        super().on_group_done(group)
        self.capacity()


class WaitMirror(LockstepAreal):
    """Every wait_results(count) of the policy is also asked of AReaL's real dispatcher."""

    def _wait_results(self, count):
        real = self.dispatcher.wait_results(count, timeout=0, raise_timeout=False)
        ours = super()._wait_results(count)
        if ours is None:
            assert real == [], (count, real)
        else:
            assert (sorted(r for r in real if r is not None)
                    == sorted(g.gid for g in ours if not g.no_grad))
            assert sum(r is None for r in real) == sum(g.no_grad for g in ours)
            self.checked["waits"] += 1
        return ours


@pytest.mark.parametrize("eta,concurrency,rate", [(1, None, 0.0), (2, 48, 0.3), (0, 24, 0.2)])
def test_admission_and_batches_match_areal(eta, concurrency, rate):
    workload = generate(3, MathReasoningShape(groups=256))
    policy = WaitMirror(eta, max_concurrent_rollouts=concurrency)
    sim = Simulator(policy, workload, preset("qwen3-8b-h20"), batches=10, batch_size=8,
                    filtering=RewardFilter(rate) if rate else None).run()
    assert len(sim.ledger.batches) == 10
    assert policy.checked["capacity"] > 100 and policy.checked["waits"] >= 10
    assert (policy.checked["rejected"] > 0) == (rate > 0)


@pytest.mark.slow
def test_input_gate_matches_areal_active_submit_and_wait():
    """B=2, eta=1, C=8, long rollouts: AReaL submits 2 at once and 2 more after its 1 s wait
    timed out; then the count bound (eta + 1) * B = 4 holds the rest. Checked on the order of
    what AReaL does (submissions, timed-out waits), not on wall-clock seconds: the rollouts
    run until the test releases them, so a slow machine changes no step of it."""
    log: list[str] = []  # the dispatcher's thread, in order: "enqueue", "timeout", "results"
    submitted: list[int] = []  # rollouts the count bound let through (AReaL's runner thread)
    release = threading.Event()

    class Recording(StalenessManager):
        def on_rollout_submitted(self):
            submitted.append(len(submitted))
            super().on_rollout_submitted()

    class Version:
        def get_version(self):
            return 0

    async def long_rollout():
        import asyncio

        while not release.is_set():  # runs until the test has seen the gate at work
            await asyncio.sleep(0.01)
        return "done"

    manager = Recording(Version(), max_concurrent_rollouts=8, consumer_batch_size=2,
                        max_staleness=1)
    dispatcher = BatchTaskDispatcher(max_queue_size=128, task_factory=lambda _: long_rollout,
                                     staleness_manager=manager)
    dispatcher.initialize(logger=logging.getLogger("gate"))
    enqueue, wait_results = dispatcher.submit_task_input, dispatcher.wait_results

    def recording_enqueue(task_input):
        log.append("enqueue")
        enqueue(task_input)

    def recording_wait(*args, **kwargs):
        if log.count("timeout") >= 2 and len(submitted) >= 4 and log.count("enqueue") >= 6:
            release.set()  # the gate has shown what it does: let the rollouts finish
        try:
            got = wait_results(*args, **kwargs)
        except TimeoutError:
            log.append("timeout")
            raise
        log.append("results")
        return got

    dispatcher.submit_task_input = recording_enqueue
    dispatcher.wait_results = recording_wait

    class Input:
        def __init__(self, i):
            self.task_id = i

    inputs = (Input(i) for i in range(10**6))
    out: list = []
    worker = threading.Thread(
        target=lambda: out.append(dispatcher.active_submit_and_wait(inputs, batch_size=2)))
    worker.start()
    worker.join(timeout=300)
    release.set()
    dispatcher.destroy()
    assert out and len(out[0]) == 2
    # two inputs per round, one 1 s wait (timed out) between rounds ...
    first = log[:log.index("results")]
    rounds = "".join("E" if e == "enqueue" else "T" for e in first).split("T")
    assert rounds[:2] == ["EE", "EE"], log
    # ... and the count bound (eta + 1) * B = 4: of 6 or more inputs, only 4 rollouts started
    assert first.count("enqueue") >= 6 and submitted == [0, 1, 2, 3]

    policy = Areal(1, max_concurrent_rollouts=8)
    sim = Simulator(policy, generate(0, MathReasoningShape(groups=64)), preset("qwen3-8b-h20"),
                    batches=1, batch_size=2).run()
    sim_seconds = [round(g.t_admit) for g in sim.groups]
    first_batch_at = sim.ledger.batches[0].t_consume
    assert sim_seconds[:4] == [0, 0, 1, 1]
    assert all(g.t_admit >= first_batch_at for g in sim.groups[4:])  # count bound until then
    # without the gate the model admits all four at once: the gate is what matches AReaL
    ungated = Simulator(Areal(1, max_concurrent_rollouts=8, input_gating=False),
                        generate(0, MathReasoningShape(groups=64)), preset("qwen3-8b-h20"),
                        batches=1, batch_size=2).run()
    assert [round(g.t_admit) for g in ungated.groups][:4] == [0, 0, 0, 0]
