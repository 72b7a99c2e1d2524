"""Length bias in the runtime (issue 11, items 2 and 5): each sample's response length joined
with its unit's fate from the event log, per step in ``metrics.jsonl`` and in the summary.

The driver tests run the scripted engine on the virtual clock, with finishing times
proportional to the answer's length (``random_script``): the first ``group_size`` of a group's
candidates to finish are its shortest, so group-level oversampling trains shorter answers than
the policy produced, and without oversampling (or filtering) training sees what was admitted.
"""

from __future__ import annotations

import json

import pytest

from runtime.accounting import ControllerCounts, LengthLog, LogCounts
from runtime.cli import main
from runtime.metrics import step_row, summary_table
from runtime.rollout.fake import random_script

from .helpers import derive_lengths, make, run


def _run(seed: int = 0, lengths_path=None, **overrides):
    driver, _, trainer, clock = make(script=random_script(seed, max_len=12), max_tokens=12,
                                     steps=12, **overrides)
    if lengths_path is not None:  # streamed: the per-unit records are read back from the file
        driver.lengths = LengthLog.open(lengths_path)
    records = run(driver, clock)
    driver.lengths.close()
    return driver, trainer, records, driver.lengths.summary(driver.log_counts.take_fates())


@pytest.mark.parametrize("seed", [0, 1])
def test_group_oversampling_trains_shorter_answers(seed):
    _, _, _, over = _run(seed, candidates=8)  # 8 candidates, the first 4 to finish commit
    assert over["length_ratio"] < 0.9 and over["length_ks"] > 0.1
    by_fate = over["length_by_fate"]
    assert by_fate["aborted:surplus"]["mean"] > by_fate["trained"]["mean"]
    # without oversampling nothing is selected by length: training sees what was admitted
    _, _, _, plain = _run(seed, filter_zero_variance=False)
    assert plain["length_ratio"] == 1.0 and plain["length_ks"] == 0.0
    assert plain["samples_trained"] == plain["samples_admitted"] == 12 * 4 * 4
    # filtering equal-reward groups drops whole groups: the mean barely moves
    _, _, _, filtered = _run(seed)
    assert filtered["length_ratio"] == pytest.approx(1.0, abs=0.05)
    assert filtered["samples_admitted"] > filtered["samples_trained"]


@pytest.mark.parametrize("overrides", [dict(candidates=8), dict(capacity=6),
                                       dict(candidates=6, capacity=6, unit_s=0.08)])
def test_every_generated_token_and_every_trained_sample_is_accounted(overrides, tmp_path):
    """Two sources the length log does not feed: the trainer's batches (what trained) and the
    driver's count of tokens the engine returned (everything generated, aborts included). The
    driver's log forgets a unit once its fate and lengths are joined: per unit, the records
    come from the file, the fates from the controller's log."""
    path = tmp_path / "lengths.jsonl"
    driver, trainer, records, summary = _run(lengths_path=path, **overrides)
    trained = sorted(len(s.token_ids) for b in trainer.batches for g in b.groups
                     for s in g.samples)
    fates = ControllerCounts(driver.controller).take_fates()
    written = LengthLog.read(path)
    mine = sorted(n for n, fate in written.samples(fates) if fate == "trained")
    assert mine == trained
    # a record per unit whose generation ended, written after its aborted requests returned:
    # every token the engine returned is in exactly one of them
    assert (sum(sum(r["lengths"]) for r in written.records.values())
            == driver.accounting.tokens_generated)
    if "candidates" in overrides:
        assert summary["length_ratio"] < 1.0
    if "capacity" in overrides:  # the closing rule aborted reservations, with their tokens
        assert summary["length_by_fate"]["aborted:closing_rule"]["samples"] > 0


def test_each_step_reports_the_bias_so_far():
    _, _, records, summary = _run(candidates=8)
    rows = [step_row(r, p) for r, p in zip(records, [None, *records])]
    assert all(r["length_ratio"] < 1.0 and 0 < r["length_ks"] <= 1 for r in rows)
    trained = [r["samples_trained"] for r in rows]
    assert trained == sorted(trained) and trained[-1] <= summary["samples_trained"]
    assert rows[-1]["length_admitted_mean"] > rows[-1]["length_trained_mean"]


def _fates_of(*records):
    counts = LogCounts()
    for r in records:
        counts.add(r)
    return counts.fates


