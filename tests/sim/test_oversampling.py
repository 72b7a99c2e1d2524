"""Length bias, both oversampling modes, the Reserve–Occupy extension prototypes and the frontier
table (smoke)."""

from __future__ import annotations

import math

import pytest

from runtime.lengthbias import ks_distance, length_bias
from reserve_occupy_sim.studies import frontier
from reserve_occupy_sim.model.core import Simulator
from reserve_occupy_peers import make_policy
from reserve_occupy_sim.model.runner import RunSpec, simulate
from reserve_occupy_sim.model.workload import parse_workload

from sim_helpers import BATCH


# ----------------------------------------------------------------------- length bias -------

def test_ks_distance_known_values():
    assert ks_distance([1, 2, 3], [1, 2, 3]) == 0.0
    assert ks_distance([1, 2], [5, 6, 7]) == 1.0
    assert ks_distance([1, 2, 3], [2, 3, 4]) == pytest.approx(1 / 3)
    assert ks_distance([1, 1, 1, 9], [1, 9, 9, 9]) == pytest.approx(0.5)  # ties
    assert math.isnan(ks_distance([], [1]))


def test_length_bias_ratio_and_errors():
    b = length_bias([100, 200], [100, 200, 600])
    assert b.ratio == pytest.approx(150 / 300)
    assert b.ks == pytest.approx(1 / 3)
    assert (b.trained, b.admitted) == (2, 3)
    assert b.to_json()["ratio"] == pytest.approx(0.5)
    assert math.isnan(length_bias([], [1]).ratio)
    with pytest.raises(ValueError, match="admitted"):
        length_bias([1], [-3])


def test_drop_free_policy_has_no_length_bias(workload, cost):
    r, _ = simulate(RunSpec("reserve_occupy", 1, 6, BATCH), workload, cost)
    assert (r.length_ratio, r.length_ks) == (1.0, 0.0)


def test_batch_level_oversampling_biases_toward_short_answers(workload, cost):
    r, _ = simulate(RunSpec("reserve_occupy", 1, 8, BATCH, options=(("capacity", 6),)),
                    workload, cost)
    assert r.waste_l2_tokens > 0
    assert r.length_ratio < 1.0 and r.length_ks > 0.0


# ----------------------------------------------------------------------- group-level -------

def test_candidates_commit_first_n_and_abort_the_rest(workload, cost):
    spec = RunSpec("reserve_occupy", 1, 6, BATCH, candidates=10)
    r, sim = simulate(spec, workload, cost)  # every check passes (batches of B x 8)
    assert r.settings["candidates"] == 10
    trained = {t for b in sim.ledger.batches for t in b.tids}
    aborted = dict(sim.ledger.aborted)
    committed = [g for g in sim.groups if g.requests and g.requests[0].tid in trained]
    assert committed
    for g in committed:
        assert len(g.requests) == 8 and len(g.surplus) == 2
        done_at = max(q.t_end for q in g.requests)
        for q in g.surplus:  # stopped when the 8th finished, with what it had decoded
            assert q.tid in aborted and q.t_end == done_at
            assert aborted[q.tid] <= q.length
    assert r.waste_l2_tokens > 0 and r.length_ratio < 1.0
    assert r.fates["admitted"] == 10 * len(sim.groups)


def test_candidates_below_group_size_refused(workload, cost):
    with pytest.raises(ValueError, match="candidates"):
        Simulator(make_policy("reserve_occupy", 1), workload, cost, batches=2,
                  batch_size=BATCH, candidates=7)


def test_candidates_on_a_workload_file_reuse_the_groups_own_lengths(cost):
    lines = [f'{{"group": {i}, "prompt_len": 50, "response_lens": [{100 + i}, {300 + i}]}}'
             for i in range(40)]
    loaded = parse_workload(lines)
    assert loaded.groups[3].candidate_lens(3)[2] in (103, 303)
    assert loaded.groups[3].candidate_lens(3) == loaded.groups[3].candidate_lens(3)
    r, _ = simulate(RunSpec("nemo_in_order", 1, 4, 2, candidates=3), loaded, cost)
    assert r.length_ratio <= 1.0


