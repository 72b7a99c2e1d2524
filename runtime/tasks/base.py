"""The reward-function interface and how a config names one.

A reward function scores one completion of one prompt: ``reward(prompt, completion) -> float``.
What it returns must be a real number (``int``, ``float``, a numpy scalar; not a string, not a
bool): anything else stops the run with ``RewardValueError`` naming the reward, the prompt and
the value (exit 2): a reward that returns the wrong type is a bug that every call repeats. A
real number that is NaN, infinite or beyond ``REWARD_LIMIT`` in magnitude raises
``RewardNotFinite`` (``reward_value``): the driver drops that group (``reward_error``, logged
with the value), as it does when the reward raises: the group cannot be scored fairly, and the
run goes on (a NaN was always dropped so; an infinity used to train NaN weights and 1e308 to
overflow the group's mean). Evaluation scores such a completion 0, as one whose reward raised.

A config's ``package.module:attribute`` reward is a user's code: ``tasks.isolated.open_reward``
imports and runs it in a worker process, so a reward that hangs cannot freeze the run, and
each call has ``reward.timeout_s``. The built-in rewards run in the driver's process.

A reward object may also have ``metrics() -> dict[str, float]``: counters it keeps (the math
reward's reasons), which ``metrics.jsonl`` reports per step as the increase since the last one.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import numbers
from collections.abc import Sequence
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
    first_bad = getattr(reward, "first_bad_answer", None)
    if callable(first_bad):  # an isolated reward: every answer in one round trip
        given = [p for p in prompts if p.answer is not None]
        bad = first_bad([p.answer for p in given])
        if bad is not None:
            where = given[bad[0]].source or f"prompt {given[bad[0]].index}"
            raise RewardError(f"{where}: reward {name!r} cannot score against this answer "
                              f"({bad[1]})")
        return
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



# |r| <= 2**126 (8.5e37) for every reward r: a group's deviations r - mean stay within
# 2**127 < float32's largest value (3.4e38), which the trainer's unscaled advantages
# (trainer.scale_rewards: false) are held in, and the group's float64 mean and std, sums of
# n values of at most 2**126 and n squares of at most 2**254 (n <= 10,000 candidates), stay far
# from float64's 1.8e308. A finite 1e308 from a reward would overflow them.
REWARD_LIMIT = float(2**126)


class RewardValueError(RewardError):
    """A reward returned something that is not a finite real number within ``REWARD_LIMIT``:
    the run stops (exit 2): a group scored with it would train on garbage."""


class RewardNotFinite(Exception):
    """A reward returned a real number that is NaN, infinite or beyond ``REWARD_LIMIT``: the
    group it scores is dropped (``reward_error``) as when the reward raises; the run goes on.
    Not a ``RewardError``: that would stop the run (``RewardValueError`` is the wrong type)."""


class RewardTimeout(RewardError):
    """A call of an isolated reward did not return within ``reward.timeout_s``. The driver
    drops that group (a unit failure, ``reward_timeout``); in evaluation it stops the run."""


class RewardCrashed(RewardError):
    """An isolated reward's worker process died (``os._exit``, a crash in native code)."""


class RewardRaised(Exception):
    """An isolated reward raised an ``Exception`` (its ``repr`` is the message): the group
    cannot be scored and is dropped, as with an in-process reward that raises."""


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line (whitespace runs as one space), cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _where(prompt: Any) -> str:
    return getattr(prompt, "source", "") or f"prompt {getattr(prompt, 'index', '?')}"


def bad_value(name: str, prompt: Any, shown: str) -> RewardValueError:
    return RewardValueError(
        f"reward {name!r} returned {shown} for {_where(prompt)}: a reward must be a finite "
        f"real number (int, float or a numpy scalar; not a string, not a bool) of magnitude "
        f"at most 2**126")


def not_finite(name: str, prompt: Any, shown: str) -> RewardNotFinite:
    return RewardNotFinite(
        f"reward {name!r} returned {shown} for {_where(prompt)}: not a finite number of "
        f"magnitude at most 2**126; the group is dropped")


def reward_value(value: Any, name: str, prompt: Any) -> float:
    """``value`` as a float if it is a reward: a real number (``numbers.Real``: int, float,
    numpy's scalars) that is not a bool, finite, with ``|value| <= REWARD_LIMIT``. A real
    number that is not finite or too large: ``RewardNotFinite`` (the group is dropped);
    anything else: ``RewardValueError`` (the run stops); each names ``name``, the prompt and
    the value."""
    try:
        shown = one_line(repr(value))
    except Exception:  # a __repr__ that raises
        shown = f"a {type(value).__name__}"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except (OverflowError, ValueError, TypeError):  # an int beyond float's range
            number = math.inf
        if math.isfinite(number) and abs(number) <= REWARD_LIMIT:
            return number
        raise not_finite(name, prompt, shown)
    raise bad_value(name, prompt, shown)


