"""Reserve–Occupy inside verl 0.9.1 (reserve_occupy.integrations.verl), on verl's real classes
and a real TransferQueue on a local Ray bound to 127.0.0.1.

The sampler runs through the same rollout schedules as verl's own ``ReplayBufferAsync`` with
``drop`` and ``wait`` (tests/integrations/verl_schedule.py): it trains every group within eta
and drops none, where ``drop`` loses groups and ``wait`` stalls. The trainer subclass runs
verl's own ``_build_replay_buffer``, ``on_train_begin``, ``step`` / ``prepare_step`` /
``_step_once``, ``_add_prompts_to_generate`` / ``_submit_batch_to_rollout`` and ``on_step_end``;
what needs GPUs inside ``_step_once`` (log-probs, advantages, the actor update) and the
checkpoint manager are replaced by recorders (docs/porting/verl.md names them).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transfer_queue", reason="verl extra not installed")
pytest.importorskip("verl.trainer.ppo.v1.replay_buffer", reason="verl is not installed")

from tests.integrations import verl_schedule as vs  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.verl]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tq_on_loopback():
    """One local Ray (127.0.0.1 only) and one TransferQueue for the whole module."""
    psutil = pytest.importorskip("psutil")
    import ray
    import transfer_queue as tq

    from runtime.ray_backend import loopback

    loopback.pin()
    t0 = time.monotonic()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(vs.ONE_STORAGE_UNIT)
    print(f"\nRay + TransferQueue up in {time.monotonic() - t0:.1f} s")
    try:
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {loopback.LOOPBACK}
        assert loopback.exposed(psutil.Process().children(recursive=True)) == []
        yield tq
    finally:
        tq.close()
        ray.shutdown()


@pytest.mark.parametrize("eta", [1, 2])
def test_trained_within_eta_nothing_dropped_beside_verl_as_shipped(tq_on_loopback, eta):
    drop, wait, ours = vs.compare(eta, seed=0, steps=8, batch_size=8)
    for r in (drop, wait, ours):
        assert len(r.trained) == 8 * 8
    assert ours.max_staleness <= eta and ours.dropped == 0
    assert ours.submitted <= 8 * 8 + (eta + 1) * 8  # trained, plus at most the open buffers
    # the same schedule makes verl as shipped pay: drop loses groups, wait stalls
    assert drop.dropped > 0 and drop.max_staleness <= eta
    assert wait.dropped == 0 and wait.wait_s > drop.wait_s
    assert ours.wait_s <= wait.wait_s


def test_chunks_of_a_batch_for_parameter_sync_step(tq_on_loopback):
    vs.clear_partition()
    rollout = vs.Rollout(vs.durations(300, seed=3))
    buf = vs.protocol_buffer(1, 8, rollout.submit, parameter_sync_step=4)
    r = vs.play("ours", buf, rollout, steps=4, batch_size=8, parameter_sync_step=4,
                protocol=True)
    assert len(r.trained) == 32 and r.max_staleness <= 1
    assert [b.version for b in buf.trained] == [0, 1, 2, 3]  # one consume per global step
    vs.clear_partition()


def test_failed_groups_are_aborted_and_readmitted(tq_on_loopback):
    sched = vs.durations(200, seed=1)
    rollout = vs.Rollout(sched, fail_every=7)
    vs.clear_partition()
    buf = vs.protocol_buffer(1, 8, rollout.submit)
    r = vs.play("ours", buf, rollout, steps=4, batch_size=8, protocol=True)
    aborted = [e.unit_id for e in buf.controller.events if e.op == "abort"]
    assert aborted and r.failed == len(aborted)
    assert len(r.trained) == 32 and r.max_staleness <= 1
    assert buf.controller.version == 4
    vs.clear_partition()


def test_groups_without_signal_are_filtered_and_readmitted(tq_on_loopback):
    """DAPO through verl's own classifier (``_dapo_filtered_keys`` on ``rm_scores``)."""
    vs.clear_partition()
    rollout = vs.Rollout(vs.durations(200, seed=4), no_signal_every=5)
    buf = vs.protocol_buffer(1, 8, rollout.submit, filter_groups_metric="reward")
    r = vs.play("ours", buf, rollout, steps=4, batch_size=8, protocol=True)
    filtered = {e.unit_id for e in buf.controller.events if e.op == "filter"}
    trained = {u for b in buf.trained for u in b.unit_ids}
    assert filtered and not filtered & trained
    assert len(r.trained) == 32 and r.max_staleness <= 1 and r.dropped == 0
    vs.clear_partition()


