"""A peer's rule with a streaming trainer (``trainer.streaming``; ``PeerController.stream``):
NeMo-RL's ``in_order`` as shipped trains each step in chunks as its groups finish, every chunk
chosen by the simulator's own policy (``take_chunk``), on the scripted engine and the virtual
clock. The event log's ``stream`` lines are checked by ``check-trace --peer``; a log or a rule
that breaks streaming's terms is caught (the broken variants below)."""

from __future__ import annotations

import json
from statistics import fmean

import pytest

from reserve_occupy import Config, IllegalOperation, InvariantViolation, UnitState
from runtime.peers import PEER_POLICIES, PeerController, UnsupportedByRuntime, peer_streams
from reserve_occupy_porting.checker import check
from runtime.records import DriverSettings
from runtime.rollout.fake import FakeTrainer, random_script

from .helpers import make, run, token_lag_violations
from .test_peers import _events, _log, index_reward

STEPS, B = 8, 4


def _nemo(streaming: bool, chunk_groups: int = 1, policy: str = "nemo_in_order", eta: int = 1):
    settings = DriverSettings(max_staleness=eta, batch_size=B, group_size=4, steps=STEPS,
                              max_tokens=6,
                              check_invariants=True, policy=policy, streaming=streaming,
                              chunk_groups=chunk_groups, filter_zero_variance=False)
    driver, _, _, clock = make(settings, script=random_script(7, long_tail=0.3),
                               reward=index_reward)
    # train_s shared per group (FakeTrainer's streaming cost), as test_driver_streaming does
    driver.trainer = trainer = FakeTrainer(clock, train_s=1.0, step_s=0.02, batch_size=B)
    return driver, trainer, run(driver, clock)


def test_the_rules_that_stream_are_the_simulators():
    assert [p for p in PEER_POLICIES if peer_streams(p)] == [
        "nemo_in_order", "nemo_weight_fifo", "unbounded", "nemo_windowed", "nemo_ready_first"]
    with pytest.raises(UnsupportedByRuntime, match="verl_drop does not stream"):
        PeerController("verl_drop", Config(max_staleness=1, batch_size=2, streaming=True), 4)


def test_nemo_in_order_streams_chunks_before_the_step_fills():
    driver, trainer, records = _nemo(True)
    ctl = driver.controller
    assert len(records) == len(trainer.batches) == STEPS
    # chunks trained before their step was whole: a unit of the step finished after a chunk
    # of it was streamed (and trained: the trainer's chunks are the streams' units)
    early = 0
    for consume in _events(driver, "consume"):
        ids = set(consume.batch.unit_ids)
        streams = [e for e in ctl.events[:consume.seq]
                   if e.op == "stream" and set(e.batch.unit_ids) <= ids]
        last_occupy = max(e.seq for e in ctl.events[:consume.seq]
                          if e.op == "occupy" and e.unit_id in ids)
        early += streams[0].seq < last_occupy
        assert set(consume.batch.streamed) == ids  # every unit of the step came by stream
    assert early >= STEPS // 2
    assert [u for c in trainer.chunks for u in c] == [
        u.unit_id for e in _events(driver, "stream") for u in e.batch.units]
    # each unit trained once, in the rule's terms: step k trains dataloader batch k (the
    # k-th run of B admissions), within eta by the tokens' own versions
    order = [e.unit_id for e in _events(driver, "reserve")]
    assert [set(e.batch.unit_ids) for e in _events(driver, "consume")] == [
        set(order[k * B:(k + 1) * B]) for k in range(STEPS)]
    assert token_lag_violations(trainer, 1) == []
    report = check(_log(driver), peer="nemo_in_order")
    assert report.ok, report.problem
    assert report.batches == STEPS and sum(report.staleness.values()) == STEPS * B
    # streaming shortens the trainer's wait after the step's last group (what it is for)
    _, _, whole = _nemo(False)
    assert fmean(r.tail_s for r in records[2:]) < fmean(r.tail_s for r in whole[2:])
    assert all(r.streamed_units == 0 for r in whole)


@pytest.mark.parametrize("policy", ["nemo_weight_fifo", "unbounded"])
def test_the_other_streaming_rules_stream_and_check(policy):
    driver, trainer, records = _nemo(True, chunk_groups=2, policy=policy)
    assert len(records) == STEPS and trainer.chunks
    assert all(len(c) >= 2 for c in trainer.chunks)  # chunk_groups: the rule's least
    report = check(_log(driver), peer=policy)
    assert report.ok, report.problem
    assert sum(report.staleness.values()) == STEPS * B


# ------------------------------------------------------------------ broken variants -----------

