"""The instrument's signed-rank interval (``--interval wilcoxon``, bench/instrument.py): the exact
null distribution of the signed-rank statistic against an enumeration of every sign pattern,
the interval and the Hodges-Lehmann estimate against a hand computation, its coverage by
simulation on symmetric data, too few pairs, the A/A false-positive estimator with it, a
committed grid summarized again with it (peers_compare.py --from-results, calibrate.py
--from-raw's path), and docs/peers.md's comparison of the methods (bench/interval_methods.py)
held to the results files."""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
import subprocess
import sys
from collections import Counter

import pytest

from .helpers import load_bench

EPS = 2.0 ** -52  # float64


def _ins():
    return load_bench("instrument")


@pytest.mark.parametrize("n", [*range(0, 11), 12])
def test_the_null_distribution_is_the_enumeration_of_every_sign_pattern(n):
    ins = _ins()
    # every one of the 2^n sign patterns of the ranks 1..n, equally likely under the null: T+ is
    # the sum of the ranks that are positive
    by_hand = Counter(sum(r for r, positive in zip(range(1, n + 1), signs) if positive)
                      for signs in itertools.product((False, True), repeat=n))
    counts = ins.signed_rank_counts(n)
    assert len(counts) == n * (n + 1) // 2 + 1 and sum(counts) == 2 ** n
    assert counts == tuple(by_hand[t] for t in range(len(counts)))


def test_the_largest_c_and_its_coverage():
    ins = _ins()
    # n = 6 (64 patterns): P(T+ <= 0) = 1/64, P(<= 1) = 2/64 ({}, {1}), P(<= 2) = 3/64 ({2}),
    # P(<= 3) = 5/64 ({3}, {1, 2}): c = 3 covers 1 - 6/64 = 0.90625 >= 0.9, c = 4 covers
    # 1 - 10/64 = 0.84375 < 0.9
    assert ins.signed_rank_c(6, 0.9) == (3, 1 - 6 / 64)
    # n = 12: P(T+ <= 17) = 189/4096 (the two-sided 10 % critical value of the tables is 17)
    counts = ins.signed_rank_counts(12)
    assert sum(counts[:18]) == 189
    assert ins.signed_rank_c(12, 0.9) == (18, 1 - 2 * 189 / 4096)  # 90.77 %
    # c = 1 is the range of the values, as the sign interval's k = 1: both need 5 pairs at 90 %
    assert ins.signed_rank_c(5, 0.9) == (1, 1 - 2 / 32)
    assert ins.signed_rank_c(4, 0.9) == (0, 1 - 2 / 16)


def _exp(units):
    return [math.exp(u / 64) for u in units]


def test_the_interval_and_estimate_match_a_hand_computation():
    ins = _ins()
    # log ratios -3, -1, 0, 2, 5, 9 (in 1/64ths); the 21 Walsh averages (y_i + y_j) / 2, i <= j:
    #   -3: -3, -2, -1.5, -0.5, 1, 3     -1: -1, -0.5, 0.5, 2, 4     0: 0, 1, 2.5, 4.5
    #    2:  2, 3.5, 5.5                  5:  5, 7                    9: 9
    # sorted: -3 -2 -1.5 -1 -0.5 -0.5 0 0.5 1 1 [2] 2 2.5 3 3.5 4 4.5 5 5.5 7 9
    # n = 6: c = 3, so [W_(3), W_(19)] = [-1.5, 5.5]; the Hodges-Lehmann estimate, W_(11), is 2
    ratios = _exp([5, -1, 9, 0, -3, 2])
    assert ins.walsh_averages([math.log(r) * 64 for r in ratios]) == pytest.approx(
        [-3, -2, -1.5, -1, -0.5, -0.5, 0, 0.5, 1, 1, 2, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 7, 9],
        abs=64 * 16 * EPS)
    rel = 8 * EPS  # a log and an exp, each correctly rounded to within an ulp or two
    lo, hi, cover = ins.wilcoxon_interval(ratios, 0.9)
    assert (lo, hi) == pytest.approx((math.exp(-1.5 / 64), math.exp(5.5 / 64)), rel=rel)
    assert cover == 1 - 6 / 64
    assert ins.hodges_lehmann(ratios) == pytest.approx(math.exp(2 / 64), rel=rel)
    row = ins.summarize(ratios, "wilcoxon", 0.9)
    assert not row["resolved"]  # the interval holds 1 (log 0)
    assert row["median"] == pytest.approx((1 + math.exp(2 / 64)) / 2, rel=rel)  # unchanged
    assert ins.estimate(row) == row["hl"] == pytest.approx(math.exp(2 / 64), rel=rel)
    assert ins.estimate(ins.summarize(ratios, "sign", 0.9)) == row["median"]
    # every log ratio + 2/64: every Walsh average moves by 2/64: [0.5, 7.5], resolved
    shifted = ins.summarize(_exp([7, 1, 11, 2, -1, 4]), "wilcoxon", 0.9)
    assert (shifted["lo"], shifted["hi"]) == pytest.approx(
        (math.exp(0.5 / 64), math.exp(7.5 / 64)), rel=rel)
    assert shifted["resolved"]
    assert ins.interval(ratios, "wilcoxon", 0.9) == (lo, hi)