def test_a_prompt_that_never_finishes_is_released_by_the_fail_safe(tq_on_loopback):
    vs.clear_partition()
    sched = vs.durations(200, seed=5, tail=0.0)  # no stragglers: nothing else waits long
    sched[3] = 1e9  # the fourth prompt admitted never finishes
    rollout = vs.Rollout(sched)
    buf = vs.protocol_buffer(1, 8, rollout.submit, clock=rollout, stuck_timeout_s=2.0)
    r = vs.play("ours", buf, rollout, steps=3, batch_size=8, protocol=True)
    assert len(buf.released) == 1 and len(r.trained) == 24 and r.max_staleness <= 1
    never = next(uid for uid, (t, _, _) in rollout.running.items() if t >= 1e9)
    assert never in buf._discarded  # its results, should they come, are cleared, not trained
    assert buf.escalated == []  # the release was followed by progress
    vs.clear_partition()


def test_fruitless_releases_back_off_then_escalate(tq_on_loopback):
    """From the second step on every prompt hangs until the fail-safe escalates: the head's
    reservations are released and re-admitted (fruitless) at T, T, 2T, 4T; the fourth release
    also aborts the units in flight since before the third (the next buffer's), admission
    refills their slots with prompts that finish, and the run trains on."""
    from tests.integrations.stuck_checks import check_backoff, check_escalation

    class Hanging(vs.Rollout):
        def submit(self, k: int) -> int:
            if self.global_steps >= 2 and not buf.escalated:
                self.schedule[self.submitted:self.submitted + k] = [1e9] * k
            return super().submit(k)

    vs.clear_partition()
    rollout = Hanging(vs.durations(200, seed=6, tail=0.0))
    timeout = 2.0
    buf = vs.protocol_buffer(1, 8, rollout.submit, clock=rollout, stuck_timeout_s=timeout)
    release_times: list[float] = []
    release = buf._maybe_release_stuck

    def timed_release() -> None:
        before = len(buf.released)
        release()
        if len(buf.released) > before:
            release_times.append(rollout.now)

    buf._maybe_release_stuck = timed_release
    r = vs.play("ours", buf, rollout, steps=4, batch_size=8, protocol=True)
    assert len(r.trained) == 32 and r.max_staleness <= 1  # the livelock ended
    assert len(release_times) == 4 and len(buf.released) == 4 * 8
    check_backoff(release_times, timeout, 0.05)
    escalated = check_escalation(buf.controller.events, buf.escalated)
    assert len(escalated) == 8  # the next buffer's hung units, admitted at step 3's start
    assert {u for u, unit in buf._unit_of.items() if unit in escalated} == set()
    vs.clear_partition()


def test_verl_settings_that_would_drop_or_stall_are_refused():
    from reserve_occupy.integrations.verl import ReserveOccupyReplayBuffer, VerlIntegrationError

    base = dict(trainer_mode="separate_async", trainer_config={}, max_off_policy_strategy="drop",
                refill_fn=lambda k: k)
    good = {"max_staleness": 1, "batch_size": 8}
    with pytest.raises(VerlIntegrationError, match="max_off_policy_threshold=null"):
        ReserveOccupyReplayBuffer(max_off_policy_threshold=8, sampler_kwargs=good, **base)
    with pytest.raises(VerlIntegrationError, match="max_staleness is not set"):
        ReserveOccupyReplayBuffer(max_off_policy_threshold=None,
                                  sampler_kwargs={"batch_size": 8}, **base)
    with pytest.raises(VerlIntegrationError, match="unknown sampler_kwargs"):
        ReserveOccupyReplayBuffer(max_off_policy_threshold=None,
                                  sampler_kwargs={**good, "eta": 1}, **base)
    with pytest.raises(VerlIntegrationError, match="not divisible"):
        ReserveOccupyReplayBuffer(**{**base, "trainer_config": {"parameter_sync_step": 3}},
                                  max_off_policy_threshold=None, sampler_kwargs=good)


_KW = "trainer.v1.sampler.sampler_kwargs"


@pytest.mark.parametrize("key, value, says", [
    ("max_staleness", 1.7, "integer"),  # was truncated to 1
    ("max_staleness", True, "integer"),  # was read as 1
    ("max_staleness", "1", "integer"),  # was a plain ValueError for other strings
    ("max_staleness", -1, ">= 0"),
    ("max_staleness", 5000, "<= 1,024"),  # the controller's own limit, under verl's key
    ("batch_size", 8.0, "integer"),
    ("batch_size", False, "integer"),
    ("batch_size", 0, ">= 1"),
    ("poll_interval", math.inf, "finite"),  # was accepted: a poll that never comes
    ("poll_interval", math.nan, "finite"),
    ("poll_interval", 0, "> 0"),
    ("poll_interval", "0.5", "number of seconds"),
    ("poll_interval", True, "number of seconds"),
    ("stuck_timeout_s", math.inf, "finite"),  # off is null
    ("stuck_timeout_s", "600", "number of seconds"),
    ("stuck_timeout_s", -5, "> 0"),
    ("filter_groups_metric", 3, "metric name"),
    ("filter_groups_metric", " ", "metric name"),
])
def test_a_bad_sampler_setting_is_a_typed_error_naming_its_key(key, value, says):
    from reserve_occupy.integrations.verl import ReserveOccupyReplayBuffer, VerlSettingError

    with pytest.raises(VerlSettingError) as caught:
        ReserveOccupyReplayBuffer(trainer_mode="separate_async", trainer_config={},
                                  max_off_policy_threshold=None, max_off_policy_strategy="drop",
                                  sampler_kwargs={"max_staleness": 1, "batch_size": 8, key: value},
                                  refill_fn=lambda k: k)
    err = caught.value
    assert err.key == f"{_KW}.{key}"
    assert err.value is value or err.value == value
    assert str(err).startswith(f"{_KW}.{key}=") and says in str(err) and "\n" not in str(err)


