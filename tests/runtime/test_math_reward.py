"""The math reward (math-verify): the final boxed answer against the record's, compared
symbolically; every failure of the verifier scores 0 with a counted reason, never an error."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from runtime.tasks.base import Prompt, RewardError, load_reward
from runtime.tasks.math import REASONS, MathReward, last_boxed

ROOT = Path(__file__).resolve().parents[2]


def test_last_boxed_takes_the_final_balanced_answer():
    assert last_boxed(r"\boxed{1} then \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{2} and \boxed{3") == "2"  # the unclosed last one is skipped
    assert last_boxed("no answer") is None and last_boxed(r"\boxed{}") == ""


@pytest.mark.parametrize("answer, completion, reason", [
    ("42", r"17 + 25 = 42, so \boxed{42}", "correct"),
    (r"\frac{1}{2}", r"\boxed{0.5}", "correct"),
    (r"5\sqrt{2}", r"\boxed{\sqrt{50}}", "correct"),
    ("x+3", r"\boxed{3 + x}", "correct"),
    ("13.2", r"\boxed{\frac{66}{5}}", "correct"),
    ("42", r"\boxed{41}", "wrong"),
    ("42", r"\boxed{42} no wait \boxed{24}", "wrong"),  # the final answer counts
    ("42", "the answer is 42", "no_boxed"),
    ("42", r"\boxed{???}", "unparsable"),
    ("42", r"\boxed{}", "unparsable"),
    ("??", r"\boxed{1}", "answer_unparsable"),
])
def test_reasons(answer, completion, reason):
    assert MathReward().judge(answer, completion) == reason


def test_scores_format_term_and_counts():
    r = MathReward(format_weight=0.1)
    p = Prompt("q", "42", 0)
    assert r(p, r"\boxed{42}") == pytest.approx(1.1)
    assert r(p, r"\boxed{7}") == pytest.approx(0.1)  # boxed but wrong: the format term only
    assert r(p, "42") == 0.0
    assert r.metrics() == {**{f"reward/{k}": 0.0 for k in REASONS}, "reward/correct": 1.0,
                           "reward/wrong": 1.0, "reward/no_boxed": 1.0}
    with pytest.raises(ValueError, match="no reference answer"):
        r(Prompt("q", None, 3), r"\boxed{1}")


def test_a_verifier_timeout_scores_zero_and_is_counted():
    r = MathReward(timeout_s=1)
    # parses at once, but sympy cannot finish comparing 9^(9^(9^9)) with 42
    assert r(Prompt("q", "42"), r"\boxed{9^{9^{9^{9}}}}") == 0.0
    assert r.metrics()["reward/timeout"] == 1.0


def test_off_the_main_thread_it_runs_without_the_alarm():
    out = []
    t = threading.Thread(target=lambda: out.append(MathReward().judge("1/2", r"\boxed{0.5}")))
    t.start()
    t.join()
    assert out == ["correct"]


def test_loads_by_name_with_options_and_refuses_bad_ones():
    assert isinstance(load_reward("math", format_weight=0.2), MathReward)
    with pytest.raises(RewardError, match="reward 'math': reward option timeout_s must be"):
        load_reward("math", timeout_s=0.5)
    with pytest.raises(RewardError, match="reward 'math': .*unexpected keyword"):
        load_reward("math", tolerance=1)


def test_every_answer_of_the_shipped_sample_verifies_against_itself():
    r = MathReward()
    lines = (ROOT / "configs" / "data" / "math_sample.jsonl").read_text().splitlines()
    assert len(lines) >= 30
    for line in lines:
        answer = json.loads(line)["answer"]
        assert r.judge(answer, r"\boxed{" + answer + "}") == "correct", answer