def reward_label(reward_fn: Any) -> str:
    """The name a reward is reported by: an isolated one's config name, else its import path."""
    name = getattr(reward_fn, "name", None)
    if isinstance(name, str) and name:
        return name
    kind = reward_fn if hasattr(reward_fn, "__qualname__") else type(reward_fn)
    return f"{getattr(kind, '__module__', '?')}:{getattr(kind, '__qualname__', '?')}"


async def score_group(reward_fn: Any, prompt: Any, completions: Sequence[str]) -> list[float]:
    """The rewards of ``completions`` of ``prompt``, each checked (``reward_value``). An
    isolated reward (``tasks.isolated.open_reward``) answers in one round trip to its
    worker; an in-process one is called here, in turn. An exception the reward raises
    propagates (the driver drops the group; ``RewardRaised`` from a worker);
    ``RewardValueError``, ``RewardCrashed``, ``RewardAborted`` stop the run;
    ``RewardTimeout`` drops the group in the driver and stops the run in evaluation."""
    score = getattr(reward_fn, "score", None)
    if score is not None and asyncio.iscoroutinefunction(score):
        return await score(prompt, completions)
    name = reward_label(reward_fn)
    return [reward_value(call_reward(reward_fn, prompt, c, convert=False), name, prompt)
            for c in completions]


class RewardAborted(RuntimeError):
    """The reward raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
    ``GeneratorExit``, a custom one): not a completion it cannot score but a reward that
    tried to end the process. The run fails with it (exit 1), never exits 0 half done."""


def call_reward(reward_fn: RewardFn, prompt: Any, completion: str, convert: bool = True) -> Any:
    """``reward_fn(prompt, completion)``, checked by ``reward_value`` (``convert=False``: as
    returned). An ``Exception`` propagates as is (the caller decides: drop the group, score 0);
    a ``BaseException`` other than ``KeyboardInterrupt`` and ``CancelledError`` becomes
    ``RewardAborted``."""
    try:
        value = reward_fn(prompt, completion)
        return reward_value(value, reward_label(reward_fn), prompt) if convert else value
    except (Exception, KeyboardInterrupt, asyncio.CancelledError):
        raise
    except BaseException as exc:
        raise RewardAborted(f"the reward raised {exc!r}") from None

def load_reward(name: str, **kwargs: Any) -> RewardFn:
    """Build a reward from a built-in name or ``package.module:attribute``, in this process.

    The attribute may be a class or factory (called with ``kwargs``) or a plain function (used
    as is; then ``kwargs`` must be empty). ``train`` uses ``tasks.isolated.open_reward``,
    which runs a user's reward in a worker process.
    """
    return build_reward(name, reward_target(name), kwargs)


def reward_target(name: str) -> str:
    """``module:attribute`` of a built-in name or a config's ``package.module:attribute``;
    ``RewardError`` for a name that is neither."""
    target = BUILTIN.get(name, name)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise RewardError(f"reward {name!r}: expected a built-in name ({', '.join(BUILTIN)}) or "
                          f"'package.module:function'")
    return target


def build_reward(name: str, target: str, kwargs: dict[str, Any]) -> RewardFn:
    """Import ``target`` (``module:attribute``) and build the reward; ``RewardError`` naming
    the module for anything that goes wrong: an import error, any exception while importing
    or building it (a syntax error, a failing top-level statement), or ``SystemExit`` from
    it (a module that calls ``sys.exit``)."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        raise RewardError(f"reward {name!r}: cannot import {module_name} "
                          f"({_describe(exc)})") from None
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        raise RewardError(f"reward {name!r}: cannot import {target} ({exc})") from None
    if isinstance(obj, type):
        try:
            return obj(**kwargs)
        except (ImportError, TypeError, ValueError) as exc:  # a missing extra, a bad option
            raise RewardError(f"reward {name!r}: {exc}") from None
        except (Exception, SystemExit) as exc:
            raise RewardError(f"reward {name!r}: building {target} failed "
                              f"({_describe(exc)})") from None
    if kwargs:
        raise RewardError(f"reward {name!r} is a function; it takes no options, got "
                          f"{sorted(kwargs)}")
    if not callable(obj):
        raise RewardError(f"reward {name!r}: {target} is not callable")
    return obj


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else f"line {exc.lineno}"
        return one_line(f"SyntaxError: {exc.msg} ({where})")
    return one_line(f"{type(exc).__name__}: {exc}")
