"""The math reward: the completion's final ``\\boxed{}`` answer checked against the record's
answer with Hugging Face's ``math-verify`` (the ``math`` extra), which compares symbolically
(``\\frac{1}{2}`` = ``0.5``, ``2\\sqrt{2}`` = ``\\sqrt{8}``), as TRL's GRPO examples do.

Why a library: answer equivalence (LaTeX normalisation, units, sets, intervals, rounding) is
the hard part of a math reward; a hand-rolled comparison would mark right answers wrong.

Every completion gets a score and exactly one reason, counted in ``metrics()`` (the run's
``metrics.jsonl`` reports them per step as ``reward/<reason>``):

``correct``, ``wrong``; ``no_boxed`` (no final ``\\boxed{...}``); ``unparsable`` (the boxed
text is not mathematics the verifier reads); ``timeout`` (parsing or comparison ran past
``timeout_s``, e.g. ``9^{9^{9^{9}}}``); ``answer_unparsable`` (the record's own answer cannot be
read: a data problem, counted rather than crashing the run). All but ``correct`` score
``wrong`` (0), plus ``format_weight`` when a boxed answer is there at all: an optional format
term that rewards answering in the expected form.

The verifier's timeouts are ``signal.alarm`` based: they apply when the reward runs in the main
thread, as it does in ``train`` (the driver's event loop); elsewhere it runs without one. A
completion that runs into the timeout holds the driver's loop for up to ``timeout_s`` (most
are scored in milliseconds), so keep it short.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from .base import Prompt, finite_option

REASONS = ("correct", "wrong", "no_boxed", "unparsable", "timeout", "answer_unparsable")


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` in ``text`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i, depth = start + len("\\boxed{"), 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len("\\boxed{"):i - 1]
        start = text.rfind("\\boxed{", 0, start)  # unclosed: an earlier one may be whole
    return None


class MathReward:
    """``correct`` when the final boxed answer equals ``prompt.answer`` per math-verify, else
    ``wrong``; plus ``format_weight`` for a boxed answer, right or not."""

    needs_answer = True  # train --check refuses data.answer_field: null

    def __init__(self, correct: float = 1.0, wrong: float = 0.0, format_weight: float = 0.0,
                 timeout_s: int = 2) -> None:
        try:
            import math_verify
        except ImportError:
            raise ImportError("the math reward needs math-verify (pip install "
                              "'reserve-occupy[math]' or math-verify==0.9.0)") from None
        if not isinstance(timeout_s, int) or timeout_s < 1:
            raise ValueError(f"reward option timeout_s must be a whole number of seconds >= 1 "
                             f"(the verifier's alarm counts seconds), got {timeout_s!r}")
        self._mv = math_verify
        self.correct = finite_option("correct", correct)
        self.wrong = finite_option("wrong", wrong)
        self.format_weight = finite_option("format_weight", format_weight)
        self.timeout_s = timeout_s
        self.counts: Counter[str] = Counter()
        self._gold: dict[str, list[Any]] = {}

    def metrics(self) -> dict[str, float]:
        """Completions scored so far, by reason (``reward/<reason>``)."""
        return {f"reward/{r}": float(self.counts[r]) for r in REASONS}

    def __call__(self, prompt: Prompt, completion: str) -> float:
        if prompt.answer is None:
            raise ValueError(f"prompt {prompt.index} has no reference answer")
        reason = self.judge(prompt.answer, completion)
        self.counts[reason] += 1
        score = self.correct if reason == "correct" else self.wrong
        if reason != "no_boxed":
            score += self.format_weight
        return score

    def judge(self, answer: str, completion: str) -> str:
        """The reason (one of ``REASONS``) for ``completion`` against ``answer``."""
        from math_verify.errors import TimeoutException

        boxed = last_boxed(completion)
        if boxed is None:
            return "no_boxed"
        limit = self.timeout_s if threading.current_thread() is threading.main_thread() \
            else None
        mv = self._mv
        gold = self._gold.get(answer)
        if gold is None:
            text = answer if "$" in answer or "\\boxed" in answer else f"${answer}$"
            try:
                gold = mv.parse(text, [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()],
                                fallback_mode="no_fallback", parsing_timeout=limit,
                                raise_on_error=True)
            except (Exception, TimeoutException):
                gold = []
            self._gold[answer] = gold
        if not gold:
            return "answer_unparsable"
        try:
            pred = mv.parse("\\boxed{" + boxed + "}", [mv.LatexExtractionConfig()],
                            fallback_mode="no_fallback", parsing_timeout=limit,
                            raise_on_error=True)
        except TimeoutException:
            return "timeout"
        except Exception:  # the parser raises many types for text it cannot read
            return "unparsable"
        if not pred:
            return "unparsable"
        try:
            same = mv.verify(gold, pred, timeout_seconds=limit, raise_on_error=True)
        except TimeoutException:
            return "timeout"
        except Exception:  # sympy fails on some pairs it cannot compare: not equal
            return "wrong"
        return "correct" if same else "wrong"
