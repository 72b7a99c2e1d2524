"""Builders for driver tests on the scripted engine and the virtual clock."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from runtime.clock import VirtualClock
from runtime.controller import make_controller
from runtime.driver import Driver
from runtime.rollout.base import GenerationRequest
from runtime.rollout.fake import CharTokenizer, FakeRollout, FakeTrainer, Plan, random_script
from runtime.tasks.base import Prompt
from runtime.records import DriverSettings

# How far vLLM's CPU log-probabilities and the trainer's may differ for the same weights: the
# two sum in different orders, and the gap depends on the processor's kernels (under 1e-4 on
# earlier hosts; 1.15e-4 and 1.29e-4 measured on a later CI-class host). Every check against
# it has a counterpart showing that wrong weights or a wrong temperature land 1e-3 to 1e-2 away.
LOGPROB_TOL = 3e-4

def window_reward(rows: list[dict[str, Any]]) -> float:
    """The training reward of a window of metrics rows: the mean over the samples completed in
    it. A row's ``reward`` is None when no sample completed since the previous step
    (runtime/metrics.py), so each row counts with its ``samples_completed``; a window in which
    nothing completed has no reward, and the test that asked for one fails saying so."""
    scored = [(r["reward"], r["samples_completed"]) for r in rows if r["reward"] is not None]
    n = sum(k for _, k in scored)
    assert n > 0, f"no sample completed in steps {[r['step'] for r in rows]}"
    return sum(x * k for x, k in scored) / n


FLOAT32_EPS = 2.0 ** -23  # torch.finfo(torch.float32).eps


def fp32_tol(scale: float, config: Any, terms: int = 1) -> float:
    """How far two float32 evaluations of the same network may differ when they only sum in
    different orders (other shapes, another micro-batch split, other kernels of the same
    operation, another CPU's vector width): the tolerance of the tests that compare them.

    One sum of n products is off by about eps * sqrt(n) of its magnitude (rounding errors of
    random sign: Higham, Accuracy and Stability of Numerical Algorithms, ch. 3); the longest
    sum in the tiny Qwen2 is the MLP's down projection (n = intermediate_size), and
    ``terms`` > 1 when the compared value itself sums that many (a gradient over tokens). Every
    layer and the head add their own error, counted linearly (they need not cancel), and a
    log-probability is the difference of two such results (the token's logit and the
    log-sum-exp), hence the 2. ``scale`` is the magnitude of what is compared (the largest
    |value|). For the tiny model (n = 512, 4 layers + head) and log-probabilities near -10 this
    is 2 * 1.19e-7 * 22.6 * 5 * 10 = 2.7e-4: 17 times the largest difference seen (1.62e-5 on
    an AVX-512 CPU; about 2e-6 elsewhere), and 370 times under the 0.1 a sample attending to
    another one moves it (the counterparts in test_packing)."""
    import math

    n = config.intermediate_size * terms
    return 2 * FLOAT32_EPS * math.sqrt(n) * (config.num_hidden_layers + 1) * max(scale, 1.0)


PROMPTS = [Prompt(f"{i % 10}+{i // 10}=", str(i % 10 + i // 10), i) for i in range(100)]


def parity_reward(prompt: Prompt, completion: str) -> float:
    """A reward with variance inside most groups: 1 when the completion has even length."""
    return float(len(completion) % 2 == 0)


def make(settings: DriverSettings | None = None, script: Callable[..., Plan] | None = None,
         reward: Callable[[Prompt, str], float] = parity_reward, train_s: float = 0.05,
         **overrides: Any) -> tuple[Driver, FakeRollout, FakeTrainer, VirtualClock]:
    clock = VirtualClock()
    base = dict(max_staleness=1, batch_size=4, group_size=4, steps=12, max_tokens=6,
                check_invariants=True)
    base.update(overrides)
    settings = settings or DriverSettings(**base)
    rollout = FakeRollout(clock, script or random_script(0))
    trainer = FakeTrainer(clock, train_s)
    driver = Driver(settings, rollout, trainer, reward, PROMPTS, clock,
                    controller=make_controller(settings, clock.now))
    return driver, rollout, trainer, clock


def run(driver: Driver, clock: VirtualClock) -> list[Any]:
    return clock.run(driver.run())


def fixed_script(duration: float, n_tokens: int = 3,
                 special: dict[str, Plan] | None = None) -> Callable[..., Plan]:
    """Every request takes ``duration`` and returns ``n_tokens`` digits (one more for odd
    candidates, so that ``parity_reward`` varies inside groups) then the end token; requests
    whose id starts with a key of ``special`` follow that plan instead."""

    def script(request: GenerationRequest, version: int) -> Plan:
        for prefix, plan in (special or {}).items():
            if request.request_id.startswith(prefix):
                return plan
        cand = int(request.request_id.split("-c")[1].split("-")[0])
        n = min(n_tokens + cand % 2, request.max_tokens)
        tokens = [(version + i) % 10 for i in range(n)]
        if n < request.max_tokens:
            tokens.append(CharTokenizer.eos_token_id)
        return Plan(duration, tokens, "stop" if n < request.max_tokens else "length")

    return script


def token_lag_violations(trainer: FakeTrainer, eta: int) -> list[str]:
    """Groups trained with a token older than ``eta`` versions (checked on the tokens'
    recorded versions, not on the controller's claim), or whose unit version is not the oldest
    version its tokens used."""
    bad = []
    for batch in trainer.batches:
        for g in batch.groups:
            oldest = min(min(s.versions) for s in g.samples if s.versions)
            if batch.version - oldest > eta:
                bad.append(f"batch {batch.version}: {g.unit_id} has a token of version {oldest}")
            if oldest < g.v_traj:
                bad.append(f"batch {batch.version}: {g.unit_id} v_traj {g.v_traj} is newer "
                           f"than its oldest token ({oldest})")
    return bad


def derive_lengths(run_dir: Any) -> dict[str, Any]:
    """The length bias of a run directory, derived here from ``events.jsonl`` and
    ``lengths.jsonl`` on their own (not through the runtime's ``LengthLog``): a unit's fate
    from its log lines, its samples' lengths and roles from its length line; ratio of the
    plain means and the KS distance by brute force over every observed length."""
    import json
    from pathlib import Path

    run_dir = Path(run_dir)
    unsettled = {"shutdown", "lost_in_crash", "recovered", "trajectory_missing"}
    fate: dict[str, str] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines()[1:]:
        r = json.loads(line)
        reason = r.get("meta", {}).get("reason")
        if r["op"] == "consume":
            fate.update((u["unit"], "trained") for u in r["batch"]["units"])
        elif r["op"] in ("abort", "filter"):
            fate[r["unit"]] = ("skip" if reason in unsettled else
                               "filtered" if r["op"] == "filter" or reason == "no_gradient"
                               else "aborted")
        for u in r.get("aborted", ()):
            fate[u] = "skip" if reason in unsettled else "aborted"
    records = [json.loads(x) for x in (run_dir / "lengths.jsonl").read_text().splitlines()]
    assert len({r["unit"] for r in records}) == len(records), "a unit has two length lines"
    trained, admitted = [], []
    for rec in records:
        f = fate.get(rec["unit"], "skip")
        if f == "skip":
            continue
        for n, role in zip(rec["lengths"], rec["roles"], strict=True):
            if role == "unstarted":
                continue
            admitted.append(n)
            if f == "trained" and role == "committed":
                trained.append(n)

    def cdf(sample: list[int], x: int) -> float:
        return sum(v <= x for v in sample) / len(sample)

    ks = max(abs(cdf(trained, x) - cdf(admitted, x)) for x in set(trained) | set(admitted))
    return {"length_ratio": (sum(trained) / len(trained)) / (sum(admitted) / len(admitted)),
            "length_ks": ks, "samples_trained": len(trained),
            "samples_admitted": len(admitted), "trained_tokens": sum(trained)}


def keep_pauses_wait_for_decoding(driver: Driver, timeout_s: float = 120.0) -> list[set[str]]:
    """Wrap the driver's vLLM rollout so that a ``"keep"`` pause first waits until some request
    in the engine has produced a token (a condition on the engine's own record, never a sleep
    of a guessed length), whenever a request is in the engine at all: a sync then never lands
    in the moment between a request's submission and its first token. Returns the list the
    wrapper fills, one entry per keep pause: the ids of the requests that were decoding when it
    froze them (each of those must come back with tokens of two versions)."""
    import asyncio

    rollout = driver.rollout
    pause = rollout.pause
    frozen: list[set[str]] = []

    def decoding() -> set[str]:
        return set(rollout._active) - set(rollout._no_output)

    async def wait_then_pause(mode: str = "abort") -> None:
        if mode == "keep":
            async def ready() -> None:
                while rollout._active and not decoding():
                    await asyncio.sleep(0.001)

            await asyncio.wait_for(ready(), timeout_s)
            frozen.append(decoding())
        await pause(mode)

    rollout.pause = wait_then_pause
    return frozen


def record_segments(driver: Driver) -> list[Any]:
    """Wrap the driver's rollout so the test sees every segment it returned, trained or not."""
    rollout, segments = driver.rollout, []
    generate = rollout.generate

    async def spy(request: GenerationRequest) -> Any:
        seg = await generate(request)
        segments.append(seg)
        return seg

    rollout.generate = spy
    return segments


def version_scorer(model: Any, weights: Any, work: Any, temperature: float
                   ) -> Callable[[int], Any]:
    """``scorer(v)``: a ``GRPOTrainer`` holding the weights of version ``v`` (``model`` for
    0, else ``weights/v{v}/model.safetensors`` as the run exported them), made once per
    version under ``work/s{v}``; its ``score`` recomputes the log-probabilities of tokens."""
    from pathlib import Path

    from runtime.config import TrainerConfig
    from runtime.trainer.grpo import GRPOTrainer

    scorers: dict[int, Any] = {}

    def scorer(version: int) -> Any:
        if version not in scorers:
            t = GRPOTrainer(model, TrainerConfig(), Path(work) / f"s{version}",
                            temperature=temperature)
            if version:
                from safetensors.torch import load_file

                t.model.load_state_dict(load_file(
                    str(Path(weights) / f"v{version}" / "model.safetensors")))
            scorers[version] = t
        return scorers[version]

    return scorer


def load_bench(name: str) -> ModuleType:
    """``bench/NAME.py`` as a module (bench/ is scripts, not a package): the doc-table tests
    render a benchmark's table from its results file with the benchmark's own code."""
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
