"""Shared fixtures for the runtime tests.

vLLM's environment (one OpenMP thread, offline, no torch.compile, ...) is set here before
anything imports torch or vLLM, as the ``train`` command does for itself. One real vLLM engine
serves every ``vllm``-marked test of the session (starting one costs 10-20 s on 2 cores): an
engine is bound to the event loop of its first request, so the fixture and those tests share
the session's loop (``loop_scope="session"``). Each test resets the engine's weights to the base
model before use (``run_training`` does it itself).
"""

from __future__ import annotations

from runtime.rollout.env import configure

configure()

import pytest
import pytest_asyncio


@pytest.fixture(scope="session")
def tiny_model():
    from runtime.models.tiny import ensure_tiny_model

    return ensure_tiny_model(log=None)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def engine(tiny_model):
    from runtime.rollout.vllm_engine import VLLMRollout

    rollout = VLLMRollout(tiny_model, max_model_len=128, max_num_seqs=64, seed=0)
    yield rollout
    await rollout.close()


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


# The chat variant of the tiny model (a chat template, printable ASCII), long enough for the
# math recipe's prompts; a short warm-up, so that it answers "\boxed{...}" now and then.
CHAT_SPEC = dict(chat=True, max_positions=512, warmup_steps=30)


@pytest.fixture(scope="session")
def tiny_chat_model():
    from runtime.models.tiny import TinySpec, ensure_tiny_model

    return ensure_tiny_model(TinySpec(**CHAT_SPEC), log=None)
