"""Experiment 4 (reward filtering, ``studies.scenarios.filtering``) measures every rule of a
filtered row over the same prompts: each runs until it has trained ``batches`` batches' worth of
groups with a gradient (``RunSpec.gradient_batches``, ``FILTERED_MEASURE``), the warm-up being
the batches that trained the first fifth of them. Before, every rule ran ``batches`` batches: a
rule that trains its no-gradient groups (NeMo-RL as shipped, TRL) then covered about 1 - rate of
the prompts a rule that filters them (Reserve–Occupy) covered, and the ratio compared different
stretches of the workload.

The hand-checked row: 8 prompts of 2 answers each, alternately long (prompt 0, 2, ...: 400
tokens) and short (100 tokens), and a filter whose outcome follows the length exactly (skew 10,
rate 0.5): every long group has no gradient, every short one has one. With batches of 4 groups,
Reserve–Occupy trains the four short groups of 8 prompts per batch; NeMo in_order (it trains
them, zero advantage) two long and two short groups of 4 prompts per batch, so it needs twice
the batches for the same prompts (TRL drops some groups that grew stale while waiting, so it
trains other prompts, but as many of them with a gradient). The experiment's own loop runs it
(its workload generator replaced by the hand workload, its ``simulate`` watched for the runs it
made)."""

from __future__ import annotations

from reserve_occupy_peers import make_policy
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.model.filtering import RewardFilter
from reserve_occupy_sim.model.runner import FILTERED_MEASURE, RunSpec, simulate
from reserve_occupy_sim.model.workload import GroupSpec, Workload
from reserve_occupy_sim.studies import scenarios

LONG, SHORT, PROMPT = 400, 100, 20
HAND = Workload("alternating", tuple(
    GroupSpec(i, PROMPT, (LONG, LONG) if i % 2 == 0 else (SHORT, SHORT)) for i in range(8)))
RATE, SKEW = 0.5, 10.0  # p = 1 for a long group, e**-20 for a short one
N, B = 5, 4  # batches (of groups with a gradient), groups per batch (verl's sync step: 4)
COST = preset("qwen3-8b-h20")
# Reserve–Occupy, the rules that filter (verl drop, NeMo's drop path) and the two that train
# their no-gradient groups (NeMo in_order as shipped, TRL)
FILTERS = ("Reserve–Occupy", "NeMo in_order, drop path (what-if)", "verl drop")
TRAINS = ("NeMo in_order", "TRL")
POLICIES = tuple(p for p in scenarios.FILTER_POLICIES if p[0] in FILTERS + TRAINS)


def _experiment(monkeypatch, settings=((RATE, SKEW),)):
    """Experiment 4 on the hand workload: (its payload, {label: the Simulator of each run})."""
    sims: dict[str, list] = {}

    def watched(spec, workload, cost, **kw):
        result, sim = simulate(spec, workload, cost, **kw)
        label = next(lb for lb, name, opts in POLICIES
                     if (name, opts) == (spec.policy, spec.options))
        sims.setdefault(label, []).append((spec, result, sim))
        return result, sim

    monkeypatch.setattr(scenarios, "generate", lambda seed, shape: HAND)
    monkeypatch.setattr(scenarios, "simulate", watched)
    payload, _table = scenarios.filtering(COST, etas=(1,), settings=settings, seeds=1,
                                          batches=N, batch_size=B, policies=POLICIES,
                                          progress=False)
    return payload, sims


def _gradient_prompts(sim) -> list[int]:
    """The workload positions of the groups with a gradient the run trained."""
    by = {r.tid: r for r in sim.ledger.requests}
    return sorted({by[t].group.index for b in sim.ledger.batches[: sim.n_batches]
                   for t in b.tids if not by[t].group.no_grad})


def test_the_hand_row_filter_follows_the_length():
    outcomes = RewardFilter(RATE, SKEW, 0).bind(HAND)
    assert [outcomes.no_gradient(k) for k in range(64)] == [k % 2 == 0 for k in range(64)]
    for label, name, options in POLICIES:
        assert make_policy(name, 1, **dict(options)).filters is (label in FILTERS), label


