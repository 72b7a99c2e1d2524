"""The embedded synthetic task: integer addition ``a+b=`` with a verifiable answer.

The shipped file ``runtime/tasks/data/arithmetic.jsonl`` holds every single-digit problem
(``0+0=`` .. ``9+9=``, 100 lines) in a seeded order; ``python -m runtime.tasks.arithmetic``
rewrites it (``--max-operand 19`` for a 400-problem variant). ``make_problems`` draws a seeded
stream of problems (the tiny model's supervised warm-up uses it). ``ExactAnswerReward`` is the verifiable-answer
reward: 1 when the completion, up to its end, is exactly the reference integer, else 0. There is
no partial credit: the tiny model's supervised warm-up (``runtime.models.tiny``) leaves it right
often enough that GRPO groups have reward variance to learn from.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from .. import atomic_io, inputs
from .base import Prompt, finite_option

DATA_FILE = Path(__file__).parent / "data" / "arithmetic.jsonl"
PROG = "python -m runtime.tasks.arithmetic"
MAX_OPERAND = 999  # (max_operand + 1) ** 2 problems: a million at most
_INT = re.compile(r"[+-]?\d+")


def all_problems(seed: int, max_operand: int = 9) -> list[dict[str, str]]:
    """Every problem with operands in 0..max_operand exactly once, in a seeded order."""
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)}
            for a in range(max_operand + 1) for b in range(max_operand + 1)]
    random.Random(seed).shuffle(rows)
    return rows


def make_problems(n: int, seed: int, max_operand: int = 9) -> list[dict[str, str]]:
    """``n`` problems ``{"prompt": "a+b=", "answer": "a+b"}`` with operands in 0..max_operand."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        out.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return out


class ExactAnswerReward:
    """1.0 when the completion is exactly the reference answer (an integer), else 0.0.

    Surrounding whitespace is ignored; anything else (a second number, trailing text) is wrong,
    so the model must also learn to stop. Prompts without an answer raise ``ValueError``.
    """

    needs_answer = True  # train --check refuses data.answer_field: null

    def __init__(self, correct: float = 1.0, wrong: float = 0.0) -> None:
        self.correct = finite_option("correct", correct)
        self.wrong = finite_option("wrong", wrong)

    @staticmethod
    def check_answer(answer: str) -> None:
        """The reference answer must be an integer (what the completion is compared to)."""
        if not _INT.fullmatch(answer.strip()):
            raise ValueError(f"exact_answer compares integers, and {answer!r} is not one")

    def __call__(self, prompt: Prompt, completion: str) -> float:
        if prompt.answer is None:
            raise ValueError(f"prompt {prompt.index} has no reference answer")
        text = completion.strip()
        if _INT.fullmatch(text) and int(text) == int(prompt.answer):
            return self.correct
        return self.wrong


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description="write the synthetic arithmetic task "
                                                   "as JSONL")
    ap.add_argument("--out", type=inputs.path_arg, default=DATA_FILE)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-operand", type=int, default=9)
    args = ap.parse_args(argv)
    try:
        inputs.int_in("--seed", args.seed, 0, 2**63 - 1)
        inputs.int_in("--max-operand", args.max_operand, 1, MAX_OPERAND)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        inputs.output_file(args.out, "--out")
    except (inputs.InputError, OSError) as exc:
        why = exc if isinstance(exc, inputs.InputError) else f"--out {args.out}: {exc.strerror}"
        print(f"{PROG}: {why}", file=sys.stderr)
        return 2
    rows = all_problems(args.seed, args.max_operand)
    with atomic_io.atomic(args.out) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} problems to {args.out}")
    return 0


if __name__ == "__main__":
    from ..cli import script

    script(main, PROG)
