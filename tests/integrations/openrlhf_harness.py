"""OpenRLHF 0.11.2's async actors on a loopback Ray, without a GPU: as shipped and with
Reserve–Occupy, on one rollout schedule.

What runs is OpenRLHF's own code: ``GenerateSamplesActor.fit`` / ``TrainingActor.fit`` (as
shipped) or the plugin's subclasses, OpenRLHF's ``SamplesGenerator`` (dispatch to the engines,
``_process_response_into_experience``), ``BasePPOTrainer.train_step`` / ``ppo_train`` /
``save_logs_and_checkpoints``, ``TrainingActor.broadcast_to_vllm`` (its ``VLLMLock`` actor and,
with partial rollout, pause / resume of the engines), and real Ray ``Queue``s for the shipped
queue and slot semaphore. The actors' classes run in this process (one thread each), as their
``__ray_actor_class__``; their constructors load a tokenizer and a DeepSpeed strategy, so the
attributes ``fit`` reads are set instead (``generator`` / ``trainer`` below). What needs GPUs is
replaced by recorders: the DeepSpeed actor group (``append``, ``fit`` sleeps ``train_s``,
``broadcast_to_vllm`` moves the engines to the next weight version), the experience maker
(returns the samples, records their versions) and the engines (``ScheduledEngine``: OpenRLHF's
``RolloutRayActor`` interface on a seeded schedule of durations, one token per ``tick``, each
token stamped with the weight version it was generated under; ``pause_generation`` freezes
requests as vLLM's ``mode="keep"`` does).

OpenRLHF imports ``flash_attn`` and ``deepspeed`` at module level; neither installs on a CPU
machine. ``gpu_placeholders`` puts modules under those names whose every attribute raises
``GPUOnly`` when used, so OpenRLHF's modules import and any call into a GPU library fails loudly
(none is made on these paths). Ray workers that import OpenRLHF (the ``VLLMLock`` actor) get
the same through ``worker_process_setup_hook``.

Used by tests/integrations/test_openrlhf.py and bench/openrlhf_compare.py.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import importlib.util
import random
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
GPU_ONLY = ("flash_attn", "deepspeed", "ring_flash_attn")
SETUP_HOOK = "tests.integrations.openrlhf_harness.gpu_placeholders"


# ---------------------------------------------------------------- import ---------------------

class GPUOnly(RuntimeError):
    """A placeholder of a GPU-only library was used."""


class _Missing:
    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *a: Any, **k: Any) -> Any:
        raise GPUOnly(f"{self._name} is a placeholder: the GPU library is not installed")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        mod = _Module(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: Any) -> None:
        pass


def gpu_placeholders() -> None:
    """Placeholders for the GPU-only libraries OpenRLHF imports that are not installed."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    missing = {n for n in GPU_ONLY if n not in sys.modules and importlib.util.find_spec(n) is None}
    if missing:
        sys.meta_path.insert(0, _Finder(missing))


def import_openrlhf() -> Any:
    """``openrlhf.trainer.ppo_trainer_async``, imported with the placeholders in force only
    while it imports: OpenRLHF's modules keep what they bound, and afterwards neither the
    finder nor the placeholder modules are left where another import (or a library asking
    whether deepspeed / flash_attn is installed) would find them."""
    if "openrlhf.trainer.ppo_trainer_async" in sys.modules:
        return sys.modules["openrlhf.trainer.ppo_trainer_async"]
    finders = [f for f in sys.meta_path if isinstance(f, _Finder)]
    gpu_placeholders()
    try:
        return importlib.import_module("openrlhf.trainer.ppo_trainer_async")
    finally:
        if not finders:
            for f in [f for f in sys.meta_path if isinstance(f, _Finder)]:
                sys.meta_path.remove(f)
                for name in [n for n in sys.modules if n.split(".")[0] in f.roots]:
                    del sys.modules[name]


def ray_init(num_cpus: int = 4) -> None:
    """A local Ray on 127.0.0.1 whose workers can import OpenRLHF (and this package)."""
    import ray

    from runtime.ray_backend import loopback

    loopback.pin()
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": SETUP_HOOK,
                          "env_vars": {"PYTHONPATH": str(ROOT)}})


# ---------------------------------------------------------------- the engine -----------------

