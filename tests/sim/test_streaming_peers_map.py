"""Issue 38's peers in the streaming study: the table's new rows and the regime map's peer
columns are added to stored results without rerunning (or moving) what is stored, and the result
is what a run from scratch gives; the target over every bounded peer is counted as stated."""

from __future__ import annotations

import copy
import json

import pytest

from reserve_occupy_peers import PEERS_2026, POLICIES
from reserve_occupy_sim.studies import streaming
from reserve_occupy_sim.studies.regimes import Sweep

QUIET = dict(say=lambda _m: None)
# five distinct cells (two of them filtered), two seeds: seconds
SMALL = Sweep(etas=(1,), train_mults=(0.5,), concurrencies=(8,), truncations=(0.03,),
              filter_rates=(0.0, 0.3), seeds=2, batches=8, groups=64, batch_size=4)


def test_every_new_peer_has_a_row_and_a_map_column():
    policies = {fw.policy for fw in streaming.PEER_FRAMEWORKS}
    assert {cls.name for cls in PEERS_2026} <= policies
    assert {"verl_drop", "trl"} <= policies  # verl V1 drop and TRL async
    for fw in streaming.PEER_FRAMEWORKS:  # the rule's own trainer, the in-flight engine
        assert fw.engine == "in-flight"
        assert fw.trainer == ("stream" if POLICIES[fw.policy].streams else "full")
        assert fw.key in streaming.MAP_PEERS


def test_peers_added_to_a_stored_map_equal_a_run_with_them():
    peers = ("NeMo windowed stream", "verl V1 drop", "TRL async")
    fresh = streaming.run_regimes(sweep=SMALL, peers=peers, **QUIET)
    base = streaming.run_regimes(sweep=SMALL, **QUIET)
    stored = json.loads(json.dumps(base))
    first = streaming.run_regimes(sweep=SMALL, peers=peers[:1], base=stored, **QUIET)
    assert stored == json.loads(json.dumps(base))  # the stored result is not changed in place
    added = streaming.run_regimes(sweep=SMALL, peers=peers, base=first, **QUIET)
    assert added == fresh
    for old, new in zip(base["cells"], added["cells"]):  # the stored figures did not move
        assert new["ratios"] == old["ratios"]
        assert set(new["peers"]) == set(peers)
        ro = [r["steady"] for r in new["ro_in_flight"]]
        for p in new["peers"].values():
            vals = [a / b for a, b in zip(ro, p["steady"])]
            assert p["min"] == min(vals) and p["mean"] == pytest.approx(sum(vals) / len(vals))


def test_peers_run_only_in_the_selected_cells_and_the_rest_can_follow():
    peers = ("tinker",)
    base = streaming.run_regimes(sweep=SMALL, **QUIET)
    some = streaming.run_regimes(sweep=SMALL, peers=peers, base=base,
                                 select=lambda c: c.filter_rate == 0, **QUIET)
    assert [bool(c.get("peers")) for c in some["cells"]] == [
        c["filter_rate"] == 0 for c in some["cells"]]
    rest = streaming.run_regimes(sweep=SMALL, peers=peers, base=some, **QUIET)
    assert rest == streaming.run_regimes(sweep=SMALL, peers=peers, **QUIET)


def test_a_stored_map_of_another_sweep_or_an_unknown_peer_is_refused():
    base = streaming.run_regimes(sweep=SMALL, **QUIET)
    with pytest.raises(ValueError, match="another sweep"):
        streaming.run_regimes(sweep=Sweep(etas=(2,), train_mults=(0.5,), concurrencies=(8,),
                                          truncations=(0.03,), filter_rates=(0.0,), seeds=2,
                                          batches=8, groups=64, batch_size=4),
                              peers=("tinker",), base=base, **QUIET)
    with pytest.raises(ValueError, match="not a peer"):
        streaming.run_regimes(sweep=SMALL, peers=("RO full",), **QUIET)


