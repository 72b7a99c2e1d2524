"""``staleness.policy``: the peers' rules driven by the runtime's driver (``runtime.peers``) on
the scripted engine and the virtual clock, their event logs read by ``check-trace``, and the
config's refusals. The rules are the simulator's own policy classes; the first test pins what
the simulator makes of them, so a change to a rule the runtime drives shows in both places.
"""

from __future__ import annotations

import json

import pytest

from reserve_occupy.trace import dumps
from runtime.cli import main
from runtime.peers import PEER_POLICIES, STALE, PeerController
from reserve_occupy_porting.checker import PeerHeaderError, check
from runtime.rollout.fake import random_script

from ..ledger import fingerprint
from .helpers import make, run

# A reward with variance in every group (candidate index parity): no group is filtered, so no
# unit is aborted before the end and the rules' own orders show unperturbed.
def index_reward(prompt, completion):  # noqa: ARG001
    return float(len(completion) % 2)


def _log(driver) -> list[str]:
    return [dumps(r) for r in driver.controller.trace_records("test")]


def _events(driver, op):
    return [e for e in driver.controller.events if e.op == op]


# ------------------------------------------------------------------ the simulator's side -----

# sha256 (first 16 hex) of each run's ledger: batches (version, trajectories, staleness, times),
# drops, filters, aborts and the end time, on the simulator tests' workload and cost preset.
SIM_FINGERPRINTS = {
    ("nemo_in_order", 1): "6d45c2850e88abef", ("nemo_in_order", 3): "3a22141e7323f4cd",
    ("nemo_weight_fifo", 1): "4097c0e4a65c90af", ("nemo_weight_fifo", 3): "36027ca0dd3ae72a",
    ("verl_drop", 1): "5b867cc932856de2", ("verl_drop", 3): "0734d006a5c94476",
    ("areal", 1): "e504e593250ee9da", ("areal", 3): "4755ee62564f7262",
    ("roll", 1): "475e18b89f1f4d5a", ("roll", 3): "54e443ee82904532",
    ("synchronous", 1): "586b6c145550e466", ("synchronous", 3): "586b6c145550e466",
    ("unbounded", 1): "d4cf6ca8c842a4a6", ("unbounded", 3): "d4cf6ca8c842a4a6",
}


def test_the_rules_the_runtime_drives_simulate_as_before():
    # Recorded before runtime.peers existed; the simulator's policies were not edited for it.
    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.cost import preset
    from reserve_occupy_peers import make_policy
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate

    workload, cost = generate(1, MathReasoningShape(groups=128)), preset("qwen3-8b-h20")
    # issue 38's rules (reserve_occupy_peers.PEERS_2026) are pinned in tests/peers/test_peers_2026.py
    from reserve_occupy_peers import PEERS_2026

    assert {name for name, _ in SIM_FINGERPRINTS} == set(PEER_POLICIES) - {
        cls.name for cls in PEERS_2026}
    got = {(name, eta): fingerprint(Simulator(make_policy(name, eta), workload, cost,
                                               batches=12, batch_size=4).run())
           for name, eta in SIM_FINGERPRINTS}
    assert got == SIM_FINGERPRINTS


# ------------------------------------------------------------------ every rule in the driver --

@pytest.mark.parametrize("policy", PEER_POLICIES)
def test_each_rule_trains_under_the_driver_and_its_log_checks(policy):
    driver, _, trainer, clock = make(script=random_script(3, long_tail=0.2), max_staleness=1,
                                     steps=8, policy=policy, train_s=0.2)
    records = run(driver, clock)
    assert isinstance(driver.controller, PeerController)
    assert driver.controller.rule.name == policy  # the simulator's class, not a copy
    assert len(records) == len(trainer.batches) == 8
    assert all(len(b.groups) == 4 for b in trainer.batches)
    report = check(_log(driver), peer=policy)
    assert report.ok, report.problem
    assert (report.policy, report.batches, report.mode) == (policy, 8, "peer")
    assert (report.bounded, report.eta) == (driver.controller.bounded, driver.controller.rule.eta)
    staleness = [u.staleness for e in _events(driver, "consume") for u in e.batch.units]
    assert sum(report.staleness.values()) == len(staleness) == 32
    if driver.controller.bounded:
        assert max(staleness) <= 1 and report.over_eta == 0
    # the trainer trained what the log says, at the versions it says
    assert [[g.unit_id for g in b.groups] for b in trainer.batches] == [
        [u.unit_id for u in e.batch.units] for e in _events(driver, "consume")]