@pytest.mark.parametrize("n, draw", [
    (8, lambda rng: rng.gauss(0.0, 0.1)),
    (12, lambda rng: rng.expovariate(20.0) - rng.expovariate(20.0)),  # Laplace: heavy-tailed
    (16, lambda rng: rng.uniform(-0.2, 0.2)),
])
def test_the_coverage_on_symmetric_data_is_the_exact_one(n, draw):
    """For any continuous distribution symmetric about its centre the interval covers the
    centre with exactly ``signed_rank_c``'s coverage; 16000 seeded trials estimate it with a
    binomial standard error ``sqrt(p (1 - p) / 16000)``, and the check allows 4 of those."""
    ins = _ins()
    rng, trials, centre = random.Random(n), 16000, 0.05
    _, cover = ins.signed_rank_c(n, 0.9)
    hits = 0
    for _ in range(trials):
        ratios = [math.exp(centre + draw(rng)) for _ in range(n)]
        lo, hi, _ = ins.wilcoxon_interval(ratios, 0.9)
        hits += lo <= math.exp(centre) <= hi
    assert abs(hits / trials - cover) <= 4 * math.sqrt(cover * (1 - cover) / trials)


def test_too_few_pairs_resolve_nothing():
    ins = _ins()
    # 4 pairs: even the range covers 1 - 2/16 = 0.875 < 0.9
    assert ins.wilcoxon_interval([1.3, 1.4, 1.5, 1.6], 0.9) == (-math.inf, math.inf, 0.875)
    row = ins.summarize([1.3, 1.4, 1.5, 1.6], "wilcoxon", 0.9)
    assert (row["lo"], row["hi"], row["resolved"]) == (None, None, False)
    # the 10 Walsh averages of a < b < c < d: the 5th and 6th are (a + d) / 2 and (b + c) / 2,
    # so the estimate is exp((a + b + c + d) / 4), the geometric mean of the four
    assert row["hl"] == pytest.approx((1.3 * 1.4 * 1.5 * 1.6) ** 0.25, rel=8 * EPS)
    empty = ins.summarize([], "wilcoxon", 0.9)
    assert (empty["pairs"], empty["hl"], empty["resolved"]) == (0, None, False)
    with pytest.raises(ValueError, match="ratio must be a finite number >= 0"):
        ins.wilcoxon_interval([1.0, 1.1, -0.5, 1.2, 0.9], 0.9)
    # a run that trained nothing in its window: ratio 0, log -inf, an interval from 0
    assert ins.wilcoxon_interval([0.0, 1.1, 1.2, 1.3, 1.4], 0.9)[0] == 0.0


def test_the_false_positive_estimator_with_the_signed_rank_interval():
    ins = _ins()
    rng = random.Random(0)
    # 200 distinct A/A ratios, 100 on each side of their median after centring: with 5 pairs
    # the interval is the range (c = 1), resolved iff all 5 draws fall on one side: 2^-4 exactly
    aa = [math.exp(rng.gauss(0.0, 0.1)) for _ in range(200)]
    rate = ins.false_positive_rate(aa, 5, "wilcoxon", 0.9, trials=8000, seed=3)
    assert abs(rate - 0.0625) <= 4 * math.sqrt(0.0625 * 0.9375 / 8000)
    # 12 pairs from a set symmetric about 1 in logs ({1} and exp(+-v) for 100000 v's; the median
    # 1 exactly): given no two draws from one class {v, -v} and no draw of 1, the signs are fair
    # coins independent of the |log ratios|, so the verdict is the test's under its exact null:
    # resolved with probability 1 - coverage. Two draws share a class with probability at most
    # C(12, 2) * 100000 * (2/200001)^2, a draw is 1 with at most 12/200001; the estimate of
    # 20000 trials has its binomial standard error besides.
    v = [abs(rng.gauss(0.0, 0.1)) for _ in range(100_000)]
    sym = [1.0] + [math.exp(x) for x in v] + [math.exp(-x) for x in v]
    trials = 20_000
    _, cover = ins.signed_rank_c(12, 0.9)
    p = 1 - cover
    off = 66 * 100_000 * (2 / 200_001) ** 2 + 12 / 200_001
    rate = ins.false_positive_rate(sym, 12, "wilcoxon", 0.9, trials=trials, seed=1)
    assert abs(rate - p) <= off + 4 * math.sqrt(p * (1 - p) / trials)
    # (the sign interval's at 12 pairs is its own coarser step, 1 - 0.961, as the docs say)
    assert ins.sign_interval([1.0] * 12, 0.9)[2] == 1 - 2 * 79 / 4096


