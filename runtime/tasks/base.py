"""The reward-function interface and how a config names one.

A reward function scores one completion of one prompt: ``reward(prompt, completion) -> float``.
It runs in the driver's event loop, so it must be quick (the verifiable-answer reward is a string
comparison); anything slow belongs in a thread of the function's own. An exception it raises
makes the driver abort that candidate's whole group (the group cannot be scored fairly).

A reward object may also have ``metrics() -> dict[str, float]``: counters it keeps (the math
reward's reasons), which ``metrics.jsonl`` reports per step as the increase since the last one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Prompt:
    """One task instance: the text the model continues and what a reward may check it against.

    A conversational record keeps its ``messages`` (``{"role", "content"}`` dicts) and has no
    ``text`` until ``runtime.prompts.render_prompts`` renders it with the tokenizer's chat
    template; ``rendered`` marks a prompt whose ``text`` is that rendering (what the engine is
    sent and the trainer's log-probabilities are conditioned on).
    """

    text: str
    answer: str | None = None
    index: int = 0  # position in the data file (for error messages and traces)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    messages: tuple[dict[str, str], ...] | None = field(default=None, compare=False)
    rendered: bool = False


@runtime_checkable
class RewardFn(Protocol):
    def __call__(self, prompt: Prompt, completion: str) -> float: ...


class RewardError(ValueError):
    """A reward could not be built from its config name."""


BUILTIN = {
    "exact_answer": "runtime.tasks.arithmetic:ExactAnswerReward",
    "arithmetic": "runtime.tasks.arithmetic:ExactAnswerReward",
    "math": "runtime.tasks.math:MathReward",  # needs the math extra (math-verify)
}


def load_reward(name: str, **kwargs: Any) -> RewardFn:
    """Build a reward from a built-in name or ``package.module:attribute``.

    The attribute may be a class or factory (called with ``kwargs``) or a plain function (used
    as is; then ``kwargs`` must be empty).
    """
    target = BUILTIN.get(name, name)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise RewardError(f"reward {name!r}: expected a built-in name ({', '.join(BUILTIN)}) or "
                          f"'package.module:function'")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RewardError(f"reward {name!r}: cannot import {target} ({exc})") from None
    if isinstance(obj, type):
        try:
            return obj(**kwargs)
        except (ImportError, TypeError, ValueError) as exc:  # a missing extra, a bad option
            raise RewardError(f"reward {name!r}: {exc}") from None
    if kwargs:
        raise RewardError(f"reward {name!r} is a function; it takes no options, got "
                          f"{sorted(kwargs)}")
    if not callable(obj):
        raise RewardError(f"reward {name!r}: {target} is not callable")
    return obj
