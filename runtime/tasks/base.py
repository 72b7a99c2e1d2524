"""The reward-function interface and how a config names one.

A reward function scores one completion of one prompt: ``reward(prompt, completion) -> float``.
It runs in the driver's event loop, so it must be quick (the verifiable-answer reward is a string
comparison); anything slow belongs in a thread of the function's own. An exception it raises
makes the driver abort that candidate's whole group (the group cannot be scored fairly).

A reward object may also have ``metrics() -> dict[str, float]``: counters it keeps (the math
reward's reasons), which ``metrics.jsonl`` reports per step as the increase since the last one.
"""

from __future__ import annotations

import asyncio
import importlib
import math
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
    source: str = field(default="", compare=False)  # where it was read: "FILE:LINE", "FILE row N"


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


def finite_option(name: str, value: Any) -> float:
    """A reward's numeric option as a finite float; ``ValueError`` naming it otherwise (YAML's
    ``.inf``, the string ``"nan"``, a word)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"reward option {name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise ValueError(f"reward option {name} must be a finite number, got {value!r}")
    return number


def check_answers(reward: Any, name: str, prompts: list[Prompt],
                  answer_field: str | None) -> None:
    """Before a run: a reward that scores against each prompt's answer (``needs_answer``) has
    answers to score against, and every answer is one it can read (its ``check_answer``, if
    it has one, raises ``ValueError``). Raises ``RewardError`` naming the setting or the
    record."""
    if getattr(reward, "needs_answer", False) and answer_field is None:
        raise RewardError(f"data.answer_field is null, but reward {name!r} scores each "
                          f"completion against its prompt's answer: name the records' answer "
                          f"field in data.answer_field")
    check = getattr(reward, "check_answer", None)
    if not callable(check):
        return
    for p in prompts:
        if p.answer is None:
            continue
        try:
            check(p.answer)
        except ValueError as exc:
            where = p.source or f"prompt {p.index}"
            raise RewardError(f"{where}: reward {name!r} cannot score against this answer "
                              f"({exc})") from None



class RewardAborted(RuntimeError):
    """The reward raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
    ``GeneratorExit``, a custom one): not a completion it cannot score but a reward that
    tried to end the process. The run fails with it (exit 1), never exits 0 half done."""


def call_reward(reward_fn: RewardFn, prompt: Any, completion: str) -> float:
    """``reward_fn(prompt, completion)`` as a float. An ``Exception`` propagates as is (the
    caller decides: drop the group, score 0); a ``BaseException`` other than
    ``KeyboardInterrupt`` and ``CancelledError`` becomes ``RewardAborted``."""
    try:
        return float(reward_fn(prompt, completion))
    except (Exception, KeyboardInterrupt, asyncio.CancelledError):
        raise
    except BaseException as exc:
        raise RewardAborted(f"the reward raised {exc!r}") from None

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
