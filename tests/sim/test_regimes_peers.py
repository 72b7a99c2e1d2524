"""Issue 38's peers in the regime map (experiment 6): added to a stored map without moving it
(each cell's Reserve–Occupy runs are made again and must equal the stored ones), equal to a map
run with them, and drawn in a block of their own (the earlier blocks do not change)."""

from __future__ import annotations

import copy
import json

import pytest
from sim_helpers import sim_cli

from reserve_occupy_peers import PEERS_2026
from reserve_occupy_sim.model.cost import preset
from reserve_occupy_sim.studies import regimes

SMALL = regimes.Sweep(etas=(1,), train_mults=(0.5,), concurrencies=(8,), truncations=(0.03,),
                      filter_rates=(0.0, 0.3), seeds=2, batches=8, groups=64, batch_size=4)


@pytest.fixture(scope="module")
def full():
    cost = preset("qwen3-8b-h20")
    return {"cost": cost.to_json(),
            **regimes.compact(regimes.run_sweep(cost, SMALL, progress=False))}


def _without_peers(result: dict) -> dict:
    old = copy.deepcopy(result)
    for c in old["cells"]:
        for p in regimes.PEERS:
            c["ratios"].pop(p)
            c["runs"].pop(p)
    return old


def test_every_new_peer_is_a_column_of_the_map(full):
    assert set(regimes.PEERS) == {cls.name for cls in PEERS_2026}
    for c in full["cells"]:
        assert set(regimes.PEERS) <= set(c["ratios"]) and set(regimes.PEERS) <= set(c["runs"])


def test_peers_added_to_a_stored_map_equal_a_map_run_with_them(full):
    stored = json.loads(json.dumps(_without_peers(full)))
    before = {name: f(stored) for name, f in (("summary", regimes.summary_table),
                                              ("cells", regimes.cell_table),
                                              ("targets", regimes.targets_table))}
    first = regimes.add_peers(stored, preset("qwen3-8b-h20"), peers=regimes.PEERS[:2])
    assert len(first) == len({c.key() for c in SMALL.cells()})
    regimes.add_peers(stored, preset("qwen3-8b-h20"))
    assert stored == json.loads(json.dumps(full))
    # the earlier tables read only the earlier columns: they did not move
    assert before == {name: f(stored) for name, f in (("summary", regimes.summary_table),
                                                      ("cells", regimes.cell_table),
                                                      ("targets", regimes.targets_table))}
    assert regimes.add_peers(stored, preset("qwen3-8b-h20")) == []  # nothing left to run


def test_a_stored_run_this_simulator_does_not_make_is_refused(full):
    stored = _without_peers(full)
    cell = stored["cells"][0]
    cell["runs"]["reserve_occupy"][1]["steady"] *= 1.001
    with pytest.raises(regimes.StoredFigureMoved, match="seed 1"):
        regimes.add_peers(stored, preset("qwen3-8b-h20"), select=lambda c: c.key() == (
            cell["eta"], cell["train_mult"], cell["concurrency"], cell["truncated"],
            cell["filter_rate"]))
    assert "nemo_windowed" not in cell["ratios"]  # nothing was written into the refused cell


def test_the_peers_block_counts_cells_below_each_peer(full):
    text = regimes.peers_table(full)
    for p in regimes.PEERS:
        assert f"RO ÷ {p}" in text
        assert f"| {p} " in text
    assert "has run" in regimes.peers_table(_without_peers(full))


def test_add_peers_command(tmp_path, full, capsys):
    results = tmp_path / "results"
    results.mkdir()
    path = results / "regimes.json"
    argv = ["regimes", "--add-peers", "--results-dir", str(results), "--img-dir",
            str(tmp_path / "img"), "--no-progress"]
    assert sim_cli(argv) == 2  # nothing stored
    assert "--add-peers" in capsys.readouterr().err
    assert sim_cli(argv + ["--seeds", "2"]) == 2
    assert "--seeds" in capsys.readouterr().err
    path.write_text(json.dumps(_without_peers(full)))
    assert sim_cli(argv) == 0
    assert json.loads(path.read_text()) == json.loads(json.dumps(full))
    bad = _without_peers(full)
    bad["cells"][0]["runs"]["reserve_occupy"][0]["steady"] += 1
    path.write_text(json.dumps(bad))
    assert sim_cli(argv) == 1
    assert "not what this simulator makes" in capsys.readouterr().err
    assert json.loads(path.read_text()) == json.loads(json.dumps(bad))  # left as it was
