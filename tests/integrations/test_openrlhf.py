"""Reserve–Occupy inside OpenRLHF 0.11.2 (reserve_occupy.integrations.openrlhf), on OpenRLHF's
real async actors, its SamplesGenerator and train_step, its VLLMLock and a loopback Ray
(tests/integrations/openrlhf_harness.py says what runs and what stands in for the GPU side).

Every run's controller log passes check-trace (strict); the staleness of every trained sample
is measured twice: by the controller (batch version - v_traj) and by the engine, which stamps
each token with the weight version it was made under (trainer's version - first token's).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.integrations import openrlhf_harness as h

if importlib.util.find_spec("openrlhf") is None:  # the package alone: OpenRLHF loads lazily
    pytest.skip("OpenRLHF is not installed (make install puts openrlhf==0.11.2 in)",
                allow_module_level=True)

pytestmark = [pytest.mark.ray, pytest.mark.openrlhf]


@pytest.fixture(scope="module")
def upstream():
    """OpenRLHF's async trainer module (imports torch, transformers and vLLM: seconds)."""
    return h.import_openrlhf()


@pytest.fixture(scope="module")
def lock(upstream):
    """One local Ray (127.0.0.1 only) and one OpenRLHF VLLMLock for the module (its worker
    imports OpenRLHF, seconds)."""
    import ray

    h.ray_init()
    try:
        yield upstream.VLLMLock.remote()
    finally:
        ray.shutdown()


def _check_run(r: h.Result, eta: int, batch_size: int = 4) -> None:
    """The bound by both measures, v_traj never newer than a unit's first token, the trace."""
    report = h.check_trace(r.trace)
    assert report.ok, report.problems[:3]
    assert r.staleness and max(r.staleness) <= eta  # measured on the engine's stamps
    v_traj = {prompt: (unit, v) for unit, v, prompt in r.admitted}
    for version, first, _, _, prompt in r.trained:
        unit, v = v_traj[f"p{prompt}"]
        assert v <= first  # reserved no later than its first token's weights
        assert version - v <= eta
    for b in r.batches:
        assert len(b["units"]) == batch_size
        assert all(0 <= s <= eta for _, _, s in b["units"])


@pytest.mark.parametrize("partial", [False, True], ids=["whole", "partial_rollout"])
def test_trained_within_eta_on_openrlhf_actors_and_the_trace_passes_check_trace(lock, partial):
    sched = h.durations(16, seed=0)
    sched[1] = sched[6] = 2.0  # stragglers that OpenRLHF's queue would train late
    r = h.run("ro", eta=1, partial=partial, sched=sched, lock=lock)
    _check_run(r, eta=1)
    assert r.steps == 4 and len(r.trained) == 16 * 2  # every group trained, n = 2 samples
    assert r.dropped == 0 and r.stats["untrained"] == 0
    if partial:  # generation ran through broadcasts: tokens of one sample span versions
        assert r.stats["version"] == 4


def test_groups_without_signal_are_filtered_and_not_trained(lock):
    """OpenRLHF's dynamic filtering (average reward outside the range) becomes ``filter``."""
    sched = h.durations(20, seed=2)
    r = h.run("ro", eta=1, partial=True, sched=sched, lock=lock, flat_every=5)
    _check_run(r, eta=1)
    filtered = [e for e in r.trace if e.get("op") == "filter"]
    assert len(filtered) == 4  # p4, p9, p14, p19
    assert {p for *_, p in r.trained}.isdisjoint({4, 9, 14, 19})
    assert r.steps == 4


def test_a_group_that_never_finishes_is_released_by_the_fail_safe(lock):
    sched = h.durations(24, seed=3, tail=0.0)
    sched[2] = 1e9  # hangs
    r = h.run("ro", eta=1, partial=True, sched=sched, lock=lock, stuck_timeout_s=1.0)
    _check_run(r, eta=1)
    assert r.stats["released"] and r.dropped >= 1
    assert 2 not in {p for *_, p in r.trained}
    assert any(e.get("op") == "release_stuck" for e in r.trace)


class EngineCallFailed(RuntimeError):
    """The work inside the generator's ``fit`` raised (here: the second dispatch to vLLM)."""


@pytest.mark.parametrize("partial, error", [(False, EngineCallFailed),
                                            (True, KeyboardInterrupt)],
                         ids=["whole-error", "partial_rollout-cancelled"])
