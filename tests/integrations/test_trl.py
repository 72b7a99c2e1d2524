"""TRL's async GRPO trainer (trl 1.16.0), end to end on CPU: as shipped, and with Reserve–Occupy.

Both runs use TRL's real ``AsyncGRPOTrainer`` (its loss, weight-sync callbacks, dataset, drop rule,
batcher, collator and accelerate data loader) on a tiny Qwen2 model built here, with the same
in-process generator and weight transfer (TRL's defaults need a vLLM server reached over HTTP and
NCCL). Staleness is measured where the loss is computed: ``compute_loss`` looks up the version
each trained sample was stamped with, and subtracts it from the trainer's live ``model_version``.

* As shipped, the rollout worker does what TRL's ``AsyncRolloutWorker`` does (keep
  ``max_staleness * samples_per_step`` completions in flight, stamp a group when it is created,
  queue it once scored) and ``RolloutQueueDataset`` drops stale samples when they leave the queue.
  The data loader fetches one batch ahead, so a sample that passed the check at staleness
  ``max_staleness`` trains one version later: the test measures ``max_staleness + 1``.
* With ``ReserveOccupyAsyncGRPOTrainer`` and ``ReserveOccupyRolloutWorker`` at the same eta, every
  trained sample is within eta and nothing is dropped.

The CUDA-only attention kernel and device query are replaced by ``trl_shims`` (test-only).
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import pytest

pytest.importorskip("trl.experimental.async_grpo", reason="needs the trl extra")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer  # noqa: E402
from trl.experimental.async_grpo import async_grpo_trainer as trl_trainer  # noqa: E402
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample  # noqa: E402

from reserve_occupy.integrations.trl import (  # noqa: E402
    ReserveOccupyAsyncGRPOTrainer,
    ReserveOccupyRolloutWorker,
    RolloutFailed,
    TrlSetupError,
)

from . import trl_shims  # noqa: E402

ETA = 1
GROUPS_PER_STEP = 2
NUM_GENERATIONS = 2
SAMPLES_PER_STEP = GROUPS_PER_STEP * NUM_GENERATIONS
STEPS = 6
PROMPTS = [f"{a}+{b}=" for a in range(10) for b in range(10)]


# ----------------------------------------------------------------- the tiny model -------------

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer random Qwen2 and the project's character tokenizer, saved locally."""
    from runtime.models.tiny import TinySpec, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model(TinySpec(hidden_size=64, layers=2, heads=2), tokenizer)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


class LocalEngine:
    """The generator: a second copy of the policy that samples groups and records each group's
    stamp. The lock is held while it generates and while weights are swapped in."""

    def __init__(self, path: str, max_new_tokens: int = 4) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.lock = threading.Lock()
        self.max_new_tokens = max_new_tokens
        self.stamps: dict[int, int] = {}  # group id -> the model_version it was stamped with
        self.generator = torch.Generator().manual_seed(0)

    def generate_group(self, group_id: int, row, model_version: int) -> list[RolloutSample]:
        self.stamps[group_id] = model_version
        prompt = row["prompt"] if isinstance(row, dict) else row
        ids = self.tokenizer.encode(prompt)
        with self.lock, torch.no_grad():
            seqs = torch.tensor([ids] * NUM_GENERATIONS)
            logps = []
            for _ in range(self.max_new_tokens):  # no KV cache: 4 tokens of a 2-layer model
                logits = self.model(seqs).logits[:, -1].float()
                token = torch.multinomial(logits.softmax(-1), 1, generator=self.generator)
                logps.append(logits.log_softmax(-1).gather(1, token))
                seqs = torch.cat([seqs, token], dim=1)
        completions = seqs[:, len(ids):]
        # reward: how many digits the completion writes (varies, so advantages are not all 0)
        digits = {self.tokenizer.convert_tokens_to_ids(c) for c in "0123456789"}
        rewards = np.array([sum(int(t) in digits for t in c) for c in completions], float)
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
        samples = []
        for i in range(NUM_GENERATIONS):
            n = len(ids) + self.max_new_tokens
            old = np.zeros(n, np.float32)
            old[len(ids):] = torch.cat(logps, 1)[i].numpy()
            samples.append(RolloutSample(
                prompt=prompt, completion=self.tokenizer.decode(completions[i]),
                input_ids=seqs[i].numpy().astype(np.int64),
                completion_mask=np.array([0] * len(ids) + [1] * self.max_new_tokens, np.int64),
                old_log_probs=old, advantage=float(advantages[i]), model_version=model_version,
                group_id=group_id, metrics={"reward": float(rewards[i])}, enqueued_at=time.time()))
        return samples