def test_a_committed_grid_is_summarized_again_with_another_interval():
    """peers_compare.resummarize (``--from-results``, and calibrate.py's ``--from-raw``): the
    stored pairs' ratios with the signed-rank interval, the table's header naming the estimate
    it prints; the grid's own method gives back the results as stored."""
    peers, ins = load_bench("peers_compare"), _ins()
    results = json.loads(peers.RESULTS.read_text())
    assert peers.resummarize(results, "sign", 0.9) is results
    before = copy.deepcopy(results)
    again = peers.resummarize(results, "wilcoxon", 0.9)
    assert results == before  # the stored results untouched
    assert again["instrument"]["interval"] == "wilcoxon"
    for c, old in zip(again["comparisons"], results["comparisons"]):
        lo, hi, _ = ins.wilcoxon_interval(old["trained"]["ratios"], 0.9)
        assert (c["trained"]["lo"], c["trained"]["hi"]) == (lo, hi)
        assert c["trained"]["median"] == old["trained"]["median"]
    fp = again["false_positive"]
    assert set(ins.METHODS) <= set(fp) and 0.0 <= fp["wilcoxon"] <= 1.0
    table = peers.render(again).splitlines()
    assert "ratio: the Hodges-Lehmann estimate" in table[0] and "signed-rank" in table[0]
    assert "with the signed-rank interval" in table[1]
    aa = next(c for c in again["comparisons"] if c["aa"])
    assert f"| {aa['trained']['hl']:.3f} [{aa['trained']['lo']:.3f}, " in "\n".join(table)
    # the stored grid renders as it did (no wilcoxon rate in its file: the header unchanged)
    assert "signed-rank" not in peers.render(results)
    # calibrate.py's page from the same path (its --from-raw resummarizes dump["compared"])
    cal = load_bench("calibrate")
    stored = json.loads(cal.RESULTS.read_text())
    page = cal.render(peers.resummarize(stored, "wilcoxon", 0.9))
    assert "the Hodges-Lehmann estimate" in page and cal.render(stored) != page


def test_from_results_prints_and_refuses_what_it_cannot_do(tmp_path):
    peers = load_bench("peers_compare")
    script = [sys.executable, str(peers.ROOT / "bench" / "peers_compare.py")]
    p = subprocess.run([*script, "--from-results", str(peers.RESULTS), "--interval",
                        "wilcoxon"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Hodges-Lehmann" in p.stdout and "| A/A: nemo_in_order |" in p.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": []}')
    for args, says in [(["--from-results", str(tmp_path / "none.json")], "no such file"),
                       (["--from-results", str(bad)], "not the results of a grid"),
                       (["--from-results", str(peers.RESULTS), "--write"], "prints only")]:
        p = subprocess.run([*script, *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and says in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1


def test_the_methods_block_of_docs_peers_md_is_computed_from_the_results_files():
    im = load_bench("interval_methods")
    grids = im.load()
    assert im.doc_block(im.DOC.read_text()) == im.render(grids)
    r = im.compare(grids)
    assert {x["grid"] for x in r["rows"]} == {name for _, name in im.GRIDS}
    assert sum(x["aa"] for x in r["rows"]) == 5  # ranking: one A/A row per eta
    edited = copy.deepcopy(grids)  # a changed pair ratio is caught
    edited["calibration"]["comparisons"][0]["trained"]["ratios"][0] *= 1.05
    assert im.doc_block(im.DOC.read_text()) != im.render(edited)