def test_verl_drop_drops_what_is_staler_than_eta_and_trains_none_of_it():
    # eta 0: verl submits a warm-up batch besides the first step's; what step 1 does not take
    # is one step too old at step 2 and is evicted (and refilled), never trained.
    driver, _, trainer, clock = make(script=random_script(5), max_staleness=0, steps=6,
                                     policy="verl_drop", reward=index_reward,
                                     filter_zero_variance=False)
    run(driver, clock)
    reserved = {e.unit_id: e.v_traj for e in _events(driver, "reserve")}
    drops = [e for e in _events(driver, "filter")]
    assert drops and all(driver.controller.metas[e.seq] == {"reason": STALE} for e in drops)
    for e in drops:  # each dropped unit was staler than eta when the rule dropped it
        assert e.version - reserved[e.unit_id] > 0
    dropped = {e.unit_id for e in drops}
    trained = [g for b in trainer.batches for g in b.groups]
    assert not dropped & {g.unit_id for g in trained}
    assert all(g.staleness == 0 for g in trained)
    assert not dropped & set(driver.groups)  # the driver forgot the dropped units' data
    assert check(_log(driver), peer="verl_drop").ok


def test_nemo_in_order_trains_in_admission_order():
    # A long tail makes completion order differ from admission order; in_order still trains
    # dataloader batch k (the k-th run of batch_size admissions) at step k.
    def in_admission_order(driver):
        order = [e.unit_id for e in _events(driver, "reserve")]
        chunks = [set(order[k * 4:(k + 1) * 4]) for k in range(8)]
        return [set(u.unit_id for u in e.batch.units)
                for e in _events(driver, "consume")] == chunks

    def finish_order_differs(driver):
        order = [e.unit_id for e in _events(driver, "reserve")]
        done = [e.unit_id for e in _events(driver, "occupy")]
        return done[:32] != order[:32]

    driver, _, _, clock = make(script=random_script(7, long_tail=0.3), max_staleness=2, steps=8,
                               policy="nemo_in_order", reward=index_reward,
                               filter_zero_variance=False)
    run(driver, clock)
    assert finish_order_differs(driver) and in_admission_order(driver)
    # the check can fail: the unbounded rule trains the first finished, not in order
    other, _, _, clock = make(script=random_script(7, long_tail=0.3), max_staleness=2, steps=8,
                              policy="unbounded", reward=index_reward,
                              filter_zero_variance=False)
    run(other, clock)
    assert finish_order_differs(other) and not in_admission_order(other)


def test_unbounded_reports_its_trained_staleness_and_is_not_failed_for_it():
    driver, _, _, clock = make(script=random_script(3, long_tail=0.2), max_staleness=1, steps=10,
                               policy="unbounded", train_s=0.3)
    run(driver, clock)
    lines = _log(driver)
    report = check(lines, peer="unbounded")
    assert report.ok and not report.bounded
    assert report.max_staleness > 1 and report.over_eta > 0
    assert report.over_eta == sum(n for s, n in report.staleness.items() if s > 1)
    # the leniency is the named rule's alone: the header cannot claim it, and the same log
    # checked as a bounded rule's is a violation
    head = json.loads(lines[0])
    head["x_bounded"] = True
    with pytest.raises(PeerHeaderError, match="x_bounded: is true, but unbounded does not"):
        check([json.dumps(head), *lines[1:]], peer="unbounded")
    head = dict(json.loads(lines[0]), x_policy="nemo_in_order", x_bounded=True)
    bounded = check([json.dumps(head), *lines[1:]], peer="nemo_in_order")
    assert not bounded.ok and bounded.problem.violation.invariant == "staleness-bound"
    # and without --peer the log is not checked at all: it is a peer's
    with pytest.raises(PeerHeaderError, match="--peer unbounded"):
        check(lines)