@pytest.mark.parametrize("trainer_config, sampler_kwargs, key", [
    ({"parameter_sync_step": 2.5}, {"max_staleness": 1, "batch_size": 8},
     "trainer.v1.separate_async.parameter_sync_step"),
    ({"parameter_sync_step": True}, {"max_staleness": 1, "batch_size": 8},
     "trainer.v1.separate_async.parameter_sync_step"),
    ({}, ["max_staleness", 1], _KW),
])
def test_the_trainer_section_and_the_kwargs_block_are_checked_too(trainer_config,
                                                                    sampler_kwargs, key):
    from reserve_occupy.integrations.verl import ReserveOccupyReplayBuffer, VerlSettingError

    with pytest.raises(VerlSettingError) as caught:
        ReserveOccupyReplayBuffer(trainer_mode="separate_async", trainer_config=trainer_config,
                                  max_off_policy_threshold=None, max_off_policy_strategy="drop",
                                  sampler_kwargs=sampler_kwargs, refill_fn=lambda k: k)
    assert caught.value.key == key


def test_an_integration_error_from_verl_s_task_runner_is_found_behind_ray_s_wrapper():
    from ray.exceptions import RayTaskError

    from reserve_occupy.integrations.verl import VerlSettingError, integration_error

    err = VerlSettingError(f"{_KW}.max_staleness", 1.7, "must be an integer >= 0")
    wrapped = RayTaskError("run", "Traceback (most recent call last):\n  ...", err)
    assert integration_error(wrapped.as_instanceof_cause()) is err
    try:
        raise RuntimeError("the job failed") from wrapped
    except RuntimeError as exc:
        assert integration_error(exc) is err
    assert integration_error(ValueError("not ours")) is None


def test_the_entry_point_reports_its_own_error_in_one_line_and_exit_2(tmp_path):
    """``python -m reserve_occupy.integrations.verl`` with verl's Hydra config: a trainer mode
    that is not ours is one line on stderr and exit status 2, not a Hydra traceback (exit 1)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-m", "reserve_occupy.integrations.verl",
                          "trainer.v1.trainer_mode=separate_async"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "Error executing job" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last == ("error: trainer.v1.trainer_mode=separate_async: use "
                    "reserve_occupy_colocate_async or reserve_occupy_separate_async")


# ---------------------------------------------------------------- the trainer subclass --------

class _Agents:
    """verl's AgentLoopManager seen from the trainer: ``generate_sequences(batch)``, after
    ``_submit_batch_to_rollout`` tagged the prompts ``pending``; the schedule's clock does the
    rest."""

    def __init__(self, rollout: vs.Rollout) -> None:
        self.rollout = rollout

    def generate_sequences(self, batch) -> None:
        r = self.rollout
        for uid in list(batch["uid"]):
            r.running[uid] = (r.now + r.schedule[r.submitted], r.global_steps, r.submitted)
            r.stamps[uid] = r.global_steps
            r.submitted += 1


class _Weights:
    """verl's CheckpointEngineManager as the colocate trainer calls it: records the calls."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def update_weights(self, global_steps=None):
        self.calls.append(("update_weights", global_steps))

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name,))


