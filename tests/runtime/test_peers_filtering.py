"""``make bench-peers-filtering`` (bench/peers_compare.py ``--workload filtering``): the
reward that makes a seeded share of the prompts carry no gradient is deterministic and its share
is what the reward does (counted by hand from its answers); the driver's prompt draws are what
the bench and the simulator's prediction assume; the workload's options; bad input refused in
one line with exit status 2; the table in docs/peers.md is what its results file says; and a
tiny grid on the real engine filters groups (Reserve-Occupy) or trains them (NeMo-RL as
shipped), the useful tokens counted by hand from the answers' length caps."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.tasks.base import Prompt

from .helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peers_compare.py"
CALIBRATE = ROOT / "bench" / "calibrate.py"


def _bench():
    return load_bench("peers_compare")


def _without_gradient(reward, prompt) -> bool:
    """By hand, from what the reward answers: a prompt's groups carry no gradient when answers
    that differ in their share of the digit 1 get the same reward."""
    return reward(prompt, "1111") == reward(prompt, "2222") == reward(prompt, "1212")


def test_the_reward_is_deterministic_and_its_share_is_counted_by_hand():
    bench = _bench()
    prompts = bench.train_prompts()
    assert len(prompts) == 84  # the 100 shipped prompts less the 16 held out
    shares = {}
    for seed in (0, 1, 7):
        reward = bench.NoGradientReward(seed, 0.4)
        hand = [_without_gradient(reward, p) for p in prompts]
        again = bench.NoGradientReward(seed, 0.4)  # a new object, asked in the reverse order
        assert [again.no_gradient(p) for p in reversed(prompts)] == hand[::-1]
        assert bench.no_gradient_share(seed, 0.4, prompts) == sum(hand) / len(prompts)
        for p, none in zip(prompts, hand):
            # every answer to a prompt without gradient scores 0.0; the others the ones-fraction
            assert reward(p, "1212") == (0.0 if none else 0.5)
        shares[seed] = hand
    assert shares[0] != shares[1] != shares[7]  # the seed draws them
    # over many prompts the share is the rate: 20,000 Bernoulli(0.4) draws have a standard
    # deviation of sqrt(0.4 * 0.6 / 20000) = 0.0035; 5 of them is 0.017
    many = [Prompt("7+1=", "8", index=i) for i in range(20_000)]
    assert abs(bench.no_gradient_share(3, 0.4, many) - 0.4) < 0.017
    assert bench.no_gradient_share(3, 0.0, many) == 0.0
    for bad in (1.0, -0.1, float("nan"), True):
        with pytest.raises(ValueError, match="no-gradient share"):
            bench.NoGradientReward(0, bad)


def test_draw_positions_are_a_shuffle_per_epoch():
    bench = _bench()
    positions = bench.draw_positions(5, 84, 84 * 3 + 10)
    for epoch in range(3):
        assert sorted(positions[84 * epoch: 84 * (epoch + 1)]) == list(range(84))
    assert positions[:84] != positions[84:168]
    assert bench.draw_positions(5, 84, 100) == positions[:100]  # a prefix does not change


def test_the_workload_s_options():
    bench = _bench()
    w = bench.WORKLOADS["filtering"]
    args = bench.parse(["--workload", "filtering", "--headline", "--seeds", "0,1,2,3,4"])
    assert args.comps == bench.filtering_headline()
    ro, ref, shipped = (bench.RESERVE_OCCUPY, True, "keep", 1), (*bench.REF, 1), (*bench.SHIPPED, 1)
    assert [(c["a"], c["b"], c["aa"]) for c in args.comps] == [
        (ref, ref, True), (ro, shipped, False), (ro, ref, False),
        (ro, ("verl_drop", False, "keep", 1), False)]
    assert args.grid == [ref, ro, shipped, ("verl_drop", False, "keep", 1)]
    assert args.no_gradient == w["no_gradient"] and args.steps == w["steps"]
    assert args.shape == (w["batch_size"], w["group_size"])
    assert (args.median, args.sigma) == (w["median"], w["sigma"])
    assert args.results == bench.FILTERING_RESULTS
    assert (args.begin, args.end) == (bench.FILTERING_BEGIN, bench.FILTERING_END)
    assert bench.parse(["--workload", "filtering", "--no-gradient", "0.25"]).no_gradient == 0.25
    # the other workloads: no reward filtering, their own results
    other = bench.parse(["--workload", "separating", "--headline"])
    assert other.no_gradient == 0.0 and other.results == bench.RESULTS
    # NeMo-RL as shipped trains the groups without gradient; every other rule filters them
    assert not bench.filters("nemo_in_order", 0.4) and not bench.filters("nemo_weight_fifo", 0.4)
    assert bench.filters("reserve_occupy", 0.4) and bench.filters("verl_drop", 0.4)
    assert bench.filters("nemo_in_order", 0.0)  # without the workload: the runtime's default
    from runtime.config import load_config

    cfg = load_config(None, bench.config_settings("nemo_in_order", True, "keep", 1, 0, 2, "out",
                                                  args.shape, bench.filters("nemo_in_order",
                                                                            0.4)))
    assert cfg.staleness.filter_zero_variance is False
    assert cfg.staleness.batch_size == w["batch_size"]


@pytest.mark.parametrize("script, args, says", [
    (SCRIPT, ["--workload", "filtering", "--ranking"], "--ranking runs on a workload without"),
    (SCRIPT, ["--workload", "separating", "--no-gradient", "0.3"],
     "--no-gradient is the filtering workload's"),
    (SCRIPT, ["--workload", "filtering", "--no-gradient", "0.9"], "(0, 0.8]"),
    (SCRIPT, ["--workload", "filtering", "--no-gradient", "nan"], "(0, 0.8]"),
    (SCRIPT, ["--workload", "filtering", "--no-gradient", "0"], "(0, 0.8]"),
    (SCRIPT, ["--workload", "filtering", "--headline", "--etas", "2"],
     "--headline runs its own comparisons: --etas"),
    (CALIBRATE, ["--workload", "filtering", "--headline"],
     "--workload filtering is peers_compare.py's"),
])
def test_bad_input_is_one_line_and_exit_2(script, args, says):
    p = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_seed_without_a_prompt_to_train_is_refused(monkeypatch, capsys):
    bench = _bench()
    monkeypatch.setattr(bench, "no_gradient_share", lambda seed, rate, prompts: float(seed == 4))
    with pytest.raises(SystemExit) as e:
        bench.parse(["--workload", "filtering", "--headline", "--seeds", "3,4"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "seed 4: every one of the 84 training prompts is without gradient" in err


def test_the_docs_table_is_rendered_from_its_results_file():
    bench = _bench()
    block = bench.doc_block(bench.DOC.read_text(), bench.FILTERING_BEGIN, bench.FILTERING_END)
    if not block.strip() and not bench.FILTERING_RESULTS.exists():
        pytest.skip("the filtering grid has not been run (make bench-peers-filtering writes "
                    "docs/results/peers_filtering.json and this table)")
    results = json.loads(bench.FILTERING_RESULTS.read_text())
    assert block == bench.render(results)
    results["comparisons"][1]["trained"]["median"] += 0.05  # a changed number is caught
    assert block != bench.render(results)


@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_a_tiny_filtering_grid_filters_and_its_table_agrees(engine, tmp_path):
    """Reserve-Occupy (streaming, the runtime's filter) against NeMo-RL as shipped (streaming,
    no filter), one pair of 2 steps, on the filtering workload's shape: Reserve-Occupy filtered
    groups and trained none without gradient; NeMo-RL trained them, and its useful tokens are
    its trained tokens less those groups' answers, each its length cap (``LongTail``); every
    unit's prompt is the one ``draw_positions`` says; the table of ``--write`` agrees with its
    json."""
    from runtime.accounting import LENGTHS_NAME, LengthLog

    bench = _bench()
    w = bench.WORKLOADS["filtering"]
    shape, rate, seed, steps = (w["batch_size"], w["group_size"]), w["no_gradient"], 0, 2
    prompts = bench.train_prompts()
    reward = bench.NoGradientReward(seed, rate)
    draws = bench.draw_positions(seed, len(prompts), 1000)

    def none(unit: str) -> bool:  # unit g{k}: the k-th draw's prompt without gradient
        return reward.no_gradient(prompts[draws[int(unit[1:])]])

    # the units every run admits (its steps' batches) hold some without gradient, so the
    # assertions below on what was filtered and trained can fail
    assert sum(none(f"g{k}") for k in range(shape[0] * steps)) > 0
    seen = []

    def on_row(row):
        out = row["_out"]
        events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
        reserved = [(r["unit"], r["meta"]["prompt"]) for r in events if r.get("op") == "reserve"]
        assert reserved and all(pos == draws[int(u[1:])] for u, pos in reserved)
        lengths = LengthLog.read(out / LENGTHS_NAME).records
        seen.append({"row": row, "lengths": {str(u): r["lengths"] for u, r in lengths.items()},
                     "filtered": {str(r["unit"]) for r in events if r.get("op") == "abort"
                                  and r["meta"].get("reason") == "no_gradient"}})

    ro, shipped = (bench.RESERVE_OCCUPY, True, "keep", 1), (*bench.SHIPPED, 1)
    comps = [{"a": ro, "b": shipped, "against": "shipped", "aa": False}]
    results = await bench.main([ro, shipped], [seed], steps, w["median"], w["sigma"],
                               engine=engine, warmup_steps=1, comps=comps, shape=shape,
                               no_gradient=rate, on_row=on_row)
    assert results["instrument"]["rate"] == "steady_useful_tok_s"
    by = {(x["row"]["policy"], x["row"]["streaming"]): x for x in seen}
    tail = bench.LongTail(None, bench.SETTINGS["rollout.max_tokens"], seed, w["median"],
                          w["sigma"])
    for (policy, _), x in by.items():
        r = x["row"]
        trained = set(r["placements"])
        assert r["steps"] == steps and len(trained) == shape[0] * steps
        assert r["filter_zero_variance"] is (policy != "nemo_in_order")
        lost = [u for u in trained if none(u)]
        assert r["no_gradient_trained"] == len(lost)
        # each answer runs to its cap (rollout.ignore_eos), so the tokens of the groups without
        # gradient it trained are their caps' sum
        caps = sum(tail.cap(f"{u}-c{j}") for u in lost for j in range(shape[1]))
        assert sum(sum(x["lengths"][u]) for u in lost) == caps
        assert r["tokens_trained"] - r["tokens_useful"] == caps
        assert r["steady_useful_tok_s"] <= r["steady_trained_tok_s"]
    ro_run, nemo = by[("reserve_occupy", True)], by[("nemo_in_order", True)]
    # Reserve-Occupy filtered groups without gradient (the run's summary counts them) and
    # trained none; NeMo-RL as shipped filtered none and trained some
    assert ro_run["row"]["filtered"] > 0 and ro_run["row"]["no_gradient_trained"] == 0
    assert {u for u in ro_run["filtered"] if none(u)} and ro_run["row"]["filtered_other"] == len(
        {u for u in ro_run["filtered"] if not none(u)})
    assert ro_run["row"]["tokens_useful"] == ro_run["row"]["tokens_trained"]
    assert nemo["row"]["filtered"] == 0 and nemo["row"]["no_gradient_trained"] > 0
    assert nemo["row"]["steady_useful_tok_s"] < nemo["row"]["steady_trained_tok_s"]
    pair = results["pairs"][0]
    assert pair["ratio"] == pair["a"]["steady_useful_tok_s"] / pair["b"]["steady_useful_tok_s"]
    results["workload"] = bench.workload_record("filtering", shape, w["median"], w["sigma"],
                                                steps, [seed], rate)
    assert results["workload"]["no_gradient_share"]["0"] == bench.no_gradient_share(
        seed, rate, prompts)
    table = bench.render(results)
    assert "useful trained tok/s ratio" in table
    assert "| reserve_occupy | on | keep | shipped | 1 |" in table
    doc, out = tmp_path / "peers.md", tmp_path / "peers_filtering.json"
    shutil.copy(bench.DOC, doc)
    bench.write(results, out, doc, bench.FILTERING_BEGIN, bench.FILTERING_END)
    written = json.loads(out.read_text())
    assert bench.doc_block(doc.read_text(), bench.FILTERING_BEGIN,
                           bench.FILTERING_END) == bench.render(written)
    written["comparisons"][0]["units_dropped"] = 99.0
    assert bench.doc_block(doc.read_text(), bench.FILTERING_BEGIN,
                           bench.FILTERING_END) != bench.render(written)