def test_areal_runs_on_its_timer():
    # AReaL's prepare_batch goes round again when wait_results times out (1 s): with
    # stragglers the rule's timer fires in the driver and opens further rounds.
    driver, _, trainer, clock = make(script=random_script(3, per_token_s=0.1, long_tail=0.2),
                                     max_staleness=1, steps=6, policy="areal", train_s=0.2)
    run(driver, clock)
    rule = driver.controller.rule
    assert len(trainer.batches) == 6 and rule.rounds > 6  # more rounds than batches
    assert check(_log(driver), peer="areal").ok


def test_synchronous_trains_only_fresh_data():
    driver, _, trainer, clock = make(script=random_script(2, long_tail=0.2), max_staleness=2,
                                     steps=5, policy="synchronous")
    run(driver, clock)
    assert len(trainer.batches) == 5 and all(g.staleness == 0 for b in trainer.batches
                                             for g in b.groups)
    lines = _log(driver)
    report = check(lines, peer="synchronous")
    assert report.ok and report.eta == 0  # checked against the rule's eta, not the config's 2
    # the rule's eta is what is checked, not the header's: an eta-1 rule's log (staleness 1
    # trained) is checked at eta 1 whatever x_eta says, and an x_eta other than it is refused
    other, _, _, clock = make(script=random_script(3, long_tail=0.2), max_staleness=1, steps=6,
                              policy="nemo_in_order", train_s=0.2)
    run(other, clock)
    lines = _log(other)
    report = check(lines, peer="nemo_in_order")
    assert report.ok and report.max_staleness == 1 and report.eta == 1
    head = json.loads(lines[0])
    for claimed in (0, 5):
        head["x_eta"] = claimed
        with pytest.raises(PeerHeaderError, match=f"x_eta: is {claimed}, but nemo_in_order "
                                                  f"enforces eta 1"):
            check([json.dumps(head), *lines[1:]], peer="nemo_in_order")
    del head["x_eta"]  # absent: the rule's eta, still
    assert check([json.dumps(head), *lines[1:]], peer="nemo_in_order").eta == 1
    # the synchronous rule's eta (0) holds for its name whatever the config's eta
    head = dict(json.loads(lines[0]), x_policy="synchronous", x_eta=0)
    sync = check([json.dumps(head), *lines[1:]], peer="synchronous")
    assert not sync.ok and sync.problem.violation.invariant == "staleness-bound"


def test_a_rule_aborting_an_in_flight_group_stops_it_in_the_driver():
    # ROLL aborts the running groups of cohorts older than its lag at publish (sim.abort_group).
    # Its cohorts rarely straggle that long, so the abort is forced here the way ROLL makes it,
    # through the rule's own sim, at a publish: the driver must stop that unit's requests.
    driver, rollout, _, clock = make(script=random_script(4, per_token_s=0.05), max_staleness=1,
                                     steps=4, policy="roll", reward=index_reward,
                                     filter_zero_variance=False)
    ctl, victims = driver.controller, []
    publish = ctl.publish

    def publish_and_abort(meta=None):
        publish(meta)
        running = [g for g in ctl._units.values() if g.state == g.RUNNING]
        if not victims and running:  # as ROLL's on_publish: out of its cohort, then abort
            group, rule = running[0], ctl.rule
            del rule.cohorts[group.tag].running[group.gid]
            rule.running -= 1
            victims.append(group.unit_id)
            rule.sim.abort_group(group)

    ctl.publish = publish_and_abort
    run(driver, clock)
    (victim,) = victims
    assert ctl.unit_state(victim).value == "ABORTED"
    aborts = [e for e in _events(driver, "abort") if e.unit_id == victim]
    assert len(aborts) == 1 and ctl.metas[aborts[0].seq] == {"reason": STALE}
    assert any(n["event"] == "abort" and n["unit"] == victim for n in driver.notes)
    assert victim not in driver.groups and check(_log(driver), peer="roll").ok