def test_a_generator_that_fails_frees_the_lock_and_closes_the_broker(upstream, lock, partial,
                                                                     error):
    """The generator's ``fit`` raises (an error; a cancellation, which Ray delivers as
    KeyboardInterrupt in the actor's thread) while it holds OpenRLHF's ``VLLMLock``, with a
    group dispatched and more reserved: the lock is free, the broker closed, every unit it had
    in flight aborted, and the trainer's ``consume`` returns None at once. Before: ``fit`` had
    no try/finally: the lock stayed held (the trainer's next broadcast waited forever) and the
    broker open (its ``consume`` waited for groups that would never come)."""
    import ray

    from reserve_occupy.integrations.openrlhf import StalenessBroker, actor_classes

    fresh = upstream.VLLMLock.remote()  # the module's lock stays usable whatever happens here
    broker = ray.remote(StalenessBroker).options(max_concurrency=16, num_cpus=0).remote(
        1, 4, poll_s=0.01)
    engine = ray.remote(h.ScheduledEngine).options(num_cpus=0).remote([60.0] * 8)
    gen = h.generator(actor_classes()["generator"], h.make_args(4, 2, partial=partial),
                      h.PromptLoader(8), [engine], fresh, broker, None)
    dispatch, calls = gen.samples_generator._dispatch_prompts_to_vllm, []

    def failing(*a, **kw):
        calls.append(a[0])
        if len(calls) == 2:
            raise error("the engine call failed")
        return dispatch(*a, **kw)

    gen.samples_generator._dispatch_prompts_to_vllm = failing
    try:
        with pytest.raises(error):
            gen.fit(episode=0, total_consumed_prompts=0)
        assert len(calls) == 2 and len(gen.admitted) == 1  # one group was generating
        ray.get(fresh.acquire.remote(), timeout=30)  # free: granted at once
        ray.get(fresh.release.remote())
        stats = ray.get(broker.stats.remote())
        assert stats["closed"] and stats["in_flight"] == 0, stats
        assert ray.get(broker.consume.remote(), timeout=30) is None
        assert ray.get(broker.gone.remote(["u0"])) == ["u0"]  # its result would be dropped
    finally:
        for actor in (broker, engine, fresh):
            ray.kill(actor)


# ---------------------------------------------------------------- settings and install --------

@pytest.mark.parametrize("kw, key, says", [
    ({"max_staleness": 1.5}, "--reserve_occupy.max_staleness", "integer"),
    ({"max_staleness": -1}, "--reserve_occupy.max_staleness", ">= 0"),
    ({"max_staleness": True}, "--reserve_occupy.max_staleness", "integer"),
    ({"max_staleness": 5000}, "--reserve_occupy.max_staleness", "1,024"),
    ({"batch_size": 0}, "--rollout.batch_size", ">= 1"),
    ({"stuck_timeout_s": float("inf")}, "--reserve_occupy.stuck_timeout_s", "finite"),
    ({"stuck_timeout_s": "9"}, "--reserve_occupy.stuck_timeout_s", "seconds"),
])
def test_a_bad_setting_is_a_typed_error_naming_its_option(kw, key, says):
    from reserve_occupy.integrations.openrlhf import OpenRLHFSettingError, StalenessBroker

    args = {"max_staleness": 1, "batch_size": 4, **kw}
    eta, b = args.pop("max_staleness"), args.pop("batch_size")
    with pytest.raises(OpenRLHFSettingError) as caught:
        StalenessBroker(eta, b, **args)
    assert caught.value.key == key and says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_openrlhf_settings_the_protocol_cannot_follow_are_refused():
    from reserve_occupy.integrations.openrlhf import (OpenRLHFIntegrationError,
                                                      OpenRLHFSettingError, _check_args)

    args = h.make_args(4, 2, partial=True)
    _check_args(args)
    args.train.async_enable = False
    with pytest.raises(OpenRLHFIntegrationError, match="async_enable"):
        _check_args(args)
    args = h.make_args(4, 2, partial=True)
    args.rollout.vllm_generate_batch_size = 8
    with pytest.raises(OpenRLHFSettingError, match="vllm_generate_batch_size=8"):
        _check_args(args)
    args = h.make_args(4, 2, partial=True)
    args.eval.steps, args.eval.dataset = 10, "eval.jsonl"
    with pytest.raises(OpenRLHFSettingError, match="--eval.steps=10"):
        _check_args(args)