def _lines(**kw):
    driver, _, _ = _nemo(True, **kw)
    return driver, [json.loads(x) for x in _log(driver)]


def _verdict(records, peer="nemo_in_order"):
    """The first violation the peer checker finds: (invariant, its message), or None."""
    report = check([json.dumps(r) for r in records], peer=peer)
    v = report.problem.violation if report.problem else None
    return v and (v.invariant, v.detail)


def test_a_stream_of_a_unit_the_rule_did_not_release_is_caught():
    _, records = _lines()
    assert _verdict(records) is None
    # hand a unit still in flight (not finished: the rule cannot have released it)
    i = next(k for k, r in enumerate(records) if r.get("op") == "stream")
    done = {r["unit"] for r in records[:i] if r.get("op") == "occupy"}
    flying = next(r["unit"] for r in records[:i] if r.get("op") == "reserve"
                  and r["unit"] not in done)
    bad = json.loads(json.dumps(records))
    unit = dict(bad[i]["batch"]["units"][0], unit=flying)
    bad[i]["batch"]["units"] = [unit]
    assert _verdict(bad) == ("lifecycle", f"stream of unit {flying!r}, which is in flight, "
                                          f"not finished")


def test_a_unit_streamed_twice_or_left_out_of_its_step_is_caught():
    _, records = _lines()
    streams = [k for k, r in enumerate(records) if r.get("op") == "stream"]
    twice = json.loads(json.dumps(records))  # the second stream repeats the first's unit
    first = twice[streams[0]]["batch"]["units"][0]
    twice[streams[1]]["batch"]["units"] = [first]
    assert _verdict(twice) == ("lifecycle", f"stream of unit {first['unit']!r}, which is "
                                            f"streamed, not finished")
    # the consume leaves a streamed unit untrained (another finished unit in its place)
    c = next(k for k, r in enumerate(records) if r.get("op") == "consume")
    left = json.loads(json.dumps(records))
    dropped = left[c]["batch"]["units"][0]["unit"]
    left[c]["batch"]["units"][0]["unit"] = "not-streamed"
    assert _verdict(left) == ("lifecycle", f"unit {dropped!r} was streamed but the batch does "
                                           f"not train it")


def test_a_stream_by_a_rule_that_does_not_stream_is_caught():
    _, records = _lines()
    unflagged = json.loads(json.dumps(records))  # a log that says it does not stream
    del unflagged[0]["config"]["streaming"]
    assert _verdict(unflagged) == ("operation", "stream: the log's header has no streaming")
    records[0]["x_policy"] = "verl_drop"  # its own terms: bound and eta from the rule
    for key in ("x_bounded", "x_eta"):
        records[0].pop(key)
    assert _verdict(records, peer="verl_drop") == ("operation",
                                                   "stream: verl_drop does not stream")


def test_a_rule_handing_an_unfinished_group_is_refused_and_changes_nothing():
    ctl = PeerController("nemo_in_order", Config(max_staleness=1, batch_size=2, streaming=True),
                         group_size=4)
    for u in ("a", "b"):
        ctl.reserve(u)
    ctl.occupy("a")
    assert [u.unit_id for u in ctl.stream()] == ["a"] and ctl.unit_state("a") is UnitState.STREAMED
    assert ctl.consume() is None  # the step lacks "b"
    group_b = ctl._units["b"]
    ctl.rule.take_chunk = lambda least, most: [group_b]  # broken: "b" is still in flight
    before = (list(ctl.events), ctl.unit_state("b"), list(ctl._step))
    with pytest.raises(InvariantViolation, match="peer-chunk"):
        ctl.stream()
    assert (list(ctl.events), ctl.unit_state("b"), list(ctl._step)) == before
    with pytest.raises(IllegalOperation):  # no stream without streaming
        PeerController("nemo_in_order", Config(max_staleness=1, batch_size=2), 4).stream()


def test_train_runs_nemo_as_shipped_and_check_trace_holds_it(tmp_path, capsys):
    from runtime.cli import main

    from .test_peers import FAKE

    out = tmp_path / "run"
    assert main(["train", *FAKE, "--steps", "2", "--output-dir", str(out),
                 "--set", "staleness.policy=nemo_in_order", "--set", "recovery.enabled=false",
                 "--set", "trainer.streaming=true", "--set", "rollout.refit=keep"]) == 0
    capsys.readouterr()
    lines = (out / "events.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    assert head["x_policy"] == "nemo_in_order" and head["config"]["streaming"] is True
    assert any(json.loads(x)["op"] == "stream" for x in lines[1:])
    assert main(["check-trace", str(out / "events.jsonl"), "--peer", "nemo_in_order"]) == 0
    assert "PEER RULE HELD (nemo_in_order)" in capsys.readouterr().out