def test_a_peer_log_breaking_a_lifecycle_is_caught():
    driver, _, _, clock = make(script=random_script(1), max_staleness=1, steps=3,
                               policy="nemo_in_order",
                               reward=index_reward, filter_zero_variance=False)
    run(driver, clock)
    lines = _log(driver)
    # train one unit twice: the second consume names a unit already trained
    consumes = [i for i, x in enumerate(lines) if json.loads(x)["op"] == "consume"]
    first, second = json.loads(lines[consumes[0]]), json.loads(lines[consumes[1]])
    second["batch"]["units"][0] = dict(first["batch"]["units"][0],
                                       staleness=second["batch"]["version"]
                                       - first["batch"]["units"][0]["v_traj"])
    lines[consumes[1]] = json.dumps(second)
    report = check(lines, peer="nemo_in_order")
    assert not report.ok and report.problem.violation.invariant == "lifecycle"


def test_reserve_occupy_stays_the_default():
    driver, _, _, clock = make(steps=2)
    from runtime.recovery.journal import JournaledController

    assert type(driver.controller) is JournaledController


# ------------------------------------------------------------------ config and the CLI -------

FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false"]


@pytest.mark.parametrize("settings, needles", [
    (["staleness.policy=nemo"], ["staleness.policy", "must be one of reserve_occupy, "
                                 + ", ".join(PEER_POLICIES), "'nemo'"]),
    (["staleness.policy=verl_drop"], ["staleness.policy=verl_drop", "recovery.enabled=false"]),
    (["staleness.policy=verl_drop", "recovery.enabled=false", "trainer.streaming=true"],
     ["staleness.policy=verl_drop does not stream", "trainer.streaming=false"]),
    (["staleness.policy=roll", "recovery.enabled=false", "trainer.streaming=true"],
     ["staleness.policy=roll does not stream", "trainer.streaming=false"]),
])
def test_train_check_refuses_a_bad_policy_in_one_line(tmp_path, capsys, settings, needles):
    out = tmp_path / "out"
    argv = [x for s in settings for x in ("--set", s)]
    assert main(["train", *FAKE, "--output-dir", str(out), *argv, "--check"]) == 2
    err = capsys.readouterr().err
    bad = [x for x in err.splitlines() if x.startswith("  ")]
    assert len(bad) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in bad[0], (needle, err)
    assert not out.exists()