def test_install_puts_the_trainer_where_train_ppo_ray_imports_it(monkeypatch, upstream):
    from reserve_occupy.integrations import openrlhf as plugin

    monkeypatch.setattr(upstream, "PPOTrainerAsync", upstream.PPOTrainerAsync)
    plugin.install(2)
    from openrlhf.trainer.ppo_trainer_async import PPOTrainerAsync  # as train() does

    assert PPOTrainerAsync is plugin.ReserveOccupyPPOTrainerAsync
    assert plugin._SETTINGS["max_staleness"] == 2
    classes = plugin.actor_classes()
    assert issubclass(classes["generator"], upstream.GenerateSamplesActor.__ray_actor_class__)
    assert issubclass(classes["trainer"], upstream.TrainingActor.__ray_actor_class__)


def test_own_options_are_split_off_openrlhf_s_command_line():
    from reserve_occupy.integrations.openrlhf import OpenRLHFSettingError, parse_own_args

    own, rest = parse_own_args(["--reserve_occupy.max_staleness", "2", "--train.async_enable",
                                "--reserve_occupy.stuck_timeout_s=600", "--rollout.batch_size",
                                "8"])
    assert own == {"max_staleness": 2, "stuck_timeout_s": 600.0}
    assert rest == ["--train.async_enable", "--rollout.batch_size", "8"]
    with pytest.raises(OpenRLHFSettingError, match="unknown option"):
        parse_own_args(["--reserve_occupy.eta", "1", "--train.async_enable"])
    with pytest.raises(OpenRLHFSettingError, match="is required"):
        parse_own_args(["--train.async_enable"])


def test_the_entry_point_reports_its_own_error_in_one_line_and_exit_2(tmp_path):
    run = subprocess.run([sys.executable, "-m", "reserve_occupy.integrations.openrlhf",
                          "--reserve_occupy.max_staleness", "1"],
                         cwd=h.ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip().splitlines() == [
        "error: --train.async_enable is not set: the plugin replaces OpenRLHF's async trainer"]


# ---------------------------------------------------------------- a real vLLM engine ----------

@pytest.mark.vllm
@pytest.mark.slow
def test_openrlhf_s_rollout_actor_with_the_vllm_cpu_engine(lock):
    """OpenRLHF's own ``RolloutRayActor`` (vLLM's AsyncLLM on CPU, the project's tiny model)
    behind the plugin, partial rollout on: OpenRLHF's ``SingleTurnAgentExecutor`` generates,
    ``broadcast_to_vllm`` pauses (vLLM ``mode="keep"``) and resumes the real engine around each
    publish. The weights do not change (no trainer here), so the staleness is the controller's."""
    import ray
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
    from transformers import AutoTokenizer

    from runtime.models.tiny import ensure_tiny_model
    from runtime.rollout.env import COMMON, CPU
    from runtime.rollout.vllm_engine import engine_args

    model = ensure_tiny_model(log=None)
    env = {**COMMON, **CPU, "PYTHONPATH": str(h.ROOT)}
    engine = RolloutRayActor.options(
        num_cpus=0, runtime_env={"env_vars": env, "worker_process_setup_hook": h.SETUP_HOOK},
    ).remote(num_gpus=0, full_determinism=False, bundle_indices=None,
             **engine_args(model, max_model_len=128, max_num_seqs=16))
    try:
        texts = [f"{i % 10}+{i // 10}=" for i in range(12)]
        r = h.run("ro + vLLM", eta=1, partial=True, sched=[0.0] * len(texts), lock=lock,
                  batch_size=4, n_samples=2, train_s=0.1, engines=[engine], texts=texts,
                  tokenizer=AutoTokenizer.from_pretrained(str(model)))
    finally:
        ray.kill(engine)
    assert h.check_trace(r.trace).ok
    assert r.steps == 3 and len(r.trained) == 12 * 2
    assert all(tokens > 0 for _, _, _, tokens, _ in r.trained)  # real generations
    assert {p for *_, p in r.trained} == set(texts)
    for b in r.batches:
        assert len(b["units"]) == 4 and all(0 <= s <= 1 for _, _, s in b["units"])
    ops = [e["op"] for e in r.trace[1:]]
    assert ops.count("publish") == 3
