"""The chunked (streaming) trainer: its cost, that it changes nothing when off, that streaming
policies never train above eta and conserve every trajectory, the restated bound, the
``_surplus`` fix, and the study's generated page."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from reserve_occupy_sim import cli
from reserve_occupy_sim.studies.bound import bound_terms, clairvoyant_bound, window_groups
from reserve_occupy_sim.model.checks import CheckFailed, check_conservation
from reserve_occupy_sim.model.core import PolicyError, Simulator
from reserve_occupy_sim.model.cost import CostError, TrainCost, cost_from_dict
from reserve_occupy_peers import make_policy
from reserve_occupy_peers.unbounded import Unbounded
from reserve_occupy_sim.model.runner import RunSpec, simulate

STREAMING = (("reserve_occupy", (("streaming", True),)), ("nemo_in_order", ()),
             ("nemo_weight_fifo", ()), ("psrl_fine_grain", ()), ("unbounded", ()))


def streamed(cost, chunk=1, **train):
    return dataclasses.replace(cost, train=dataclasses.replace(cost.train, chunk_groups=chunk,
                                                               **train))


# --------------------------------------------------------------------------- the cost --------

def test_chunk_cost_is_tokens_times_its_own_bubble_plus_overhead():
    t = TrainCost(fixed_s=2.0, per_token_s=1e-3, per_token_sq_s=1e-6, pipeline_stages=3,
                  microbatch_size=1, chunk_groups=1, chunk_overhead_s=0.5)
    work = 1e-3 * 300 + 1e-6 * (100 ** 2 + 200 ** 2)
    assert t.chunk_time([100, 200]) == pytest.approx(work * (1 + 2 / 2) + 0.5)
    assert t.chunk_time([100]) == pytest.approx((1e-3 * 100 + 1e-2) * (1 + 2 / 1) + 0.5)
    assert t.finish_time([100, 200]) == pytest.approx(2.0)  # everything ran per chunk


def test_chunk_share_leaves_the_rest_of_the_work_to_the_end_of_the_step():
    t = TrainCost(fixed_s=2.0, per_token_s=1e-3, pipeline_stages=1, chunk_groups=1,
                  chunk_overhead_s=0.0, chunk_share=0.2)
    assert t.chunk_time([1000]) == pytest.approx(0.2)
    assert t.finish_time([1000, 1000]) == pytest.approx(2.0 + 0.8 * 2.0)


def test_a_streaming_step_costs_its_chunks_then_the_finish(workload, cost):
    c = streamed(cost, chunk=1)
    _, sim = simulate(RunSpec("nemo_in_order", 1, 4, batch_size=4), workload, c)
    by_tid = {r.tid: r for r in sim.ledger.requests}
    for b in sim.ledger.batches:
        assert len(b.chunks) >= 1 and sum(n for _, n in b.chunks) == len(b.tids)
        last_n = b.chunks[-1][1]
        last = [by_tid[t].prompt + by_tid[t].length for t in b.tids[-last_n:]]
        whole = [by_tid[t].prompt + by_tid[t].length for t in b.tids]
        assert b.t_trained == pytest.approx(b.t_consume + c.train.chunk_time(last)
                                            + c.train.finish_time(whole))
    assert any(len(b.chunks) > 1 for b in sim.ledger.batches)


@pytest.mark.parametrize("field,value", [("chunk_groups", -1), ("chunk_groups", 1.5),
                                         ("chunk_share", 1.5), ("chunk_overhead_s", -1)])
def test_cost_file_refuses_bad_chunk_fields(field, value):
    with pytest.raises(CostError) as err:
        cost_from_dict({"preset": "toy", "train": {field: value}})
    assert err.value.field == f"train.{field}"


@pytest.mark.parametrize("argv", [["--chunk-groups", "-1"], ["--chunk-share", "1.5"],
                                  ["--chunk-overhead", "-2", "--chunk-groups", "1"],
                                  ["--streaming"]])
def test_cli_refuses_bad_chunk_options(argv, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args(["run", "--batches", "2", "--no-progress"] + argv)) == 2
    assert "error" in capsys.readouterr().err


# --------------------------------------------------------------------------- off = unchanged -

@pytest.mark.parametrize("name", ["reserve_occupy", "nemo_in_order", "nemo_weight_fifo",
                                  "unbounded", "areal", "psrl_fine_grain"])
def test_full_batch_trainer_is_unchanged_by_the_chunk_fields(name, workload, cost):
    """chunk_groups = 0: the other chunk fields and the streaming option change nothing."""
    spec = RunSpec(name, 1, 6, batch_size=4)
    base, _ = simulate(spec, workload, cost)
    other = dataclasses.replace(cost, train=dataclasses.replace(
        cost.train, chunk_overhead_s=7.0, chunk_share=0.3))
    opts = (("streaming", True),) if name == "reserve_occupy" else ()
    again, _ = simulate(dataclasses.replace(spec, options=opts), workload, other)
    a, b = base.to_json(), again.to_json()
    for r in (a, b):
        r.pop("settings")
    assert a == b


# --------------------------------------------------------------------------- bound and checks

@pytest.mark.parametrize("name,opts", STREAMING)
@pytest.mark.parametrize("eta", [0, 1, 2])
def test_streaming_never_trains_above_eta_and_conserves(name, opts, eta, workload, cost):
    r, sim = simulate(RunSpec(name, eta, 6, batch_size=4, options=opts), workload,
                      streamed(cost, chunk=1))  # simulate runs check_run
    counts = check_conservation(sim)
    assert counts["trained"] == 6 * 4 * workload.group_size
    if sim.policy.bounded:
        assert r.max_staleness <= eta
    assert sum(len(b.chunks) for b in sim.ledger.batches) >= 6


def test_reserve_occupy_streams_before_the_head_is_ready(workload, cost):
    _, sim = simulate(RunSpec("reserve_occupy", 1, 6, batch_size=4,
                              options=(("streaming", True),)), workload, streamed(cost))
    assert any(len(b.chunks) > 1 for b in sim.ledger.batches)


def test_conservation_catches_a_chunk_handed_before_its_trajectory_finished(workload, cost):
    _, sim = simulate(RunSpec("nemo_in_order", 1, 4, batch_size=4), workload, streamed(cost))
    b = sim.ledger.batches[1]
    b.chunks[0] = (b.chunks[0][0] - 1e4, b.chunks[0][1])
    with pytest.raises(CheckFailed, match="before it finished"):
        check_conservation(sim)


class _Greedy(Unbounded):
    """A broken streaming policy: hands one group more than the step lacks."""

    def take_chunk(self, least, most):
        if len(self._finished) <= most:
            return None
        return [r for g in [self._finished.popleft() for _ in range(most + 1)]
                for r in g.requests]


def test_a_chunk_larger_than_the_step_lacks_is_a_policy_error(workload, cost):
    sim = Simulator(_Greedy(1), workload, streamed(cost, chunk=1), batches=3, batch_size=2)
    with pytest.raises(PolicyError, match="lacks"):
        sim.run()


def test_streaming_bound_holds_and_restates_the_window(workload, cost):
    c = streamed(cost, chunk=1)
    groups = window_groups(workload, 4, 10, 2)
    full = bound_terms(groups, cost, eta=1, batch_size=4, group_size=workload.group_size)
    stream = bound_terms(groups, c, eta=1, batch_size=4, group_size=workload.group_size)
    assert stream["window"] > full["window"]  # the straggler no longer waits for the training
    b = clairvoyant_bound(workload, c, eta=1, batch_size=4, batches=10)
    assert b.schedule_tok_s <= b.upper_tok_s
    for name, opts in STREAMING[:3]:
        r, _ = simulate(RunSpec(name, 1, 10, batch_size=4, options=opts), workload, c)
        assert r.steady_throughput <= b.upper_tok_s


# --------------------------------------------------------------------------- the _surplus fix -

def test_surplus_counts_only_non_empty_slots(workload, cost):
    """A fresh buffer holds no unit, so it is not over the batch size; the old comparison
    (``SlotState.value != "EMPTY"``, while EMPTY's value is "E") counted all 20 slots."""
    policy = make_policy("reserve_occupy", 1, capacity=20, idle_surplus=True)
    policy.attach(Simulator(policy, workload, cost, batches=1, batch_size=16))
    assert policy._surplus(0) is False and policy._surplus(1) is False
    buffers = set()
    for unit in range(16):
        buffers.add(policy.controller.reserve(unit).slot.buffer)
    (full,) = buffers  # reserve fills the newest legal buffer first
    assert policy._surplus(full) is False  # 16 units: exactly the batch size
    policy.controller.reserve(16)
    assert policy._surplus(full) is True  # 17 of 20 slots hold a unit


# --------------------------------------------------------------------------- the study --------

def test_study_tiny_writes_its_tables(tmp_path):
    from reserve_occupy_sim.studies import streaming

    payload = streaming.run(seeds=(0,), etas=(1,), batches=6, batch_size=4, groups=64,
                            chunk_sweep=(1,), say=lambda _m: None)
    keys = {r["framework"] for r in payload["rows"]}
    assert keys == {fw.key for fw in streaming.FRAMEWORKS}
    ref = [r for r in payload["rows"] if r["framework"] == streaming.IN_ORDER_AS_SHIPPED][0]
    assert ref["vs_reference"] == pytest.approx(1.0)
    page = tmp_path / "page.md"
    page.write_text("a\n<!-- BEGIN generated:streaming-table -->\nold\n"
                    "<!-- END generated:streaming-table -->\nb\n")
    streaming.write_page(page, {"streaming-table": streaming.table(payload)})
    text = page.read_text()
    assert "old" not in text and streaming.IN_ORDER_AS_SHIPPED in text and text.endswith("b\n")


def test_the_page_shows_the_results_file():
    """docs/sim/streaming.md's generated blocks are what docs/results/streaming.json gives."""
    from reserve_occupy_sim.studies import streaming

    root = Path(__file__).resolve().parents[2]
    results = root / "docs/results/streaming.json"
    if not results.exists():
        pytest.skip("make sim-streaming has not been run")
    payload = json.loads(results.read_text())
    page = (root / streaming.PAGE).read_text()
    for name, make in (("streaming-table", streaming.table),
                       ("streaming-bound", streaming.bound_table),
                       ("streaming-sweep", streaming.sweep_table),
                       ("streaming-targets", streaming.targets_table)):
        block = page.split(f"<!-- BEGIN generated:{name} -->\n")[1].split(
            f"\n<!-- END generated:{name} -->")[0]
        assert block == make(payload), name
    if "regimes" in payload:
        block = page.split("<!-- BEGIN generated:streaming-regimes -->\n")[1].split(
            "\n<!-- END generated:streaming-regimes -->")[0]
        assert block == streaming.regimes_table(payload["regimes"])


def test_regime_map_comparison_runs_every_unique_cell():
    from reserve_occupy_sim.studies import streaming
    from reserve_occupy_sim.studies.regimes import Sweep

    sweep = Sweep(etas=(1,), train_mults=(1.0,), concurrencies=(8,), truncations=(0.03,),
                  filter_rates=(0.0,), seeds=1, batches=6, groups=64, batch_size=4)
    reg = streaming.run_regimes(sweep=sweep, say=lambda _m: None)
    assert len(reg["cells"]) == len({c.key() for c in sweep.cells()}) == 2
    for cell in reg["cells"]:
        assert set(cell["ratios"]) == {"RO stream", "RO stream in-flight"}
        assert all(v["min"] > 0 for v in cell["ratios"].values())
    assert "η = 1: 2" in streaming.regimes_table(reg)


@pytest.mark.parametrize("argv", [["--eta", "2000"], ["--batches", "1"], ["--seeds", "x"]])
def test_study_refuses_bad_options_before_running(argv, capsys):
    from reserve_occupy_sim.studies import streaming

    assert streaming.main(argv + ["--page", ""]) == 2
    assert "error" in capsys.readouterr().err


def test_study_refuses_a_page_without_its_blocks_before_running(tmp_path, capsys):
    from reserve_occupy_sim.studies import streaming

    page = tmp_path / "page.md"
    page.write_text("no markers\n")
    assert streaming.main(["--page", str(page), "--results-dir", str(tmp_path / "r"),
                           "--img-dir", str(tmp_path / "i")]) == 2
    assert "streaming-table" in capsys.readouterr().err