def test_train_with_a_peer_writes_a_log_check_trace_accepts(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *FAKE, "--steps", "3", "--output-dir", str(out),
                 "--set", "staleness.policy=nemo_in_order",
                 "--set", "recovery.enabled=false"]) == 0
    capsys.readouterr()
    head = json.loads((out / "events.jsonl").read_text().splitlines()[0])
    assert head["x_policy"] == "nemo_in_order" and head["x_bounded"] is True
    # the header does not switch the check: without --peer the log is refused, one line
    assert main(["check-trace", str(out / "events.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--peer nemo_in_order" in err, err
    assert main(["check-trace", str(out / "events.jsonl"), "--peer", "nemo_in_order"]) == 0
    text = capsys.readouterr().out
    assert "PEER RULE HELD (nemo_in_order)" in text and "policy nemo_in_order" in text
    assert "CONFORMING" not in text
    assert json.loads((out / "config.json").read_text())["staleness"]["policy"] == "nemo_in_order"


def test_stale_drops_count_as_aborted_stale_not_filtered():
    from runtime.accounting import ControllerCounts

    driver, _, _, clock = make(script=random_script(5), max_staleness=0, steps=6,
                               policy="verl_drop", reward=index_reward, filter_zero_variance=False)
    run(driver, clock)
    drops = len(_events(driver, "filter"))
    summary = ControllerCounts(driver.controller).summary()
    assert drops and summary["aborted_by_reason"].get("stale") == drops
    assert summary["filtered"] == 0 and summary["trained"] == 6 * 4


# ------------------------------------------------------------------ real vLLM ----------------

@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_a_peer_rule_trains_with_real_vllm(engine, tiny_model, tmp_path):
    # nemo_in_order on the CPU engine and the torch trainer: every token of a trained group is
    # within eta of the batch (measured on the tokens' own versions), and the log checks.
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.session import run_training
    from runtime.tasks.arithmetic import ExactAnswerReward

    cfg = load_config(None, {
        "run.progress": False, "run.plot": False, "run.eval_prompts": 0,
        "run.check_invariants": True, "run.output_dir": str(tmp_path), "run.steps": 4,
        "staleness.batch_size": 4, "staleness.group_size": 4, "staleness.max_staleness": 1,
        "staleness.policy": "nemo_in_order", "recovery.enabled": False})
    seen = []

    def spy(driver):
        train_step = driver.trainer.train_step

        async def record(batch):
            seen.append(batch)
            return await train_step(batch)

        driver.trainer.train_step = record

    result = await run_training(cfg, tiny_model, load_prompts(), ExactAnswerReward(), tmp_path,
                                rollout=engine, log=lambda _: None, driver_hook=spy)
    assert isinstance(result.driver.controller, PeerController) and len(seen) == 4
    for batch in seen:
        for g in batch.groups:
            assert batch.version - min(min(s.versions) for s in g.samples) <= 1
    report = check((tmp_path / "events.jsonl").read_text().splitlines(), peer="nemo_in_order")
    assert report.ok and report.policy == "nemo_in_order" and report.batches == 4


def test_the_controller_refuses_bad_calls_with_typed_errors_and_changes_nothing():
    from reserve_occupy import Config, IllegalOperation
    from reserve_occupy.errors import DuplicateUnit, IllegalUnitState, InvalidUnitId, UnknownUnit

    ctl = PeerController("nemo_in_order", Config(max_staleness=1, batch_size=2), group_size=4)
    assert ctl.reserve("a") is not None
    before = (list(ctl.events), ctl.in_flight, ctl.version)
    for call, error in [(lambda: ctl.reserve("a"), DuplicateUnit),
                        (lambda: ctl.reserve(1.5), InvalidUnitId),
                        (lambda: ctl.occupy("zz"), UnknownUnit),
                        (lambda: ctl.publish(), IllegalOperation),
                        (lambda: ctl.stream(), IllegalOperation)]:
        with pytest.raises(error) as info:
            call()
        assert (list(ctl.events), ctl.in_flight, ctl.version) == before, info.value
    ctl.occupy("a")
    with pytest.raises(IllegalUnitState, match="'a' in state FINISHED"):
        ctl.occupy("a")
    with pytest.raises(IllegalUnitState):
        ctl.abort("a")
    with pytest.raises(ValueError, match="unknown peer policy 'trl'"):
        PeerController("trl", Config(max_staleness=1, batch_size=2), group_size=4)


@pytest.mark.parametrize("field, value", [("x_policy", 3), ("x_bounded", "yes"),
                                          ("x_eta", -1), ("x_eta", True)])
def test_a_bad_peer_header_is_a_format_error(field, value):
    from reserve_occupy.trace import TraceFormatError

    driver, _, _, clock = make(steps=1, policy="unbounded")
    run(driver, clock)
    lines = _log(driver)
    head = json.loads(lines[0])
    head[field] = value
    with pytest.raises(TraceFormatError, match=field):
        check([json.dumps(head), *lines[1:]], peer="unbounded")
