"""bench/workload_predict.py's simulated workload gives each unit the prompt tokens the real run's
engine and trainer get (issue 37 item 5: the simulator held to the filtering grid).

The prediction gave every simulated request a 20-token prompt (``PROMPT_TOKENS``, "about");
the bench's prompts are the shipped arithmetic task's "a+b=" on the tiny model's one-token-per-
character tokenizer: 4 tokens. The trainer's cost is fitted on answer + prompt tokens
(``calibrate.measure``), so each simulated step trained 16 tokens a trajectory too many (a
filtering step of 64 answers of about 18 tokens: about 2,450 tokens instead of 1,420, 1.7
times the training) and each request prefilled 16 too many: the simulated filtering run took
7.9 s where the grid's took 5.3 (Reserve-Occupy, 16 steps, medians over 16 seeds; 5.4 with 4
tokens), and verl, whose refills wait for its trainer's next sample, lost its engine for that
longer training span (predicted 1.265 against the measured 1.087; 1.109 with 4 tokens).
No engine, no model: the tokenizer alone (``runtime.models.tiny.build_tokenizer``)."""

from __future__ import annotations

import pytest

from .helpers import load_bench


@pytest.fixture(scope="module")
def predict():
    return load_bench("workload_predict")


def test_a_unit_s_prompt_has_the_tokens_the_engine_encodes(predict):
    from runtime.models.tiny import build_tokenizer

    tok = build_tokenizer()
    # by hand: "7+1=" is four characters, one token each, nothing added
    assert tok.convert_ids_to_tokens(tok.encode("7+1=")) == ["7", "+", "1", "="]
    peers = predict.peers
    prompts = peers.train_prompts()
    w = predict.FILTER_CANDIDATES["16 x 4, median 8, share 0.2"]
    for seed in (0, 5):
        wl = predict.sim_workload(seed, w)
        drawn = peers.draw_positions(seed, len(prompts), len(wl))
        want = [len(tok.encode(prompts[pos].text)) for pos in drawn]
        assert [g.prompt_len for g in wl.groups] == want
        assert set(want) == {4}  # every training prompt is "d+d=" (84 of them)
        # the answers are the run's own caps, unchanged
        tail = peers.LongTail(None, w["max_tokens"], seed, w["median"], w["sigma"])
        assert wl.groups[7].response_lens == tuple(tail.cap(f"g7-c{j}") for j in range(4))


def test_a_simulated_step_trains_answers_and_4_token_prompts(predict):
    """What the simulated trainer is charged for (``BatchRecord.tokens``, the input of
    ``TrainCost``) is what the runtime's trainer trains: each trajectory's answer and its
    4-token prompt (20 on the old code)."""
    import json

    w = {**predict.FILTER_CANDIDATES["16 x 4, median 8, share 0.2"], "steps": 2}
    fit = json.loads((predict.ROOT / "docs/results/calibration.json").read_text())["fit"]
    wl = predict.sim_workload(0, w)
    from reserve_occupy_sim.model.runner import RunSpec, simulate

    cost = predict.calibrate.cost_model(fit, 1, False, "keep", revised=True)
    _, sim = simulate(RunSpec("nemo_in_order", 1, batches=2, batch_size=16), wl, cost)
    by_tid = {r.tid: r for r in sim.ledger.requests}
    for b in sim.ledger.batches:
        answers = sum(by_tid[t].length for t in b.tids)
        assert len(b.tids) == 64
        assert b.tokens == answers + 4 * 64
