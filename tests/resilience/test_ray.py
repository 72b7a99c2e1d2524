"""The Ray backend on a local cluster: training with two vLLM engine actors and a trainer actor
(weights through the object store), surviving the death of an engine actor, no Ray process left
behind; and Ray stays optional: nothing outside ``runtime/ray_backend`` imports it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.config import load_config
from reserve_occupy_porting.checker import STRICT, check

ROOT = Path(__file__).resolve().parents[2]


def test_ray_is_imported_only_by_the_ray_backend():
    code = ("import sys; import runtime.cli, runtime.driver, runtime.session, runtime.train, "
            "runtime.recovery.resume, reserve_occupy_faults.harness, reserve_occupy_faults.cli; "
            "assert 'ray' not in sys.modules, 'ray was imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    from runtime.ray_backend import loopback
    from runtime.ray_backend.backend import _env

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    t0 = time.monotonic()
    loopback.pin()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": _env()})
    print(f"\nlocal Ray cluster up in {time.monotonic() - t0:.1f} s")
    # on 127.0.0.1 only: the node table, and every port the GCS, raylet, workers and agents
    # listen on
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {loopback.LOOPBACK}
    assert loopback.listening(me.children(recursive=True))
    assert loopback.exposed(me.children(recursive=True)) == []
    yield ray
    ray.shutdown()
    deadline = time.monotonic() + 30
    while True:
        left = [p for p in me.children(recursive=True) if p.pid not in before
                and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"Ray left processes running: {[p.name() for p in left]}"


def _cfg(tmp_path: Path, **overrides):
    base = {"run.backend": "ray", "run.eval_prompts": 0, "run.plot": False, "run.progress": False,
            "run.output_dir": str(tmp_path), "staleness.batch_size": 4,
            "staleness.group_size": 4, "rollout.engines": 2, "run.steps": 4}
    base.update(overrides)
    return load_config(None, base)


def _trace_ok(path: Path) -> bool:
    with path.open() as f:
        return check(f, STRICT).ok


@pytest.mark.ray
@pytest.mark.vllm
@pytest.mark.slow
def test_training_on_ray_with_vllm_engine_actors(ray_cluster, tmp_path):
    from runtime.data import load_prompts
    from runtime.models.tiny import ensure_tiny_model
    from runtime.ray_backend import RayBackend
    from runtime.session import run_training
    from runtime.tasks.arithmetic import ExactAnswerReward

    ray = ray_cluster
    model = ensure_tiny_model(log=None)
    cfg = _cfg(tmp_path, **{"run.steps": 5, "rollout.max_num_seqs": 32})
    t0 = time.monotonic()

    async def main():
        cluster = await RayBackend.start(cfg, model, tmp_path)
        started = time.monotonic() - t0
        try:
            assert ray.available_resources().get("CPU") == 1.0  # 2 engines + trainer, 1 each
            result = await run_training(cfg, model, load_prompts(), ExactAnswerReward(),
                                        tmp_path, log=lambda _: None, cluster=cluster)
            loaded = [ray.get(e.handle.loaded.remote()) for e in cluster.rollout.engines]
            _, final = ray.get(cluster.trainer_handle.export.remote(cfg.run.steps))
            return started, result, loaded, final
        finally:
            await cluster.close()

    started, result, loaded, final = asyncio.run(main())
    assert len(result.rows) == 5
    assert all(r["token_lag_max"] <= 1 for r in result.rows)
    # every engine actor runs exactly the trainer's final weights, fetched from the store
    assert loaded == [(5, final), (5, final)]
    assert _trace_ok(tmp_path / "events.jsonl")
    print(f"Ray + 2 vLLM engine actors: actors up in {started:.1f} s, whole test "
          f"{time.monotonic() - t0:.1f} s")


@pytest.mark.ray
@pytest.mark.slow
def test_an_engine_actor_that_dies_is_replaced(ray_cluster, tmp_path):
    from runtime.models.tiny import ensure_tiny_model
    from runtime.ray_backend import RayBackend
    from runtime.session import run_training
    from runtime.tasks.base import Prompt

    from .rewards import parity

    ray = ray_cluster
    model = ensure_tiny_model(log=None)
    cfg = _cfg(tmp_path, **{"rollout.backend": "fake", "rollout.fake_token_s": 0.01,
                            "run.steps": 8})
    prompts = [Prompt(f"{i % 10}+{i // 10}=", str(i % 10 + i // 10), i) for i in range(50)]
    t0 = time.monotonic()

    async def main():
        cluster = await RayBackend.start(cfg, model, tmp_path)
        victim = cluster.rollout.engines[0].handle

        def hook(driver):
            # the session's driver keeps no step records (keep_records=False): count the
            # steps as they are handed to the metrics sink
            steps, sink = [], driver.on_step

            def on_step(record):
                steps.append(record.step)
                sink(record)

            driver.on_step = on_step

            async def kill_after_two_steps():
                while len(steps) < 2:
                    await asyncio.sleep(0.01)
                ray.kill(victim)  # the engine actor's process dies with its requests

            driver._spawn(kill_after_two_steps())

        try:
            result = await run_training(cfg, model, prompts, parity, tmp_path,
                                        log=lambda _: None, driver_hook=hook, cluster=cluster)
            pool = cluster.rollout
            # On a slow machine the run can finish on the surviving engine while the
            # replacement is still starting.
            await asyncio.wait_for(pool.settle(), 120)
            replacement = pool.engines[0].handle
            loaded = ray.get(replacement.loaded.remote())
            _, final = ray.get(cluster.trainer_handle.export.remote(cfg.run.steps))
            return result, pool, replacement is not victim, loaded, final
        finally:
            await cluster.close()

    result, pool, replaced, loaded, final = asyncio.run(main())
    assert len(result.rows) == 8 and pool.crashes == 1 and pool.restarts == 1 and replaced
    assert loaded == (8, final)  # the replacement caught up with the weights
    errors = [e for e in result.driver.notes if e["event"] == "request_error"]
    assert errors and all("EngineCrashed" in e["error"] for e in errors)
    assert _trace_ok(tmp_path / "events.jsonl")
    print(f"engine actor killed and replaced: {time.monotonic() - t0:.1f} s")


@pytest.mark.ray
def test_a_run_that_asks_for_more_than_the_cluster_has_is_refused_before_any_actor(
        ray_cluster, tmp_path):
    # Ray queues actors it cannot place and waits for ever, printing nothing. The cluster
    # here has 4 CPUs; 4 engine actors and the trainer ask for 5.
    from runtime.ray_backend import RayBackend
    from runtime.ray_backend.preflight import ClusterTooSmall

    cfg = _cfg(tmp_path, **{"rollout.backend": "fake", "rollout.engines": 4})
    with pytest.raises(ClusterTooSmall, match=r"asks for 5 CPU in all \(4 engine actor\(s\) x "
                                              r"1 CPU \+ the trainer actor's 1 CPU\), the "
                                              r"cluster has 4 CPU"):
        asyncio.run(RayBackend.start(cfg, Path("unused"), tmp_path))
    assert ray_cluster.is_initialized()  # a cluster it did not start is left running


@pytest.mark.ray
@pytest.mark.slow
def test_keep_refit_on_ray_engine_actors(ray_cluster, tmp_path):
    # rollout.refit keep through the Ray engine actors (fake engines): syncs freeze requests in
    # the actors, which continue them; tokens after a refit record the new version.
    from runtime.models.tiny import ensure_tiny_model
    from runtime.ray_backend import RayBackend
    from runtime.session import run_training
    from runtime.tasks.base import Prompt

    from .rewards import parity

    model = ensure_tiny_model(log=None)
    cfg = _cfg(tmp_path, **{"rollout.backend": "fake", "rollout.fake_token_s": 0.03,
                            "run.steps": 6, "rollout.refit": "keep",
                            "staleness.max_staleness": 2})
    prompts = [Prompt(f"{i % 10}+{i // 10}=", str(i % 10 + i // 10), i) for i in range(50)]
    seen = []

    segments = []

    def hook(driver):
        train_step = driver.trainer.train_step
        generate = driver.rollout.generate

        async def spy(batch):
            seen.append(batch)
            return await train_step(batch)

        async def record(request):
            seg = await generate(request)
            segments.append(seg)
            return seg

        driver.trainer.train_step = spy
        driver.rollout.generate = record

    async def main():
        cluster = await RayBackend.start(cfg, model, tmp_path)
        try:
            return await run_training(cfg, model, prompts, parity, tmp_path,
                                      log=lambda _: None, driver_hook=hook, cluster=cluster)
        finally:
            await cluster.close()

    result = asyncio.run(main())
    assert len(result.rows) == 6 and result.driver.counts["resumed"] == 0
    samples = [(b, g, s) for b in seen for g in b.groups for s in g.samples]
    assert all(s.segments == 1 for _, _, s in samples)
    # Some request ran across a refit: checked on every segment the actors returned, trained
    # or not (a carried group may train after the last step). Still timing-dependent (the fake
    # engines run on the wall clock in the actors): that a sync finds a request decoding.
    assert any(0 < i < len(seg.token_ids) for seg in segments for i, _ in seg.refits)
    for _, _, s in samples:  # the trained ones split where a refit was
        assert list(s.versions) == sorted(s.versions)
    assert all(b.version - min(s.versions) <= 2 for b, _, s in samples)
    assert _trace_ok(tmp_path / "events.jsonl")


@pytest.mark.ray
@pytest.mark.slow
def test_sharded_trainer_ranks_as_ray_actors_in_one_placement_group(ray_cluster, tmp_path):
    # trainer.world_size 2 on Ray: two rank actors in one STRICT_PACK placement group,
    # rendezvous on 127.0.0.1; three steps with fake engine actors take the single-process
    # trainer's update (replayed here on the batches the run trained, within the sharded
    # tests' tolerance); a rank actor that dies fails the next step naming it.
    import torch
    from safetensors.torch import load as load_blob

    from runtime.config import TrainerConfig
    from runtime.models.tiny import ensure_tiny_model
    from runtime.ray_backend import RayBackend
    from runtime.ray_backend.loopback import LOOPBACK
    from runtime.ray_backend.ranks import RayShardedTrainer
    from runtime.session import run_training
    from runtime.tasks.base import Prompt
    from runtime.trainer.grpo import GRPOTrainer
    from runtime.trainer.sharded import RankLost

    from ..runtime.test_sharded_trainer import MAX_TOL, MEAN_TOL, SETTINGS, _apart
    from .rewards import parity

    ray = ray_cluster
    model = ensure_tiny_model(log=None)
    settings = {f"trainer.{k}": v for k, v in SETTINGS.items()}
    cfg = _cfg(tmp_path, **{"rollout.backend": "fake", "rollout.fake_token_s": 0.01,
                            "run.steps": 3, "trainer.world_size": 2, **settings})
    prompts = [Prompt(f"{i % 10}+{i // 10}=", str(i % 10 + i // 10), i) for i in range(50)]
    seen = []

    def hook(driver):
        train_step = driver.trainer.train_step

        async def spy(batch):
            seen.append(batch)
            return await train_step(batch)

        driver.trainer.train_step = spy

    t0 = time.monotonic()

    async def main():
        cluster = await RayBackend.start(cfg, model, tmp_path)
        started = time.monotonic() - t0
        try:
            tr = cluster.trainer
            assert isinstance(tr, RayShardedTrainer)
            table = ray.util.placement_group_table(tr.pg)
            where = tr.placement()
            result = await run_training(cfg, model, prompts, parity, tmp_path,
                                        log=lambda _: None, driver_hook=hook, cluster=cluster)
            final = await tr.export_weights(cfg.run.steps)
            blob = ray.get(final.ref)
            trained = list(seen)
            ray.kill(tr.handles[1])  # rank 1's actor dies between steps
            with pytest.raises(RankLost, match=r"^trainer rank 1 \(Ray actor\) died while "
                                               r"in 'train'"):
                await tr.train_step(seen[-1])
            with pytest.raises(RankLost, match="is stopped"):
                await tr.train_step(seen[-1])
            return started, table, where, result, blob, trained
        finally:
            await cluster.close()

    started, table, where, result, blob, trained = asyncio.run(main())
    assert len(result.rows) == 3 and len(trained) == 3
    assert table["strategy"] == "STRICT_PACK" and len(table["bundles"]) == 2
    assert table["state"] == "CREATED" or table["state"] == "REMOVED"
    nodes, addrs, pids, groups = zip(*where)
    assert len(set(pids)) == 2 and len(set(nodes)) == 1 and set(addrs) == {LOOPBACK}
    assert set(groups) == {table["placement_group_id"]}
    ref = GRPOTrainer(model, TrainerConfig(**SETTINGS), tmp_path / "ref",
                      cfg.rollout.temperature, seed=cfg.run.seed)
    for batch in trained:
        ref._train(batch)
    weights = load_blob(blob)
    mean, top = _apart(weights, {k: v.detach().float() for k, v in ref._state_dict().items()})
    print(f"Ray rank actors: up in {started:.1f} s, apart from one process: mean {mean:.1e}, "
          f"max {top:.1e}; whole test {time.monotonic() - t0:.1f} s")
    assert mean < MEAN_TOL and top < MAX_TOL, (mean, top)
    assert _trace_ok(tmp_path / "events.jsonl")
