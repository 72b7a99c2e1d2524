"""The length-bias bookkeeping stays bounded over a long run (issue 38, item 4): the driver's
once-a-step ``LengthLog.figures`` folds each unit into running histograms once its fate (from
the event log, ``LogCounts.take_fates``) and its samples' lengths (``lengths.jsonl``) are both
in, and forgets it; before, it recomputed the figures over every unit so far at every step
(O(units so far) per step, and an entry per unit in ``LogCounts.fates`` and ``LengthLog.records``
for the run's life).

``_old_figures`` / ``_old_summary`` below are the full recomputation the runtime did before
(``LengthLog.samples``, ``figures`` and ``summary`` as they were, over every record and every
fate so far, with ``lengthbias.length_bias`` on the listed samples): the incremental figures
must equal them exactly (``==`` on the floats: ``length_bias_of_counts``'s docstring says why
the arithmetic is the same), on hand-worked and randomized inputs, at every step of driver runs
on the scripted engine, and in a run of the session's own path (fake engine, tiny model).
"""

from __future__ import annotations

import json
import random

import pytest

from runtime.accounting import ROLES, ControllerCounts, LengthLog, LogCounts, read_log_counts
from runtime.lengthbias import length_bias, length_bias_of_counts
from runtime.rollout.fake import random_script

from .helpers import make, run

# ------------------------------------------------------ the old full recomputation -------------


def _old_samples(records, fates):
    out = []
    for unit, record in records.items():
        fate = fates.get(unit)
        if fate is None or fate.startswith("unsettled:"):
            continue
        for n, role in zip(record["lengths"], record["roles"]):
            if role == "unstarted":
                continue
            if role in ("surplus", "failed"):
                out.append((n, f"aborted:{role}"))
            elif role == "committed" or fate.startswith("aborted:"):
                out.append((n, fate))
            else:
                out.append((n, "aborted:surplus"))
    return out


def _old_figures(records, fates):
    samples = _old_samples(records, fates)
    j = length_bias([n for n, f in samples if f == "trained"], [n for n, _ in samples]).to_json()
    return {"length_ratio": j["ratio"], "length_ks": j["ks"],
            "length_trained_mean": j["trained_mean"], "length_admitted_mean": j["admitted_mean"],
            "samples_trained": j["trained"], "samples_admitted": j["admitted"]}


def _old_summary(records, fates):
    by_fate: dict[str, list[int]] = {}
    for n, fate in _old_samples(records, fates):
        by_fate.setdefault(fate, []).append(n)
    return {**_old_figures(records, fates), "length_by_fate": {
        fate: {"samples": len(v), "mean": sum(v) / len(v)} for fate, v in sorted(by_fate.items())}}


def _all_fates(controller) -> dict:
    """Every fate in a controller's whole log (a fresh count, nothing taken from it)."""
    counts = ControllerCounts(controller)
    counts.counts()
    return counts.log.fates


def _held(log: LengthLog, counts: LogCounts) -> int:
    """Per-unit entries the bookkeeping holds (fates not taken, records and fates not joined)."""
    return len(counts.fates) + len(log.records) + len(getattr(log, "waiting_fates", {}))


# ------------------------------------------------------------------ hand-worked ---------------


