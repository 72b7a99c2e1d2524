"""Rollout backends: the real vLLM engine (``vllm_engine``) and a scripted fake for driver unit
tests (``fake``), both behind the ``Rollout`` protocol of ``base``."""

from .base import GenerationRequest, Rollout, RolloutDead, Segment, Tokenizer

__all__ = ["GenerationRequest", "Rollout", "RolloutDead", "Segment", "Tokenizer"]