# ----------------------------------------------------------------------- extensions ---------

def test_progress_close_swaps_and_keeps_the_bound(workload, cost):
    opts = (("capacity", 6), ("progress_close", True))
    r, sim = simulate(RunSpec("reserve_occupy", 1, 10, BATCH, options=opts), workload, cost)
    assert sim.policy.swaps > 0 and r.settings["swaps"] == sim.policy.swaps
    assert r.max_staleness <= 1  # also checked by simulate


def test_idle_surplus_and_head_priority_run_bounded(workload, cost):
    for opts in ((("capacity", 6), ("idle_surplus", True)), (("head_priority", True),)):
        r, _ = simulate(RunSpec("reserve_occupy", 2, 6, BATCH, options=opts), workload, cost)
        assert r.max_staleness <= 2


def test_lookahead_admits_long_earlier_epoch_prompts_first(workload, cost):
    r, sim = simulate(RunSpec("reserve_occupy", 1, 4, BATCH, options=(("lookahead", 8),)),
                      workload, cost)
    first = [g.spec for g in sim.groups[:4]]
    window = sorted(workload.groups[:8], key=lambda g: -g.hint)[:1]
    assert first[0] == window[0]  # the longest hint of the first window goes first
    specs = [g.spec.group for g in sim.groups]
    assert len(set(specs)) == len(specs)  # no prompt admitted twice


def test_extension_options_validated():
    with pytest.raises(ValueError, match="idle_surplus"):
        make_policy("reserve_occupy", 1, idle_surplus=True)
    with pytest.raises(ValueError, match="lookahead"):
        make_policy("reserve_occupy", 1, lookahead=-1)
    with pytest.raises(ValueError, match="progress_close"):
        make_policy("reserve_occupy", 1, progress_close="yes")


def test_lookahead_needs_hints(cost):
    loaded = parse_workload([f'{{"group": {i}, "prompt_len": 50, "response_lens": [100, 200]}}'
                             for i in range(20)])
    with pytest.raises(ValueError, match="hint"):
        simulate(RunSpec("reserve_occupy", 1, 2, 2, options=(("lookahead", 4),)), loaded, cost)


# ----------------------------------------------------------------------- frontier smoke ----

def test_frontier_smoke(tmp_path):
    payload = frontier.run(seeds=(0,), etas=(1,), batches=3, batch_size=4, groups=64,
                           say=lambda _s: None)
    keys = [v.key for v in frontier.VARIANTS]
    assert {r["variant"] for r in payload["runs"]} == set(keys)
    for key in keys:
        assert f"| {key}" in payload["table"]
    assert "short answers" in payload["table"]  # first 8 of 10 trains shorter answers
    frontier.plot(payload, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0


def test_cli_flags(capsys):
    import argparse

    from reserve_occupy_sim import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--policy", "reserve_occupy", "--eta", "1", "--batches", "2",
                              "--batch-size", "4", "--groups", "64", "--capacity", "6",
                              "--progress-close", "--candidates", "9", "--no-progress"])
    assert cli.run(args) == 0
    assert "length bias" in capsys.readouterr().out
    for bad in (["--progress-close"], ["--capacity", "2"], ["--candidates", "3"],
                ["--lookahead", "-1"]):
        args = parser.parse_args(["--batch-size", "4", "--groups", "64", "--no-progress"] + bad)
        assert cli.run(args) == 2
        assert "error" in capsys.readouterr().err


def test_frontier_refuses_an_unusable_output_dir_before_running(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(frontier, "run", lambda **kw: pytest.fail("ran before checking"))
    (tmp_path / "file").write_text("")
    assert frontier.main(["--results-dir", str(tmp_path / "file"), "--tiny"]) == 2
    assert "--results-dir" in capsys.readouterr().err