def test_a_hand_worked_join_with_ties_and_both_orders():
    counts, log = LogCounts(), LengthLog()
    # f's fate comes before its lengths, t's after; a's lengths before, its fate with t's
    counts.add({"op": "abort", "unit": "f", "aborted": [], "meta": {"reason": "no_gradient"}})
    log.add("t", [3, 5, 3, 9], ["committed", "committed", "surplus", "stopped"])
    log.add("a", [5, 0], ["committed", "unstarted"])
    assert log.figures(counts.take_fates())["samples_admitted"] == 0  # f: no lengths yet
    assert log.waiting_fates == {"f": "filtered"} and set(log.records) == {"t", "a"}
    log.add("f", [3, 7], ["committed", "failed"])  # joined on arrival
    assert log.waiting_fates == {} and set(log.records) == {"t", "a"}
    counts.add({"op": "consume", "batch": {"units": [{"unit": "t", "staleness": 0}]}})
    counts.add({"op": "abort", "unit": "a", "aborted": [], "meta": {"reason": "timeout"}})
    summary = log.summary(counts.take_fates())
    assert log.records == {} and log.waiting_fates == {} and counts.fates == {}
    # trained: 3, 5; admitted: 3 5 3 9 (t) 3 7 (f) 5 (a) -> 3 3 3 5 5 7 9
    # ECDFs at 3: 1/2 vs 3/7; at 5: 1 vs 5/7 (the sup, 2/7); at 7: 1 vs 6/7; at 9: 1 vs 1
    assert summary == {
        "length_ratio": 4.0 / 5.0, "length_ks": abs(1.0 - 5 / 7),
        "length_trained_mean": 4.0, "length_admitted_mean": 5.0,
        "samples_trained": 2, "samples_admitted": 7,
        "length_by_fate": {"aborted:failed": {"samples": 1, "mean": 7.0},
                           "aborted:surplus": {"samples": 2, "mean": 6.0},
                           "aborted:timeout": {"samples": 1, "mean": 5.0},
                           "filtered": {"samples": 1, "mean": 3.0},
                           "trained": {"samples": 2, "mean": 4.0}}}
    everything = {"t": {"lengths": [3, 5, 3, 9], "roles": ["committed", "committed", "surplus",
                                                            "stopped"]},
                  "a": {"lengths": [5, 0], "roles": ["committed", "unstarted"]},
                  "f": {"lengths": [3, 7], "roles": ["committed", "failed"]}}
    assert summary == _old_summary(everything, {"t": "trained", "a": "aborted:timeout",
                                                "f": "filtered"})


def test_histograms_give_the_list_figures_and_refuse_what_is_not_a_count():
    assert length_bias_of_counts({}, {}).to_json() == length_bias([], []).to_json()
    assert length_bias_of_counts({}, {4: 2}).to_json() == length_bias([], [4, 4]).to_json()
    # every admitted length 0: no ratio, a KS distance
    assert length_bias_of_counts({0: 1}, {0: 3}).to_json() == length_bias([0], [0, 0, 0]).to_json()
    for bad in ({-1: 1}, {1.5: 1}, {True: 1}, {2: -1}, {2: 1.0}):
        with pytest.raises(ValueError, match="lengths >= 0"):
            length_bias_of_counts(bad, {1: 1})


def test_a_resumed_drivers_log_keeps_no_fate_whose_line_cannot_come():
    """A resumed run whose earlier lengths were moved aside (docs/runtime.md, "What train
    validates"; or lost with a crash): its first step takes every earlier unit's fate from the
    recovered log, and no line of theirs will come (only units this process admits add lines).
    Before, they were all held for the run's life."""
    counts, log = LogCounts(), LengthLog()
    log.only_expected()  # as the driver does, before its first step
    log.add("kept", [4, 2], ["committed", "committed"])  # a line of the file, kept on resume
    for i in range(500):
        counts.add({"op": "consume", "batch": {"units": [{"unit": f"old{i}", "staleness": 0}]}})
    counts.add({"op": "consume", "batch": {"units": [{"unit": "kept", "staleness": 0}]}})
    log.expect("new")  # admitted by this process: its fate waits for its line
    counts.add({"op": "abort", "unit": "new", "aborted": [], "meta": {"reason": "timeout"}})
    fates = counts.take_fates()
    figures = log.figures(fates)
    assert log.records == {} and log.waiting_fates == {"new": "aborted:timeout"}
    log.add("new", [7], ["stopped"])
    assert _held(log, counts) == 0
    assert log.figures() == _old_figures(
        {"kept": {"lengths": [4, 2], "roles": ["committed", "committed"]},
         "new": {"lengths": [7], "roles": ["stopped"]}}, fates) != figures
    assert log.figures()["samples_admitted"] == 3