def _trainer(rollout: vs.Rollout, calls: list, eta: int, batch_size: int):
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.utils.dataset.rl_dataset import collate_fn

    from reserve_occupy.integrations.verl import register

    cls = register()["reserve_occupy_colocate_async"]
    t = cls.__new__(cls)  # verl's __init__ starts workers; set what the hooks read instead
    t.config = OmegaConf.create({
        "data": {"train_batch_size": batch_size, "gen_batch_size": 1},
        "algorithm": {},
        "actor_rollout_ref": {"rollout": {"temperature": 1.0}},
        "skip": {"rollout_tq": {"enable": False}},
        "trainer": {"critic_warmup": 0, "v1": {
            "trainer_mode": "reserve_occupy_colocate_async",
            "colocate_async": {"num_warmup_batches": 1},
            "reserve_occupy_colocate_async": {"num_warmup_batches": 1},
            "sampler": {"max_off_policy_threshold": None, "max_off_policy_strategy": "drop",
                        "custom_sampler": {"path": "pkg://reserve_occupy.integrations.verl",
                                           "name": "ReserveOccupyReplayBuffer"},
                        "sampler_kwargs": {"max_staleness": eta, "batch_size": batch_size,
                                           "poll_interval": 0.05}}}}})
    t.trainer_mode = "reserve_occupy_colocate_async"
    t.parameter_sync_step = 1
    t.replay_buffer = t._build_replay_buffer()  # verl's own loader and constructor call
    prompts = [{"raw_prompt": np.array([f"{i}+{i}="], dtype=object),
                "input_ids": torch.tensor([i, i])} for i in range(400)]
    t.train_dataloader = StatefulDataLoader(prompts, batch_size=1, collate_fn=collate_fn)
    t.train_dataloader_it = None
    t.agent_loop_manager = _Agents(rollout)
    t.checkpoint_manager = _Weights(calls)
    t.curr_step_profile = False
    t.use_reference_policy = t.use_critic = False
    t.reward_loop_manager = type("R", (), {"reward_loop_worker_handles": []})()
    for stage in ("_balance_batch", "_compute_old_log_prob", "_compute_advantage",
                  "_update_actor"):  # the GPU stages of _step_once
        setattr(t, stage, lambda batch, metrics=None, **_: batch)
    publish = t.replay_buffer.publish

    def recorded_publish(global_steps):
        calls.append(("publish", global_steps))
        publish(global_steps)

    t.replay_buffer.publish = recorded_publish

    def poll(partition_id, last_debug_time):
        rollout.advance(0.05)
        return last_debug_time

    t.replay_buffer._wait_for_next_poll = poll
    return t


def test_the_trainer_admits_through_verl_and_publishes_after_update_weights(tq_on_loopback):
    import transfer_queue as tq

    from reserve_occupy.integrations.verl import ReserveOccupyReplayBuffer

    vs.clear_partition()
    rollout = vs.Rollout(vs.durations(400, seed=2))
    calls: list = []
    eta, b, steps = 1, 4, 4
    t = _trainer(rollout, calls, eta, b)
    assert type(t.replay_buffer) is ReserveOccupyReplayBuffer
    t.global_steps = 1
    rollout.global_steps = 1
    t.on_train_begin()  # verl's: the warm-up, which admits (eta + 1) * B instead
    assert rollout.submitted == (eta + 1) * b
    trained = []
    for _ in range(steps):
        t.timing_raw = {}
        batch = t.step({}, t.timing_raw)  # verl's step: prepare_step, then _step_once
        trained += [t.global_steps - rollout.stamps[k.split("_")[0]] for k in batch.keys]
        rollout.advance(1.0)
        t.on_step_end()
        tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
        t.global_steps += 1
        rollout.global_steps = t.global_steps
    assert len(trained) == steps * b * rollout.sessions and max(trained) <= eta
    updates = [c for c in calls if c[0] in ("update_weights", "publish")]
    assert updates == [(op, s) for s in range(1, steps + 1)
                       for op in ("update_weights", "publish")]
    assert t.replay_buffer.controller.version == steps
    # nothing entered TransferQueue but through admission: every submission was reserved
    reserved = sum(1 for e in t.replay_buffer.controller.events if e.op == "reserve")
    assert reserved == rollout.submitted
    vs.clear_partition()


def test_the_trainer_refuses_verl_own_replay_buffer():
    from omegaconf import OmegaConf

    from reserve_occupy.integrations.verl import VerlIntegrationError, register

    cls = register()["reserve_occupy_colocate_async"]
    t = cls.__new__(cls)
    t.replay_buffer = vs.verl_buffer("drop", 8, lambda k: k)  # what verl builds by default
    cfg = OmegaConf.create({"data": {"train_batch_size": 8}})
    with pytest.raises(VerlIntegrationError, match="custom_sampler.path=pkg://reserve_occupy"):
        t._check_sampler(cfg)


def test_both_trainers_are_registered_with_verl_once():
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync

    from reserve_occupy.integrations.verl import register, task_runner_class

    first = register()
    assert register() is first  # a second call (a second import in the actor) is a no-op
    assert issubclass(get_trainer_cls("reserve_occupy_colocate_async"), PPOTrainerColocateAsync)
    assert issubclass(get_trainer_cls("reserve_occupy_separate_async"), PPOTrainerSeparateAsync)
    from verl.trainer.main_ppo import TaskRunnerV1

    runner = task_runner_class().__ray_actor_class__
    assert issubclass(runner, TaskRunnerV1.__ray_actor_class__)