def test_a_samples_fate_joins_its_role_with_its_units_fate(tmp_path):
    fates = _fates_of(
        {"op": "reserve", "unit": "t"}, {"op": "reserve", "unit": "f"},
        {"op": "occupy", "unit": "t", "aborted": ["c"]},
        {"op": "consume", "batch": {"units": [{"unit": "t", "staleness": 0}]}},
        {"op": "abort", "unit": "f", "aborted": [], "meta": {"reason": "no_gradient"}},
        {"op": "abort", "unit": "o", "aborted": [], "meta": {"reason": "timeout"}},
        {"op": "abort", "unit": "s", "aborted": [], "meta": {"reason": "shutdown"}},
        {"op": "abort", "unit": "x", "aborted": ["y"], "meta": {"reason": "lost_in_crash"}})
    assert fates == {"t": "trained", "c": "aborted:closing_rule", "f": "filtered",
                     "o": "aborted:timeout", "s": "unsettled:shutdown",
                     "x": "unsettled:lost_in_crash", "y": "unsettled:lost_in_crash"}
    log = LengthLog.open(tmp_path / "lengths.jsonl")
    log.add("t", [3, 9, 7, 0], ["committed", "surplus", "stopped", "unstarted"])
    log.add("f", [4, 8], ["committed", "failed"])
    log.add("o", [2, 5], ["committed", "stopped"])
    log.add("c", [6], ["stopped"])
    log.add("s", [1], ["committed"])  # the run ended: left out
    log.add("live", [1], ["committed"])  # no fate in the log: left out
    with pytest.raises(ValueError, match="token counts"):
        log.add("bad", [1, -1], ["committed", "surplus"])
    log.close()
    assert sorted(log.samples(fates)) == sorted([
        (3, "trained"), (9, "aborted:surplus"), (7, "aborted:surplus"),
        (4, "filtered"), (8, "aborted:failed"), (2, "aborted:timeout"),
        (5, "aborted:timeout"), (6, "aborted:closing_rule")])
    figures = log.figures(fates)
    assert figures["length_ratio"] == pytest.approx(3 / (44 / 8))
    assert figures["samples_trained"] == 1 and figures["samples_admitted"] == 8
    # the file holds every record, the bad one not included; the log only the one it could
    # not join with a fate (the units joined are folded into the figures and forgotten)
    again = LengthLog.read(tmp_path / "lengths.jsonl")
    assert set(again.records) == {"t", "f", "o", "c", "s", "live"}
    assert list(log.records) == ["live"] and again.records["live"] == log.records["live"]


def test_the_length_file_survives_a_torn_line_and_a_resume(tmp_path):
    path = tmp_path / "lengths.jsonl"
    log = LengthLog.open(path)
    log.add("g0", [3], ["committed"])
    log.add("g1", [4], ["committed"])
    log.close()
    with path.open("a") as f:
        f.write('{"unit": "g2", "len')  # a crash in the middle of a line
    assert set(LengthLog.read(path).records) == {"g0", "g1"}
    # a resumed run keeps the lines of units its recovered log knows, and appends
    log = LengthLog.open(path, append=True, known={"g0"})
    log.add("g1", [5], ["committed"])
    log.close()
    assert LengthLog.read(path).records == {
        "g0": {"unit": "g0", "lengths": [3], "roles": ["committed"]},
        "g1": {"unit": "g1", "lengths": [5], "roles": ["committed"]}}
    path.write_text('{"unit": "g0"}\n{"unit": "g1", "lengths": [1], "roles": ["committed"]}\n')
    with pytest.raises(ValueError, match=r"lengths.jsonl:1: not a length record"):
        LengthLog.read(path)


def test_train_reports_the_bias_of_group_oversampling(tmp_path, capsys):
    """``train`` with ``staleness.candidates``: the summary's figure is the files' (derived
    independently), below 1, and printed next to the throughput."""
    out = tmp_path / "run"
    assert main(["train", "--no-progress", "--set", "rollout.backend=fake",
                 "--set", "run.eval_prompts=0", "--set", "run.plot=false",
                 "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
                 "--set", "staleness.candidates=8", "--steps", "3",
                 "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    derived = derive_lengths(out)
    assert summary["length_ratio"] == pytest.approx(derived["length_ratio"], abs=1e-12)
    assert summary["length_ks"] == pytest.approx(derived["length_ks"], abs=1e-12)
    assert derived["trained_tokens"] == summary["tokens_trained"]
    assert summary["length_ratio"] < 1.0
    assert "length bias, trained / admitted" in printed and "aborted:surplus" in printed
    assert summary_table(summary).count("length") >= 2
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["length_ratio"] is not None for r in rows)