# ------------------------------------------------------------------ randomized ----------------

# a unit's fate, as a trace record that settles it (None: still live at the end)
FATES = {
    "trained": lambda u: {"op": "consume", "batch": {"units": [{"unit": u, "staleness": 1}]}},
    "filtered": lambda u: {"op": "filter", "unit": u},
    "no_gradient": lambda u: {"op": "abort", "unit": u, "aborted": [],
                              "meta": {"reason": "no_gradient"}},
    "timeout": lambda u: {"op": "abort", "unit": u, "aborted": [], "meta": {"reason": "timeout"}},
    "closing_rule": lambda u: {"op": "occupy", "unit": "other", "aborted": [u]},
    "stale": lambda u: {"op": "filter", "unit": u, "meta": {"reason": "stale"}},
    "released": lambda u: {"op": "release_stuck", "aborted": [u], "moves": []},
    "shutdown": lambda u: {"op": "abort", "unit": u, "aborted": [], "meta": {"reason": "shutdown"}},
    "lost": lambda u: {"op": "filter", "unit": u, "meta": {"reason": "lost_in_crash"}},
    "live": None,
}


@pytest.mark.parametrize("driver", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_incremental_figures_equal_the_full_recomputation_at_every_step(seed, driver):
    """Units with every fate and every role, their fate and length line in either order, settled
    out of order, joined a random number of events at a time; lengths from a small range (ties
    everywhere) or up to 2**15 tokens (means and ECDF values that are not short fractions).
    Some units never get a length line (a crash cut them short): a driver's log, told which
    units' lines can come (``expect``), does not keep their fates waiting."""
    rng = random.Random(seed)
    top = rng.choice([3, 12, 2 ** 15])
    events, lineless = [], set()
    for i in range(rng.randint(50, 400)):
        unit = f"g{i}"
        k = rng.randint(1, 6)
        if rng.random() < 0.85:
            events.append(("lengths", unit, [rng.randint(0, top) for _ in range(k)],
                           [rng.choice(ROLES) for _ in range(k)]))
        else:
            lineless.add(unit)
        fate = FATES[rng.choice(list(FATES))]
        if fate is not None:
            events.append(("fate", unit, fate(unit)))
    rng.shuffle(events)
    counts, log = LogCounts(), LengthLog()
    if driver:
        log.only_expected()
        for event in events:
            if event[0] == "lengths":
                log.expect(event[1])
    records, fates = {}, {}  # everything so far: what the old recomputation read
    steps = 0
    while events:
        n = rng.randint(1, 40)
        for event in events[:n]:
            if event[0] == "lengths":
                _, unit, lengths, roles = event
                log.add(unit, lengths, roles)
                records[unit] = {"unit": unit, "lengths": lengths, "roles": roles}
            else:
                counts.add(event[2])
        del events[:n]
        taken = counts.take_fates()
        fates.update(taken)
        assert log.figures(taken) == _old_figures(records, fates)
        # what is held: records whose fate has not come, fates whose record has not
        assert set(log.records) == set(records) - set(fates)
        assert set(log.waiting_fates) == set(fates) - set(records) - (lineless if driver else set())
        steps += 1
    assert log.summary() == _old_summary(records, fates)
    assert steps >= 2


@pytest.mark.parametrize("order", ["as_written", "lengths_first", "events_first"])
@pytest.mark.parametrize("seed", range(4))
def test_the_summary_of_the_files_read_side_by_side_is_the_old_one(tmp_path, seed, order):
    """``summary_of_files`` joins ``events.jsonl`` and ``lengths.jsonl`` as it reads them: the
    same summary as the two files read whole, whatever the order of the lines (a unit's length
    line before or after the event that settles it, or none), torn last lines ignored as
    before."""
    from runtime.accounting import summary_of_files

    rng = random.Random(seed)
    events, lengths = [], []
    for i in range(rng.randint(100, 300)):
        unit = f"g{i}"
        events.append({"op": "reserve", "unit": unit})
        k = rng.randint(1, 5)
        line = {"unit": unit, "lengths": [rng.randint(0, 20) for _ in range(k)],
                "roles": [rng.choice(ROLES) for _ in range(k)]}
        fate = FATES[rng.choice(list(FATES))]
        # its length line before or after its fate's event line, or none (a crash lost it)
        where = rng.choice(["before", "after", "after", "before", "none"])
        if where == "before":
            lengths.append(line)
        if fate is not None:
            events.append(fate(unit))
        if where == "after":
            lengths.append(line)
        if rng.random() < 0.1:
            events.append({"op": "publish"})
    if order == "lengths_first":
        lengths = sorted(lengths, key=lambda r: -int(r["unit"][1:]))
    elif order == "events_first":
        rng.shuffle(lengths)
    log_path, lengths_path = tmp_path / "events.jsonl", tmp_path / "lengths.jsonl"
    log_path.write_text("".join(json.dumps(r) + "\n" for r in [{"header": 1}, *events])
                        + '{"op": "cons')
    lengths_path.write_text("".join(json.dumps(r) + "\n" for r in lengths) + '{"unit": "g')
    whole = read_log_counts(log_path)
    assert summary_of_files(log_path, lengths_path) == {
        **whole.summary(), **_old_summary(LengthLog.read(lengths_path).records, whole.fates)}


# ------------------------------------------------------- driver runs, bounded -----------------


@pytest.mark.parametrize("overrides", [dict(candidates=8), dict(capacity=6),
                                       dict(candidates=6, capacity=6, unit_s=0.08)])
def test_a_long_run_holds_entries_of_live_units_only_and_each_step_is_exact(overrides, tmp_path):
    """60 steps on the scripted engine: at every step the figures equal the old recomputation
    over every unit so far (fates from the controller's whole log, lengths from the streamed
    file), while the entries held stay within the units that can be live at once: those in the
    controller's eta + 1 buffers, twice (a record waiting for its unit's fate, or a fate waiting
    for the lengths of a unit whose aborted requests are still returning)."""
    steps = 60
    driver, _, _, clock = make(script=random_script(3, max_len=12), max_tokens=12, steps=steps,
                               **overrides)
    path = tmp_path / "lengths.jsonl"
    driver.lengths = LengthLog.open(path)
    s = driver.s
    bound = 2 * (s.max_staleness + 1) * (s.capacity or s.batch_size)
    held, settled = [], []

    def on_step(record):
        held.append(_held(driver.lengths, driver.log_counts.log))
        fates = _all_fates(driver.controller)
        settled.append(len(fates))
        assert record.lengths == _old_figures(LengthLog.read(path).records, fates)

    driver.on_step = on_step
    run(driver, clock)
    driver.lengths.close()
    assert len(held) == steps and settled[-1] >= steps * s.batch_size
    assert max(held) <= bound, (f"entries held per step {held}, units settled {settled}: "
                                f"more than {bound}")


def test_the_summary_without_an_event_log_file_is_the_old_one(tmp_path):
    """``session._log_summary``'s in-memory path (no ``events.jsonl``): the driver's own counts
    and figures, caught up to the controller's last event."""
    from runtime.session import _log_summary

    driver, _, _, clock = make(script=random_script(5, max_len=12), max_tokens=12, steps=8,
                               candidates=8, capacity=6)
    path = tmp_path / "lengths.jsonl"
    driver.lengths = LengthLog.open(path)
    run(driver, clock)
    driver.lengths.close()
    summary = _log_summary(driver, tmp_path / "no-log")
    assert summary == {**ControllerCounts(driver.controller).summary(),
                       **_old_summary(LengthLog.read(path).records, _all_fates(driver.controller))}
    assert summary["samples_admitted"] > summary["samples_trained"] > 0


# ------------------------------------------------------ the session's own path ----------------


async def _session(run_dir, tiny_model, steps, resume=False):
    """A durable session run (fake engine, tiny model) whose every step checks its figures
    against the old recomputation from the two files as they stand at that moment, and
    counts the entries its bookkeeping holds. Returns (result, figures expected, held)."""
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.session import run_training
    from runtime.tasks.base import load_reward

    cfg = load_config(None, {
        "rollout.backend": "fake", "run.progress": False, "run.plot": False,
        "run.eval_prompts": 0, "run.output_dir": str(run_dir), "run.steps": steps,
        "staleness.batch_size": 4, "staleness.group_size": 2, "staleness.candidates": 4,
        "staleness.max_staleness": 1})
    expected, held = [], []

    def hook(driver):
        inner = driver.on_step

        def on_step(record):  # the files as they stand when the step's figures were taken
            fates = read_log_counts(run_dir / "events.jsonl").fates
            want = _old_figures(LengthLog.read(run_dir / "lengths.jsonl").records, fates)
            assert record.lengths == want
            expected.append(want)
            held.append(_held(driver.lengths, driver.log_counts.log))
            if inner is not None:
                inner(record)

        driver.on_step = on_step

    reward = load_reward(cfg.reward.name, **cfg.reward.options)
    result = await run_training(cfg, tiny_model, load_prompts(cfg.data.path), reward, run_dir,
                                resume=run_dir if resume else None, log=lambda _: None,
                                driver_hook=hook)
    return result, expected, held


@pytest.mark.slow
async def test_a_durable_session_run_reports_the_old_figures(tmp_path, tiny_model):
    """A durable run (its controller forgets counted events; its log is ``events.jsonl``) with
    the fake engine and the real trainer: every ``metrics.jsonl`` row and the summary equal the
    old recomputation from the two files."""
    result, expected, held = await _session(tmp_path, tiny_model, 6)
    assert result.driver.forget_counted
    assert max(held) <= 2 * 2 * 4  # the units in eta + 1 buffers of 4, twice (as above)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len(expected) == 6
    for row, want in zip(rows, expected):
        assert {k: row[k] for k in want} == want
    summary = json.loads((tmp_path / "summary.json").read_text())
    old = _old_summary(LengthLog.read(tmp_path / "lengths.jsonl").records,
                       read_log_counts(tmp_path / "events.jsonl").fates)
    assert {k: summary[k] for k in old} == old
    assert summary["samples_admitted"] > summary["samples_trained"] > 0


@pytest.mark.slow
async def test_a_resumed_session_joins_the_earlier_units_from_the_files(tmp_path, tiny_model):
    """Crash and resume (the log cut after its second consume, as a crash while batch 1 trained
    leaves it; ``lengths.jsonl`` then holds lines of units the cut log never reserved): each
    step of the resumed run reports the old recomputation over both incarnations' units, from
    the files, and holds no more than the first did; the summary too."""
    await _session(tmp_path, tiny_model, 3)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    consumes = [i for i, x in enumerate(lines) if json.loads(x)["op"] == "consume"]
    (tmp_path / "events.jsonl").write_text("\n".join(lines[:consumes[1] + 1]) + "\n")
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    (tmp_path / "metrics.jsonl").write_text(rows[0] + "\n")
    _, expected, held = await _session(tmp_path, tiny_model, 6, resume=True)
    assert expected and max(held) <= 2 * 2 * 4
    summary = json.loads((tmp_path / "summary.json").read_text())
    old = _old_summary(LengthLog.read(tmp_path / "lengths.jsonl").records,
                       read_log_counts(tmp_path / "events.jsonl").fates)
    assert {k: summary[k] for k in old} == old and summary["steps"] == 6
