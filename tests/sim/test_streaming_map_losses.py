"""The streaming regime map's losses by cause (docs/sim/streaming.md, block
``streaming-regimes-losses``): computed from the stored cells by ``loss_cause``, never typed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from reserve_occupy_sim.studies.streaming_render import (
    LOSS_CAUSES, loss_cause, regimes_losses, regimes_losses_block, regimes_losses_table,
    strictly_bounded)
from reserve_occupy_sim.studies.streaming_compute import IN_ORDER_AS_SHIPPED, MAP_RO

ROOT = Path(__file__).resolve().parents[2]


def _peer(ratio_min, ratio_mean=None, staleness=1, waste=0.0, length=1.0):
    return {"min": ratio_min, "mean": ratio_min if ratio_mean is None else ratio_mean,
            "stalled": 0, "max_staleness": staleness, "waste": waste, "length_ratio": length,
            "dropped": 0.0}


def _cell(eta=1, filter_rate=0.0, ro=(1.0, 1.0), ro_length=1.0, **peers):
    return {"slice": "hardware", "eta": eta, "train_mult": 1.0, "concurrency": 40,
            "truncated": 0.03, "filter_rate": filter_rate,
            "ratios": {MAP_RO: {"min": ro[0], "mean": ro[1]}},
            "ro_in_flight": [{"length_ratio": ro_length, "max_staleness": eta, "dropped": 0,
                              "waste": 0.0, "steady": 1.0}] * 3,
            "peers": dict(peers)}


def test_each_cause_by_hand():
    # ready_first trains staleness 3 at eta 1: past eta, whatever else it does
    c = _cell(**{"NeMo ready_first stream": _peer(0.8, staleness=3, waste=0.5, length=0.5)})
    assert loss_cause(c, "NeMo ready_first stream") == "past η"
    # prime-rl throws away half its tokens and trains answers 0.6 / 0.9 = 0.67 of RO's length
    c = _cell(ro_length=0.9, **{"prime-rl": _peer(0.9, waste=0.5, length=0.6)})
    assert loss_cause(c, "prime-rl") == "drops, shorter"
    # the same at 0.88 / 0.9 = 0.978 of RO's length: drops, not shorter
    c = _cell(ro_length=0.9, **{"prime-rl": _peer(0.9, waste=0.5, length=0.88)})
    assert loss_cause(c, "prime-rl") == "drops"
    # weight_fifo (does not filter) with 40 % no-gradient groups: the map measures it over the
    # same prompts as Reserve–Occupy (FILTERED_MEASURE), so training them explains nothing
    c = _cell(filter_rate=0.4, **{"NeMo weight_fifo stream": _peer(0.97)})
    assert loss_cause(c, "NeMo weight_fifo stream") == "unexplained"
    c = _cell(filter_rate=0.4, **{"NeMo weight_fifo stream": _peer(0.97, 0.995)})
    assert loss_cause(c, "NeMo weight_fifo stream") == "seed spread"
    # window FIFO filters: with filtering and no drop it is the seeds, or unexplained
    c = _cell(filter_rate=0.4, **{"window FIFO": _peer(0.98, 0.995)})
    assert loss_cause(c, "window FIFO") == "seed spread"
    c = _cell(filter_rate=0.4, **{"window FIFO": _peer(0.98, 0.985)})
    assert loss_cause(c, "window FIFO") == "unexplained"
    # not below: no cause; the in_order row is read from the cell's ratios
    c = _cell(ro=(0.98, 0.992), **{"window FIFO": _peer(0.99)})
    assert loss_cause(c, "window FIFO") is None
    assert loss_cause(c, IN_ORDER_AS_SHIPPED) == "seed spread"


def test_strictly_bounded_is_measured_and_counts_follow():
    ok = {"tinker": _peer(1.2), "window FIFO": _peer(1.0)}
    reg = {"cells": [
        _cell(**ok),
        _cell(eta=2, **{"tinker": _peer(0.9, staleness=2, waste=0.3, length=0.5),
                        "window FIFO": _peer(1.0)}),
    ]}
    got = regimes_losses(reg)
    assert got["strict"] == [IN_ORDER_AS_SHIPPED, "tinker", "window FIFO"]
    assert got["rows"]["tinker"]["causes"]["drops, shorter"] == 1
    assert (got["strict_met"], got["strict_free_met"]) == (1, 2)  # tinker drops
    # a bounded rule that trains past its eta in one cell is not strictly bounded there
    reg["cells"][0]["peers"]["tinker"]["max_staleness"] = 2
    got = regimes_losses(reg)
    assert "tinker" not in strictly_bounded(reg) and got["rows"]["tinker"]["past_eta_cells"] == 1
    assert got["strict_met"] == 2
    table = regimes_losses_table(reg)
    assert "**2 of 2**" in table
    assert "| tinker |" in table and "| prime-rl |" not in table  # rows that ran in no cell


def test_the_page_shows_the_stored_map_computed():
    payload = json.loads((ROOT / "docs/results/streaming.json").read_text())
    page = (ROOT / "docs/sim/streaming.md").read_text()
    block = re.search(r"<!-- BEGIN generated:streaming-regimes-losses -->\n(.*?)\n"
                      r"<!-- END generated:streaming-regimes-losses -->", page, re.DOTALL)
    assert block is not None and block.group(1) == regimes_losses_block(payload)
    got = regimes_losses(payload["regimes"])
    # every cell below a row has exactly one cause, and the row's count is their sum
    for key, row in got["rows"].items():
        assert sum(row["causes"].values()) == row["below"]
    assert [name for name, _ in LOSS_CAUSES][-1] == "unexplained"