def test_every_rule_of_a_filtered_row_is_measured_over_the_same_prompts(monkeypatch):
    payload, sims = _experiment(monkeypatch)
    assert set(sims) == set(FILTERS + TRAINS)
    # every rule trained N * B groups with a gradient, nothing fewer; the rules that drop nothing
    # the same ones, the first N * B short prompts (1, 3, ..., 2NB - 1)
    for label, [(_spec, result, sim)] in sims.items():
        assert result.tokens_useful == N * B * 2 * (PROMPT + SHORT), label
        if label != "TRL":  # TRL drops what grew stale while it waited (it trains others)
            assert _gradient_prompts(sim) == list(range(1, 2 * N * B, 2)), label
    for label in FILTERS:  # N batches of B short groups; the warm-up the first fifth of them
        (_s, result, _sim), = sims[label]
        assert (result.batches, result.warmup_batches) == (N, N // 5), label
    # in_order: 2N batches of B/2 long and B/2 short groups; TRL more than N batches too
    (_s, nemo, _sim), = sims["NeMo in_order"]
    assert (nemo.batches, nemo.warmup_batches) == (2 * N, 2 * (N // 5))
    assert nemo.no_gradient_tokens == N * B * 2 * (PROMPT + LONG)
    (_s, trl, _sim), = sims["TRL"]
    assert trl.batches > N and trl.no_gradient_tokens > 0
    # the steady window, after the warm-up, holds the same short groups for every rule
    for label, [(_s, result, sim)] in sims.items():
        steady = sim.ledger.batches[result.warmup_batches: sim.n_batches]
        want = (N - N // 5) * B * 2 * (PROMPT + SHORT)
        assert sum(b.useful_tokens for b in steady) == want, label
    # the results file says so: each cell names the measure, each run the batches it took
    by = {c["policy"]: c for c in payload["cells"]}
    assert set(by) == set(FILTERS + TRAINS)
    assert FILTERED_MEASURE in payload["definitions"]["measure"]
    for label, c in by.items():
        assert c["measure"] == FILTERED_MEASURE
        assert [r["batches"] for r in c["runs"]] == [sims[label][0][1].batches], label
        assert c["runs"][0]["batches"] == N if label in FILTERS else c["runs"][0]["batches"] > N
    # and the ratio is Reserve–Occupy's steady rate over the rule's, over those same prompts
    ro = sims["Reserve–Occupy"][0][1].steady_throughput
    for label in TRAINS:
        assert by[label]["ratio"] == [ro / sims[label][0][1].steady_throughput]


def test_a_rule_that_filters_makes_its_plain_run(monkeypatch):
    """The measure moves only the rules that train their no-gradient groups: one that filters
    them trains N batches' worth of gradient groups in exactly N batches, bit for bit the run
    over a plain count of N batches."""
    _payload, sims = _experiment(monkeypatch)
    for label in FILTERS:
        (spec, result, _sim), = sims[label]
        assert spec.gradient_batches
        plain, _ = simulate(RunSpec(spec.policy, spec.eta, N, B, options=spec.options,
                                    filtering=spec.filtering), HAND, COST)
        assert result.to_json() == plain.to_json(), label


def test_an_unfiltered_row_is_the_plain_run(monkeypatch):
    """A row without filtering (rate 0) keeps the plain count of batches and states no measure:
    every rule's run is bit for bit the one over N batches."""
    payload, sims = _experiment(monkeypatch, settings=((0.0, 0.0),))
    for c in payload["cells"]:
        assert "measure" not in c and [r["batches"] for r in c["runs"]] == [N]
    for label, [(spec, result, _sim)] in sims.items():
        assert not spec.gradient_batches
        plain, _ = simulate(RunSpec(spec.policy, spec.eta, N, B, options=spec.options,
                                    filtering=spec.filtering), HAND, COST)
        assert result.to_json() == plain.to_json(), label


def test_every_filtered_row_of_the_stored_experiment_is_measured_over_the_same_prompts():
    """docs/results/exp4_filtering.json (``make sim-experiments``) was made with the measure: in
    every cell, each rule that filters ran its plain ``batches`` batches, each that trains its
    no-gradient groups more, and a wedged run is reported as such."""
    import json
    from pathlib import Path

    stored = json.loads((Path(__file__).resolve().parents[2] / "docs" / "results"
                         / "exp4_filtering.json").read_text(encoding="utf-8"))
    filters = {label: make_policy(name, 1, **dict(options)).filters
               for label, name, options in scenarios.FILTER_POLICIES}
    assert len(stored["cells"]) == len(scenarios.FILTER_POLICIES) * 3 * len(
        scenarios.FILTER_SETTINGS)
    assert FILTERED_MEASURE in stored["definitions"]["measure"]
    for c in stored["cells"]:
        assert c["rate"] > 0 and c["measure"] == FILTERED_MEASURE, c["policy"]
        ran = [r["batches"] for r in c["runs"] if "stalled" not in r]
        assert len(ran) + c["stalled"] == stored["seeds"]
        if filters[c["policy"]]:
            assert ran == [stored["batches"]] * len(ran), (c["policy"], c["rate"], c["eta"])
        else:
            assert ran and min(ran) > stored["batches"], (c["policy"], c["rate"], c["eta"])
