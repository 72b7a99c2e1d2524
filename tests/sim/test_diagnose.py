"""reserve_occupy_sim/studies/diagnose.py: the engine-time split adds up and tells policies apart,
the critical path finds each batch's last request and shows the staleness window (a bounded policy's
stragglers start after their window opens; the unbounded one's need not), the perturbation spread,
the CLI."""

from __future__ import annotations

import math

import pytest
from sim_helpers import BATCH, run_policy

from reserve_occupy_sim.studies import diagnose
from reserve_occupy_sim.studies.diagnose import critical_path, engine_time, perturbation_spread
from reserve_occupy_sim.model.runner import RunSpec, simulate

BATCHES = 12


@pytest.fixture(scope="module")
def runs(workload, cost):
    return {name: run_policy((name, 1), workload, cost, batches=BATCHES)
            for name in ("reserve_occupy", "synchronous", "unbounded")}


@pytest.mark.parametrize("name", ["reserve_occupy", "synchronous", "unbounded"])
def test_engine_time_adds_up(runs, name):
    e = engine_time(runs[name])
    parts = (e.idle, e.prefill, e.paused, e.decode)
    assert all(0.0 <= p <= 1.0 for p in parts)
    assert math.isclose(sum(parts), 1.0, abs_tol=1e-9)
    assert 0.0 < e.mean_running <= runs[name].cost.concurrency
    assert e.decode_tok_per_s > 0


def test_engine_time_tells_a_synchronous_loop_from_an_overlapped_one(runs):
    """The synchronous loop leaves the engines idle while it trains; overlap does not."""
    assert engine_time(runs["synchronous"]).idle > engine_time(runs["unbounded"]).idle + 0.2


def test_critical_path_is_each_batchs_last_request(runs):
    sim = runs["reserve_occupy"]
    path = critical_path(sim, warmup=2)
    batches = sim.ledger.batches
    assert [s.index for s in path] == list(range(2, BATCHES))
    by_tid = {r.tid: r for r in sim.ledger.requests}
    for s in path:
        b = batches[s.index]
        last = max(by_tid[t].t_end for t in b.tids)
        assert math.isclose(s.period_s, b.t_published - batches[s.index - 1].t_published)
        assert 0.0 <= s.trainer_wait_s <= s.period_s
        assert s.queue_s >= 0.0 and s.run_s > 0.0
        assert math.isclose(s.step_ms, 1000.0 * s.run_s / s.length)
        assert s.length == max((by_tid[t] for t in b.tids), key=lambda r: r.t_end).length
        assert by_tid[b.tids[0]].t_end <= last


def test_bounded_stragglers_start_inside_their_window_and_unbounded_ones_need_not(runs):
    """``start_after_open_s`` is measured from the publish of version v - eta: a strictly bounded
    policy never starts a trained request before it, the unbounded one does (so the check can
    fail)."""
    assert all(s.start_after_open_s >= 0.0 for s in critical_path(runs["reserve_occupy"]))
    assert any(s.start_after_open_s < 0.0 for s in critical_path(runs["unbounded"]))


def test_perturbation_spread(workload, cost):
    out = perturbation_spread(["reserve_occupy"], workload, cost, eta=1, batches=BATCHES,
                              batch_size=BATCH, factors=(1.0, 1 + 1e-4))
    plain, _ = simulate(RunSpec("reserve_occupy", 1, BATCHES, BATCH), workload, cost)
    assert len(out["reserve_occupy"]) == 2
    assert out["reserve_occupy"][0] == plain.steady_throughput
    with pytest.raises(ValueError, match="factors"):
        perturbation_spread(["reserve_occupy"], workload, cost, eta=1, batches=2,
                            factors=(0.0,))


def test_cli_prints_the_tables_and_rejects_bad_input(capsys):
    assert diagnose.main(["--seeds", "0", "--batches", "4", "--perturb",
                          "--policies", "reserve_occupy,nemo_in_order"]) == 0
    out = capsys.readouterr().out
    assert "| 0 | reserve_occupy |" in out and "| nemo_in_order |" in out
    assert "1 − 1e-4" in out
    for bad in (["--policies", "nope"], ["--policies", ""], ["--eta", "one"],
                ["--eta", "1,2"], ["--eta", "5000"], ["--train-mult", "0"],
                ["--train-mult", "x"], ["--concurrency", "40,80"], ["--truncated", "2"],
                ["--preset", "nope"]):
        assert diagnose.main(bad) == 2
        assert "error:" in capsys.readouterr().err