class LocalWeightTransfer:
    """TRL's ``weight_transfer`` seam, in process: copy the trainer's tensors into the engine."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self.params = dict(engine.model.named_parameters())
        self.syncs = 0

    def init_weight_transfer(self) -> None:
        pass

    def pause(self) -> None:
        self.engine.lock.acquire()

    def send_weights(self, iterator) -> None:
        with torch.no_grad():
            for name, tensor in iterator:
                self.params[name].copy_(tensor)  # a KeyError would mean a name mismatch
        self.syncs += 1

    def resume(self) -> None:
        self.engine.lock.release()

    def destroy(self) -> None:
        pass


class TrlDefaultAdmission:
    """TRL's default worker's admission and queueing, in process (``AsyncRolloutWorker`` spawns
    a child that talks to a vLLM server): ``max_inflight_tasks`` completions in flight, a group
    stamped with the live version when it is created, rows queued FIFO once the group is scored.
    A finished group's slots are refilled before its rows are queued, as TRL's generate loop
    refills while its score loop is still scoring."""

    def __init__(self, engine: LocalEngine, max_inflight_tasks: int) -> None:
        self.engine, self.cap = engine, max_inflight_tasks
        self.rollout_buffer: queue.Queue = queue.Queue()
        self.metrics_queue: queue.Queue = queue.Queue()
        self.model_version = 0
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def update_model_version(self, model_version: int) -> None:
        self.model_version = model_version

    def check_health(self, stale_after_s: float) -> None:
        if self._error is not None:
            raise RuntimeError("rollout loop failed") from self._error

    def _loop(self) -> None:
        try:
            inflight, next_group = {}, 0

            def refill():
                nonlocal next_group
                while len(inflight) * NUM_GENERATIONS < self.cap:
                    row = {"prompt": PROMPTS[next_group % len(PROMPTS)]}
                    fut = self._pool.submit(self.engine.generate_group, next_group, row,
                                            self.model_version)
                    inflight[fut] = next_group
                    next_group += 1

            refill()
            while not self._stop.is_set():
                done, _ = wait(inflight, timeout=0.1, return_when=FIRST_COMPLETED)
                finished = sorted(done, key=inflight.pop)  # in group order
                refill()
                for fut in finished:
                    for sample in fut.result():
                        self.rollout_buffer.put_nowait(sample)
        except BaseException as exc:  # noqa: BLE001 -- surfaced through check_health
            self._error = exc


# ----------------------------------------------------------------- measurement ----------------

class ProbeCollator(trl_trainer.DataCollatorForRollout):
    """TRL's collator plus the group id of every sample, so compute_loss can see what it trains."""

    def torch_call(self, examples):
        batch = super().torch_call(examples)
        (rows,) = examples
        ids = [s["group_id"] for row in rows for s in row.samples]
        batch["probe_group_ids"] = torch.tensor([ids])
        return batch


class StalenessProbe:
    """compute_loss records ``model_version - stamp`` for every sample of the batch it trains."""

    def compute_loss(self, model, inputs, *args, **kwargs):
        gids = inputs.pop("probe_group_ids")[0].tolist()
        self.trained_groups.append(gids)
        self.trained_staleness.append([self.model_version - self.stamps[g] for g in gids])
        return super().compute_loss(model, inputs, *args, **kwargs)


class ShippedTrainer(StalenessProbe, AsyncGRPOTrainer):
    pass


class ReserveOccupyTrainer(StalenessProbe, ReserveOccupyAsyncGRPOTrainer):
    pass


def _args(out, **over) -> AsyncGRPOConfig:
    base = dict(output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=SAMPLES_PER_STEP,
                gradient_accumulation_steps=1, num_generations=NUM_GENERATIONS,
                max_staleness=ETA, token_budget=0, max_completion_length=4, learning_rate=1e-3,
                logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
                dtype="float32", disable_tqdm=True, seed=0, heartbeat_stale_after_s=60)
    base.update(over)
    return AsyncGRPOConfig(**base)


def _train(cls, model_dir, out, worker, engine, monkeypatch) -> dict:
    trl_shims.install(monkeypatch)
    monkeypatch.setattr(trl_trainer, "DataCollatorForRollout", ProbeCollator)
    from transformers import AutoTokenizer

    trainer = cls(model=model_dir, reward_funcs=[], args=_args(out),
                  train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
                  processing_class=AutoTokenizer.from_pretrained(model_dir),
                  rollout_worker=worker, weight_transfer=LocalWeightTransfer(engine))
    trainer.stamps, trainer.trained_staleness, trainer.trained_groups = engine.stamps, [], []
    start = time.perf_counter()
    trainer.train()
    logs = defaultdict(list)
    for entry in trainer.state.log_history:
        for key, value in entry.items():
            if value is not None:
                logs[key].append(value)
    return {"trained": trainer.trained_staleness, "groups": trainer.trained_groups, "logs": logs,
            "seconds": time.perf_counter() - start}