class ScheduledEngine:
    """OpenRLHF's ``RolloutRayActor`` as ``SamplesGenerator`` and ``TrainingActor`` call it
    (``generate_responses``, ``get_num_unfinished_requests``, ``pause_generation``,
    ``resume_generation``), generating prompt ``p{i}``'s group in ``durations[i]`` seconds, one
    token per ``tick``; every token is stamped with the weight version current when it is made
    (``set_version`` is the weight broadcast). A pause freezes requests (vLLM's keep)."""

    def __init__(self, durations: list[float], tick: float = 0.02, flat_every: int = 0) -> None:
        self.durations, self.tick, self.flat_every = durations, tick, flat_every
        self.version = 0
        self.running = 0
        self._go = asyncio.Event()
        self._go.set()

    async def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer,
                                 num_samples=1, images=None):
        i = int(prompt[1:])
        n = max(1, round(self.durations[i] / self.tick))
        versions: list[int] = []
        self.running += num_samples
        try:
            for _ in range(n):
                await self._go.wait()
                await asyncio.sleep(self.tick)
                await self._go.wait()  # a token in progress at a pause is made after it
                versions.append(self.version)
        finally:
            self.running -= num_samples
        first, last = versions[0], versions[-1]
        prompt_ids = [1, 2, 3]
        out = []
        flat = self.flat_every and (i + 1) % self.flat_every == 0  # no signal: all 0
        for s in range(num_samples):
            reward = 0.0 if flat else float((i + s) % 2)
            out.append({"prompt": prompt, "label": label, "observation_tokens":
                        prompt_ids + [4] * n, "action_ranges": [(3, 3 + n)],
                        "reward": reward, "scores": reward, "rollout_log_probs": None,
                        "truncated": False,
                        "extra_logs": {"x_first_version": first, "x_last_version": last,
                                       "x_tokens": n, "x_prompt": i}})
        return out

    def get_num_unfinished_requests(self) -> int:
        return self.running

    async def pause_generation(self) -> None:
        self._go.clear()

    async def resume_generation(self) -> None:
        self._go.set()

    def set_version(self, version: int) -> None:
        self.version = version


def durations(n: int, seed: int, *, mean_s: float = 0.25, tail: float = 0.15,
              tail_x: float = 5.0) -> list[float]:
    """Seeded generation times: around ``mean_s``, a fraction ``tail`` of stragglers."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        d = rng.uniform(0.5, 1.5) * mean_s
        if rng.random() < tail:
            d *= tail_x
        out.append(d)
    return out


# ---------------------------------------------------------------- the GPU side's recorders ----

class _Group:
    """The DeepSpeed actor group as ``BasePPOTrainer`` calls it."""

    def __init__(self, engines: list, train_s: float, log: "Log", stamp: bool = True) -> None:
        self.engines, self.train_s, self.log, self.stamp = engines, train_s, log, stamp
        self.version = 0

    def async_run_method_batch(self, method_name: str, **kw: Any) -> list:
        import ray

        assert method_name == "append", method_name
        return [ray.put(None)]

    def async_run_method(self, method_name: str, **kw: Any) -> list:
        import ray

        if method_name == "fit":
            time.sleep(self.train_s)  # the PPO update
            return [ray.put({"policy_loss": 0.0})]
        if method_name == "broadcast_to_vllm":
            self.version += 1
            if self.stamp:  # the scheduled engine stamps tokens; a vLLM engine keeps its weights
                ray.get([e.set_version.remote(self.version) for e in self.engines])
            self.log.step_end.append(time.monotonic())
            return [ray.put(None)]
        raise AssertionError(f"unexpected call {method_name}")


class _Maker:
    """The experience maker: returns the samples and records what the step trains."""

    def __init__(self, group: _Group, log: "Log") -> None:
        self.group, self.log = group, log

    def make_experience_batch(self, samples: list) -> list:
        self.log.step_start.append(time.monotonic())
        import torch

        v = self.group.version
        for e in samples:
            info = e.info
            if "x_first_version" not in info:  # a real engine: no per-token stamps
                info.setdefault("reward", torch.zeros(1))  # the reward model's place
                self.log.trained.append((v, None, None, int(e.response_length[0]),
                                         e.prompts[0]))
                continue
            self.log.trained.append((v, int(info["x_first_version"][0]),
                                     int(info["x_last_version"][0]), int(info["x_tokens"][0]),
                                     int(info["x_prompt"][0])))
        return samples


class _Tokenizer:
    def decode(self, ids: Any, skip_special_tokens: bool = True) -> list[str]:
        return ["<sample>"]


class PromptLoader:
    """OpenRLHF's prompt dataloader as the generator reads it: batches of one
    ``(datasource, prompts, labels, images)``; prompt ``p{i}`` (or ``texts[i]``)."""

    def __init__(self, n: int, texts: Optional[list[str]] = None) -> None:
        self.n, self.texts = n, texts

    def __iter__(self):
        for i in range(self.n):
            yield ["d"], [self.texts[i] if self.texts else f"p{i}"], [str(i % 2)], [None]

    def __len__(self) -> int:
        return self.n

    def state_dict(self) -> dict:
        return {}


def make_args(batch_size: int, n_samples: int, *, partial: bool, queue_size: int = 1,
              dynamic_filtering: bool = False, oversample: int = 1) -> Any:
    """The fields of OpenRLHF's hierarchical arguments these paths read."""
    return NS(
        train=NS(num_episodes=1, async_enable=True, async_queue_size=queue_size,
                 partial_rollout_enable=partial, dynamic_batch_enable=False),
        rollout=NS(batch_size=batch_size, n_samples_per_prompt=n_samples,
                   vllm_generate_batch_size=batch_size * oversample),
        vllm=NS(enable_sleep=False),
        algo=NS(dynamic_filtering_enable=dynamic_filtering, dynamic_filtering_range=[0.1, 0.9],
                advantage=NS(is_correction_level="off"), kl=NS(target=None, init_coef=0.0)),
        eval=NS(steps=float("inf"), dataset=None),
        critic=NS(freezing_steps=-1), ds=NS(enable_sleep=False),
        logger=NS(logging_steps=1, wandb=NS(key=None), tensorboard_dir=None),
        ckpt=NS(save_steps=float("inf"), best_metric_key=""))


