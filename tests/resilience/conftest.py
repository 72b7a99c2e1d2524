"""Shared fixtures of the resilience tests: vLLM's environment before any import of torch or
vLLM (as the ``train`` command sets it for itself)."""

from __future__ import annotations

from runtime.rollout.env import configure

configure()