@pytest.mark.slow
def test_trl_as_shipped_trains_one_version_past_max_staleness(tiny_model_dir, tmp_path,
                                                              monkeypatch):
    engine = LocalEngine(tiny_model_dir)
    worker = TrlDefaultAdmission(engine, max_inflight_tasks=ETA * SAMPLES_PER_STEP)
    run = _train(ShippedTrainer, tiny_model_dir, tmp_path, worker, engine, monkeypatch)
    per_step = [max(s) for s in run["trained"]]
    logged = max(run["logs"]["sample/staleness_max"])
    dropped = sum(run["logs"].get("sample/dropped_stale_total", []))
    print(f"\nTRL as shipped, max_staleness={ETA}: trained staleness per step {per_step}, "
          f"TRL logged max {logged:g}, dropped {dropped:g} samples, {run['seconds']:.1f} s")
    assert len(run["trained"]) == STEPS
    # TRL checks when the sample leaves the queue and logs that value: never above max_staleness
    assert logged <= ETA
    # ... but the loader fetched it a step early, so it trains one version later.
    assert max(per_step) == ETA + 1


@pytest.mark.slow
def test_trl_with_reserve_occupy_keeps_eta_where_the_loss_is_computed(tiny_model_dir, tmp_path,
                                                                      monkeypatch):
    engine = LocalEngine(tiny_model_dir)
    worker = ReserveOccupyRolloutWorker(
        engine.generate_group, ({"prompt": p} for p in PROMPTS * 10), max_staleness=ETA,
        batch_size=GROUPS_PER_STEP, num_generations=NUM_GENERATIONS)
    run = _train(ReserveOccupyTrainer, tiny_model_dir, tmp_path, worker, engine, monkeypatch)
    trained = run["trained"]
    per_step = [max(s) for s in trained]
    dropped = sum(run["logs"].get("sample/dropped_stale_total", []))
    print(f"\nTRL + Reserve-Occupy, eta={ETA}: trained staleness per step {per_step}, "
          f"dropped {dropped:g} samples, {run['seconds']:.1f} s")
    assert len(trained) == STEPS
    assert all(0 <= s <= ETA for step in trained for s in step)
    assert dropped == 0
    ctl = worker.controller
    # every batch the controller consumed was trained, each in one step, and the log is valid
    assert ctl.version == STEPS
    assert all(len(step) == SAMPLES_PER_STEP for step in trained)
    batches = [e for e in ctl.events if e.op == "consume"]
    assert len(batches) == STEPS
    ctl.check()
    # what each step trained is exactly the batch the controller consumed for it, in order
    assert ([sorted(set(g)) for g in run["groups"]]
            == [sorted(e.batch.unit_ids) for e in batches])


# ----------------------------------------------------------------- setup errors ---------------

def test_misaligned_batch_is_a_typed_error(tiny_model_dir, tmp_path, monkeypatch):
    trl_shims.install(monkeypatch)
    engine = LocalEngine(tiny_model_dir)
    worker = ReserveOccupyRolloutWorker(engine.generate_group, [], max_staleness=ETA,
                                        batch_size=GROUPS_PER_STEP + 1,
                                        num_generations=NUM_GENERATIONS)
    with pytest.raises(TrlSetupError, match="per_device_train_batch_size"):
        ReserveOccupyAsyncGRPOTrainer(
            model=tiny_model_dir, args=_args(tmp_path),
            train_dataset=Dataset.from_dict({"prompt": PROMPTS}), rollout_worker=worker,
            weight_transfer=LocalWeightTransfer(engine))
    with pytest.raises(TrlSetupError, match="num_generations"):
        ReserveOccupyRolloutWorker(engine.generate_group, [], max_staleness=ETA, batch_size=2,
                                   num_generations=0)


def test_a_failed_group_is_aborted_and_reported():
    def broken(gid, row, version):
        raise OSError("engine down")

    worker = ReserveOccupyRolloutWorker(broken, [{"prompt": "1+1="}] * 4, max_staleness=1,
                                        batch_size=2, num_generations=2)
    worker.update_model_version(1)
    worker.start()
    with pytest.raises(RolloutFailed):
        worker.rollout_buffer.get(timeout=10)
    with pytest.raises(RolloutFailed):
        worker.check_health(60)
    worker.stop()
    assert worker.controller.in_flight == 0  # every admitted group was aborted


def test_the_core_does_not_import_trl():
    code = "import sys, reserve_occupy; assert 'trl' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