def _cell(eta, ro_vs_in_order, peers):
    return {"slice": "hardware", "eta": eta, "train_mult": 1.0, "concurrency": 40,
            "truncated": 0.03, "filter_rate": 0.0,
            "ratios": {"RO stream": {"mean": 1.0, "min": 1.0},
                       "RO stream in-flight": {"mean": ro_vs_in_order, "min": ro_vs_in_order}},
            "ro_in_flight": [{"steady": 100.0, "length_ratio": 1.0, "max_staleness": eta,
                              "dropped": 0, "waste": 0.0}],
            "peers": {k: {"mean": v, "min": v, "stalled": 0, "steady": [100.0 / v],
                          "length_ratio": 0.9, "max_staleness": eta, "dropped": 3.0,
                          "waste": 0.1} for k, v in peers.items()}}


def test_the_target_counts_every_bounded_peer_and_names_the_worst():
    reg = {"cells": [
        _cell(1, 1.00, {"NeMo windowed stream": 1.20, "TRL async": 0.50}),  # TRL: not bounded
        _cell(2, 1.01, {"NeMo windowed stream": 0.97, "tinker": 1.1}),      # windowed misses
        _cell(3, 0.98, {"tinker": 1.2}),                                    # in_order misses
        {"slice": "workload", "eta": 4, "train_mult": 1.0, "concurrency": 40, "truncated": 0.1,
         "filter_rate": 0.0, "ratios": {"RO stream in-flight": {"mean": 1.0, "min": 1.0}}}]}
    text = streaming.regimes_peers_table(reg)
    assert "in **1 of 3** cells with peers" in text and "the map has 4" in text
    # windowed and tinker drop: against the drop-free bounded rows only in_order counts here
    assert "drop nothing (NeMo in_order stream, NeMo weight_fifo stream, window FIFO): " \
           "**2 of 3**, lowest 0.980" in text
    worst = [line for line in text.splitlines() if line.startswith("| hardware |")]
    assert worst[0].endswith("| 0.970 | NeMo windowed stream |")
    assert worst[1].endswith("| 0.980 | NeMo in_order stream |")
    row = next(line for line in text.splitlines() if line.startswith("| TRL async |"))
    assert "| no |" in row and "| 0 of 1 |" in row and "0.900 [0.900]" in row


def test_the_table_rows_are_added_without_moving_the_stored_ones():
    kw = dict(seeds=(0,), etas=(1,), batches=6, batch_size=4, groups=64, chunk_sweep=(1,),
              **QUIET)
    fresh = streaming.run(**kw)
    old_keys = {fw.key for fw in streaming.FRAMEWORKS} - {
        fw.key for fw in streaming.PEER_FRAMEWORKS}
    stored = copy.deepcopy(fresh)
    stored["frameworks"] = [fw for fw in stored["frameworks"] if fw["key"] in old_keys]
    stored["runs"] = [r for r in stored["runs"] if r["framework"] in old_keys]
    stored["rows"] = streaming.rows(stored)
    before = copy.deepcopy(stored["rows"])
    added = streaming.add_frameworks(stored, **QUIET)
    assert added == [fw.key for fw in streaming.PEER_FRAMEWORKS]
    by = {(r["eta"], r["framework"]): r for r in stored["rows"]}
    assert all(by[(r["eta"], r["framework"])] == r for r in before)
    assert stored["rows"] == fresh["rows"] and stored["targets"] == fresh["targets"]
    assert streaming.add_frameworks(stored, **QUIET) == []


def test_add_refuses_what_it_cannot_add_to(tmp_path, capsys):
    args = ["--page", "", "--results-dir", str(tmp_path / "r"), "--img-dir", str(tmp_path / "i")]
    assert streaming.main(["--add"] + args) == 2
    assert "no stored results" in capsys.readouterr().err
    (tmp_path / "r").mkdir(exist_ok=True)
    (tmp_path / "r" / "streaming.json").write_text('{"setting": {}}')
    assert streaming.main(["--add"] + args) == 2
    assert "not a streaming study's results" in capsys.readouterr().err
    assert streaming.main(["--regimes", "--regime-peers", "RO full"] + args) == 2
    assert "not a peer of the map" in capsys.readouterr().err


def test_cells_run_in_worker_processes_give_the_same_map():
    peers = ("tinker", "window FIFO")
    assert streaming.run_regimes(sweep=SMALL, peers=peers, jobs=2, **QUIET) == \
        streaming.run_regimes(sweep=SMALL, peers=peers, **QUIET)
