"""Ray across nodes on one host: ``reserve-occupy train --backend ray`` on a three-node cluster
(a head for the trainer, two engine nodes), all on 127.0.0.1, with the engine's node killed
mid-run.

The cluster is Ray's own multi-node harness (``ray.cluster_utils.Cluster``: one GCS, one raylet
per node, each with its own object store and custom resources); ``ray start --address`` refuses
to add a node on the loopback switch (runtime/ray_backend/loopback.py). The run is the CLI, a
separate driver joining the cluster (``ray.address``), with the real vLLM CPU engine. The
engine is placed by resource (``engine_node``), the trainer on the head (``trainer_node``).
When the engine's node is removed (its raylet and every process on it killed) the engine's
requests fail, their units are aborted, and the replacement engine is placed on the other
engine node, where it loads the current weights from the object store; the run finishes with
a log that ``check-trace`` accepts (staleness within eta, every reserved unit accounted for).

Slow (vLLM engines starting on a shared 2-core machine): ``make test-multinode`` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reserve_occupy_porting.checker import STRICT, check

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.vllm,
              pytest.mark.skipif(os.environ.get("RO_TEST_MULTINODE") != "1",
                                 reason="multi-node Ray on one host: make test-multinode")]


def _engine_node(ray) -> str | None:
    """The node id of the live engine actor (read from the GCS actor table; no dashboard)."""
    from ray._private import state

    for a in state.actors().values():
        if a.get("ActorClassName", "").endswith("EngineActor") and a.get("State") == "ALIVE":
            return a["Address"]["NodeID"]
    return None


def _rows(out: Path) -> int:
    path = out / "metrics.jsonl"
    return sum(1 for _ in path.open()) if path.exists() else 0


def test_the_engines_node_dies_and_the_engine_moves_to_another(tmp_path):
    psutil = pytest.importorskip("psutil")
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from runtime.models.tiny import ensure_tiny_model
    from runtime.ray_backend import loopback

    loopback.pin()
    ensure_tiny_model(log=None)
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"trainer_node": 1}, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1, resources={"engine_node": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    up = time.monotonic() - t0
    out = tmp_path / "run"
    proc = None
    try:
        table = ray.nodes()
        assert len(table) == 3 and {n["NodeManagerAddress"] for n in table} == {"127.0.0.1"}
        me = psutil.Process()
        assert loopback.exposed(me.children(recursive=True)) == []
        env = {**os.environ, **loopback.ENV, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "runtime", "train", "--backend", "ray",
               "--output-dir", str(out), "--steps", "6", "--eta", "1",
               "--set", f"ray.address={cluster.address}",
               "--set", "ray.engine_resources={num_cpus: 1, engine_node: 1}",
               "--set", "ray.trainer_resources={num_cpus: 1, trainer_node: 1}",
               "--set", "rollout.engines=1", "--set", "staleness.batch_size=4",
               "--set", "staleness.group_size=4", "--set", "rollout.max_tokens=8",
               "--set", "run.eval_prompts=0", "--set", "run.plot=false",
               "--set", "run.progress=false"]
        log = (tmp_path / "train.log").open("w")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 420
        while _rows(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, (tmp_path / "train.log").read_text()[-3000:]
        victim_id = _engine_node(ray)
        victim = next(n for n in nodes if n.node_id == victim_id)
        killed_at = _rows(out)
        cluster.remove_node(victim)  # the raylet and every process on that node
        t_kill = time.monotonic()
        survivor = next(n for n in nodes if n is not victim)
        moved = False  # a live engine actor on the other engine node, seen during the run
        while proc.poll() is None and time.monotonic() < t_kill + 600:
            moved = moved or _engine_node(ray) == survivor.node_id
            time.sleep(0.5)
        rc = proc.wait(timeout=10)
        text = (tmp_path / "train.log").read_text()
        assert rc == 0, text[-3000:]
        assert moved, "the replacement engine was never placed on the other engine node"
        events = [json.loads(line) for line in (out / "events.jsonl").open()]
        with (out / "events.jsonl").open() as f:
            report = check(f, STRICT)
        assert report.ok, report
        aborted = [e for e in events if e.get("op") == "abort" or e.get("event") == "abort"]
        rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
        assert len(rows) == 6 and killed_at < 6
        print(f"\n3-node cluster on 127.0.0.1 up in {up:.1f} s; engine node killed after "
              f"{killed_at} steps; run finished {time.monotonic() - t_kill:.1f} s later with "
              f"{len(aborted)} units aborted; whole test {time.monotonic() - t0:.1f} s")
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        ray.shutdown()
        cluster.shutdown()


def test_no_node_left_for_the_engine_stops_the_run_and_resume_continues(tmp_path):
    """The engine's only node dies: no live node can hold a replacement, so the run stops at
    once with a message naming the resources (instead of waiting forever for a pending actor),
    and ``--resume`` continues the same log once a node with them has joined. Fake engines:
    the placement and the recovery are the point here, not generation."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from runtime.models.tiny import ensure_tiny_model
    from runtime.ray_backend import loopback

    loopback.pin()
    ensure_tiny_model(log=None)
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"trainer_node": 1}, "include_dashboard": False})
    engine_node = cluster.add_node(num_cpus=1, resources={"engine_node": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    out = tmp_path / "run"
    env = {**os.environ, **loopback.ENV, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "runtime", "train", "--backend", "ray",
           "--set", f"ray.address={cluster.address}",
           "--set", "ray.engine_resources={num_cpus: 1, engine_node: 1}",
           "--set", "ray.trainer_resources={num_cpus: 1, trainer_node: 1}",
           "--set", "rollout.engines=1", "--set", "rollout.backend=fake",
           "--set", "rollout.fake_token_s=0.02", "--set", "staleness.batch_size=4",
           "--set", "staleness.group_size=4", "--set", "recovery.commit_every=1",
           "--set", "run.eval_prompts=0", "--set", "run.plot=false",
           "--set", "run.progress=false"]
    proc = None
    try:
        log = (tmp_path / "first.log").open("w")
        proc = subprocess.Popen(cmd + ["--output-dir", str(out), "--steps", "40", "--eta", "1"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while _rows(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        cluster.remove_node(engine_node)
        t_kill = time.monotonic()
        rc = proc.wait(timeout=300)
        stopped_after = time.monotonic() - t_kill
        first = (tmp_path / "first.log").read_text()
        assert rc != 0, first[-3000:]
        assert "no live Ray node has the resources of an engine" in first, first[-3000:]
        done = _rows(out)
        assert 3 <= done < 40
        cluster.add_node(num_cpus=1, resources={"engine_node": 1})
        cluster.wait_for_nodes()
        with (tmp_path / "resumed.log").open("w") as log:
            rc = subprocess.run(cmd + ["--resume", str(out)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, timeout=600).returncode
        resumed = (tmp_path / "resumed.log").read_text()
        assert rc == 0, resumed[-3000:]
        with (out / "events.jsonl").open() as f:
            report = check(f, STRICT)
        assert report.ok, report
        print(f"\nengine node lost after {done} steps: the run stopped {stopped_after:.1f} s "
              f"later naming the missing resources; --resume on a new node finished the 40 "
              f"steps; whole test {time.monotonic() - t0:.1f} s")
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        ray.shutdown()
        cluster.shutdown()


def _rank_nodes(ray) -> dict[str, str]:
    """{actor id: node id} of every rank actor the GCS knows of, alive or dead."""
    from ray._private import state

    return {aid: a["Address"]["NodeID"] for aid, a in state.actors().items()
            if a.get("ActorClassName", "").endswith("RankActor")
            and a.get("Address", {}).get("NodeID")}


def test_two_trainer_ranks_on_two_nodes(tmp_path):
    """``trainer.world_size: 2`` with ``ray.trainer_placement: STRICT_SPREAD`` on a cluster of a
    head (the engine) and two trainer nodes: the rank actors run one on each trainer node,
    rendezvous at rank 0's node address (127.0.0.1 here), and the run trains to the end with a
    conforming log. Fake engine: the ranks' placement is the point."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from runtime.models.tiny import ensure_tiny_model
    from runtime.ray_backend import loopback

    loopback.pin()
    ensure_tiny_model(log=None)
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"engine_node": 1}, "include_dashboard": False})
    # each trainer node could hold both ranks: STRICT_SPREAD is what puts one on each
    trainer_nodes = [cluster.add_node(num_cpus=2, resources={"trainer_node": 2})
                     for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    out = tmp_path / "run"
    env = {**os.environ, **loopback.ENV, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "runtime", "train", "--backend", "ray",
           "--output-dir", str(out), "--steps", "4", "--eta", "1",
           "--set", f"ray.address={cluster.address}",
           "--set", "ray.engine_resources={num_cpus: 1, engine_node: 1}",
           "--set", "ray.trainer_resources={num_cpus: 1, trainer_node: 1}",
           "--set", "ray.trainer_placement=STRICT_SPREAD", "--set", "trainer.world_size=2",
           "--set", "rollout.engines=1", "--set", "rollout.backend=fake",
           "--set", "rollout.fake_token_s=0.01", "--set", "staleness.batch_size=4",
           "--set", "staleness.group_size=4", "--set", "run.eval_prompts=0",
           "--set", "run.plot=false", "--set", "run.progress=false"]
    try:
        with (tmp_path / "train.log").open("w") as log:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=600).returncode
        text = (tmp_path / "train.log").read_text()
        assert rc == 0, text[-3000:]
        placed = _rank_nodes(ray)
        assert len(placed) == 2, placed
        assert set(placed.values()) == {n.node_id for n in trainer_nodes}, placed
        assert _rows(out) == 4
        with (out / "events.jsonl").open() as f:
            report = check(f, STRICT)
        assert report.ok, report
        print(f"\n2 trainer ranks on 2 nodes (STRICT_SPREAD): 4 steps; whole test "
              f"{time.monotonic() - t0:.1f} s")
    finally:
        ray.shutdown()
        cluster.shutdown()