GENERATE_KW = {"max_new_tokens": 64, "temperature": 1.0, "max_len": 128}


def generator(cls: type, args: Any, loader: PromptLoader, engines: list, lock: Any,
              queue: Any, slots: Any, tokenizer: Any = None) -> Any:
    """``GenerateSamplesActor`` (or the plugin's subclass) with what its constructor sets."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    g = cls.__new__(cls)
    g.args = args
    g.prompts_dataloader, g.eval_dataloader, g.max_steps = loader, None, len(loader)
    g.generate_kwargs = dict(GENERATE_KW)
    g.samples_generator = SamplesGenerator(strategy=NS(args=args), prompts_dataloader=loader,
                                           eval_dataloader=None, tokenizer=tokenizer,
                                           vllm_engines=engines)
    g.vllm_lock = lock
    g._partial_rollout = args.train.partial_rollout_enable
    g.rollout_queue, g.rollout_slots = queue, slots
    g._last_eval_step, g._eval_just_done = -1, False
    return g


def trainer(cls: type, args: Any, engines: list, lock: Any, queue: Any, slots: Any,
            train_s: float, log: "Log", stamp: bool = True) -> Any:
    """``TrainingActor`` (or the plugin's subclass) with what ``BasePPOTrainer`` sets."""
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    t = cls.__new__(cls)
    t.strategy, t.args = NS(args=args), args
    t.actor_model_group = _Group(engines, train_s, log, stamp)
    t.critic_model_group = t.reward_model_group = t.reference_model_group = None
    t.vllm_engines, t.tokenizer = engines, _Tokenizer()
    t.kl_ctl = FixedKLController(0.0)
    t.experience_maker = _Maker(t.actor_model_group, log)
    t.wandb_logger = t.tensorboard_logger = None
    t.best_eval_metric_value, t.best_eval_metric_key = float("-inf"), ""
    t._latest_eval_metric_value = None
    t.vllm_lock = lock
    t._partial_rollout = args.train.partial_rollout_enable
    t.rollout_queue, t.rollout_slots = queue, slots
    return t


# ---------------------------------------------------------------- a run ----------------------

@dataclass
class Log:
    trained: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    step_start: list[float] = field(default_factory=list)
    step_end: list[float] = field(default_factory=list)


@dataclass
class Result:
    name: str
    trained: list[tuple[int, int, int, int, int]]  # (step version, first, last, tokens, prompt)
    steps: int
    wait_s: float
    dropped: int
    wall_s: float
    trace: Optional[list[dict]] = None
    stats: Optional[dict] = None
    admitted: Optional[list[tuple[str, int, str]]] = None  # (unit, v_traj, prompt)
    batches: Optional[list[dict]] = None  # what the plugin's trainer consumed

    @property
    def staleness(self) -> list[int]:
        return [v - first for v, first, _, _, _ in self.trained]

    @property
    def spans(self) -> list[int]:
        return [last - first + 1 for _, first, last, _, _ in self.trained]


def run(name: str, *, eta: Optional[int], queue_size: int = 1, partial: bool,
        sched: list[float], batch_size: int = 4, n_samples: int = 2, train_s: float = 0.3,
        tick: float = 0.02, lock: Any = None, timeout_s: float = 300.0,
        stuck_timeout_s: Optional[float] = None, flat_every: int = 0,
        engines: Optional[list] = None, texts: Optional[list[str]] = None,
        tokenizer: Any = None, oversample: int = 1) -> Result:
    """One run over ``len(sched)`` prompts: OpenRLHF as shipped (``eta`` None; its queue and
    slots of ``queue_size``; ``oversample``: its ``vllm_generate_batch_size`` in batches) or
    with Reserve–Occupy at ``eta``. ``lock``: a ``VLLMLock`` actor
    to reuse (each new one starts a worker that imports OpenRLHF)."""
    import ray
    from openrlhf.trainer.ppo_trainer_async import GenerateSamplesActor, TrainingActor, VLLMLock
    from ray.util.queue import Queue

    from reserve_occupy.integrations.openrlhf import StalenessBroker, actor_classes

    if eta is not None and oversample != 1:
        raise ValueError("over-sampling whole batches is OpenRLHF's queue's (the plugin "
                         "refuses it)")
    args = make_args(batch_size, n_samples, partial=partial, queue_size=queue_size,
                     dynamic_filtering=bool(flat_every), oversample=oversample)
    stamp = engines is None  # else real engines (OpenRLHF's RolloutRayActor), kept running
    if stamp:
        engines = [ray.remote(ScheduledEngine).options(num_cpus=0).remote(sched, tick,
                                                                          flat_every)]
    lock = lock or VLLMLock.remote()
    log = Log()
    broker = None
    if eta is None:
        queue = Queue(maxsize=queue_size)
        slots = Queue(maxsize=queue_size)
        for _ in range(queue_size):
            slots.put(0, block=True)
        gcls, tcls = GenerateSamplesActor.__ray_actor_class__, TrainingActor.__ray_actor_class__
    else:
        broker = ray.remote(StalenessBroker).options(max_concurrency=16, num_cpus=0).remote(
            eta, batch_size, poll_s=0.01, stuck_timeout_s=stuck_timeout_s)
        queue, slots = broker, None
        classes = actor_classes()
        gcls, tcls = classes["generator"], classes["trainer"]
    gen = generator(gcls, args, PromptLoader(len(sched), texts), engines, lock, queue, slots,
                    tokenizer)
    tr = trainer(tcls, args, engines, lock, queue, slots, train_s, log, stamp)
    errors: list[BaseException] = []

    def guarded(fn, **kw):
        try:
            fn(**kw)
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    t0 = time.monotonic()
    threads = [threading.Thread(target=guarded, args=(gen.fit,), daemon=True,
                                kwargs={"episode": 0, "total_consumed_prompts": 0}),
               threading.Thread(target=guarded, args=(tr.fit,), daemon=True,
                                kwargs={"global_step": 0})]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout_s)
    if errors:
        raise errors[0]
    if any(th.is_alive() for th in threads):
        raise TimeoutError(f"{name}: the actors did not finish in {timeout_s} s")
    wall = time.monotonic() - t0
    ends = [t0] + log.step_end
    wait = sum(s - e for s, e in zip(log.step_start, ends))
    trace = stats = None
    dropped = 0
    if broker is not None:
        trace = ray.get(broker.trace.remote())
        stats = ray.get(broker.stats.remote())
        dropped = len(stats["released"]) + len(stats["escalated"])
        ray.kill(broker)
    for e in engines if stamp else ():
        ray.kill(e)
    return Result(name, log.trained, len(log.step_start), wait, dropped, wall, trace, stats,
                  getattr(gen, "admitted", None), getattr(tr, "trained", None))


def check_trace(records: list[dict]) -> Any:
    """The trace through ``reserve-occupy check-trace``'s strict checker."""
    from reserve_occupy.trace import dumps
    from reserve_occupy_porting.checker import STRICT, check

    return check((dumps(r) for r in records), STRICT)
