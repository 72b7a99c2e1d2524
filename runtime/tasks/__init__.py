"""Tasks: prompts with reference answers, and the reward functions that score completions
(``base``: the interface; ``arithmetic``: the embedded task and its verifiable-answer reward)."""

from .base import Prompt, RewardError, RewardFn, load_reward

__all__ = ["Prompt", "RewardError", "RewardFn", "load_reward"]
