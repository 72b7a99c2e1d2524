"""verl's own timing on the runtime (issue 37 item 4): a finished group without gradient is handed
to a rule that discards such groups when its trainer samples (``Policy.filters_at_sample``:
verl's ``ReplayBufferAsync`` evicts it and refills 1:1 at the next sample; tinker and
torchtitan's windowed FIFO skip it as the batch is assembled) *placed and marked*
(``PeerController.occupy_no_gradient``), stays in the rule's buffer, and is filtered (and
refilled) at the rule's next ``take_batch``; never trained. Every other rule keeps the driver's
abort at finish and the adapter's re-arm (NeMo-RL's replace); Reserve–Occupy is untouched.

Before: the driver aborted every such group when its rewards came in and ``runtime.peers``
re-armed the rule's group at once, so the runtime's verl refilled sooner than verl ships
(the filtering grid's ``verl_drop`` row; docs/peers.md, "The filtering workload").

Driver tests on the scripted engine and the virtual clock (hand-worked traces below); one run
through ``train`` (fake engine, the real GRPO trainer on the tiny model) crashed with such a
group finished and untrained; one short run on the real vLLM CPU engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reserve_occupy import Config, IllegalOperation, InvariantViolation, UnitState
from reserve_occupy.trace import dumps
from reserve_occupy_peers import POLICIES
from reserve_occupy_porting.checker import check
from runtime.cli import main
from runtime.peers import PEER_POLICIES, PeerController, make_rule
from runtime.recovery.journal import JournaledController
from runtime.rollout.fake import CharTokenizer, Plan

from .helpers import make, run

# The rules whose source discards a group without gradient when its trainer samples
SAMPLE_FILTERS = {"verl_drop", "verl_wait", "tinker", "window_fifo"}

# The hand-worked scenario: batch 2 of groups of 2, eta 1, a step trains 2.0 s. Each unit's
# requests take DURATION (1.5 s if not listed; g4..g6 apart, so that no two finish at once
# after the first step); every candidate of g2 returns the same two tokens (equal rewards
# under parity_reward: no gradient), the others 2 or 3 tokens by candidate parity (one reward
# of each: a gradient).
DURATION = {"g0": 1.0, "g1": 1.0, "g2": 2.0, "g3": 2.5, "g4": 1.5, "g5": 1.75, "g6": 2.0}
NO_GRAD = "g2"


def script(request, version):  # noqa: ARG001
    unit, rest = request.request_id.split("-c", 1)
    n = 2 if unit == NO_GRAD else 2 + int(rest.split("-")[0]) % 2
    return Plan(DURATION.get(unit, 1.5), [1] * n + [CharTokenizer.eos_token_id], "stop")


def _scenario(policy: str, steps: int = 2, trainer_fails: bool = False):
    driver, _, trainer, clock = make(script=script, policy=policy, max_staleness=1,
                                     batch_size=2, group_size=2, steps=steps, train_s=2.0)
    if trainer_fails:
        async def dies(version):
            raise RuntimeError("the trainer died exporting the weights")

        trainer.export_weights = dies
    return driver, trainer, clock


def _ops(driver) -> list[tuple]:
    """(op, unit or the consumed units, meta) of every event, in order; a reservation's meta
    (its prompt) left out."""
    out = []
    for e in driver.controller.events:
        who = [u.unit_id for u in e.batch.units] if e.op == "consume" else e.unit_id
        out.append((e.op, who, None if e.op == "reserve" else driver.controller.metas.get(e.seq)))
    return out


def _log(driver) -> list[str]:
    return [dumps(r) for r in driver.controller.trace_records("test")]


def _trained_tokens(trainer) -> int:
    return sum(len(s.token_ids) for b in trainer.batches for g in b.groups for s in g.samples)


def _check_cli(tmp_path: Path, driver, *args: str) -> int:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(_log(driver)) + "\n")
    return main(["check-trace", str(path), *args])


# ------------------------------------------------------------------ which rules ---------------

def test_the_rules_that_filter_at_sample_say_so_and_it_is_what_they_do():
    """``filters_at_sample`` against each rule's own behaviour, on a scripted host: a group
    without gradient finishes; a rule that filters it in ``on_group_done`` filters at finish,
    the others only when the trainer samples (``take_batch``)."""
    from tests.peers.test_peers_2026 import ScriptHost

    class Host(ScriptHost):
        def set_timer(self, t):  # AReaL's wait timeout: not needed here
            pass

        def rollout_has_room(self) -> bool:  # an engine of 4 slots (unbounded, synchronous)
            return sum(g.state == g.RUNNING for g in self.groups) < 4

    for name in PEER_POLICIES:
        rule = make_rule(name, 1)
        ctl = PeerController(name, Config(max_staleness=1, batch_size=2), 1, now=lambda: 0.0)
        assert ctl.keeps_no_gradient is (name in SAMPLE_FILTERS), name
        if not rule.filters:  # NeMo-RL as shipped, PRIME-RL: train such groups
            assert name not in SAMPLE_FILTERS and not ctl.keeps_no_gradient
            continue
        h = Host(rule)
        if not h.groups:
            h.take()  # a rule that admits when the trainer first asks (AReaL's round)
        h.finish(0, no_grad=True)
        at_finish = h.filtered == [0]
        if not at_finish:
            assert h.filtered == []
            h.take()
            assert h.filtered == [0], name
        assert rule.filters_at_sample is (not at_finish), name
    # verl_drop's simulator option (the runtime's old timing) is a rule that filters at finish
    assert not POLICIES["verl_drop"](1, filter_at="finish").filters_at_sample


def test_only_a_rule_that_filters_at_sample_takes_a_marked_group():
    config = Config(max_staleness=1, batch_size=2)
    for ctl in (JournaledController(config),
                PeerController("nemo_in_order", config, 2, now=lambda: 0.0)):
        assert ctl.keeps_no_gradient is False
        ctl.reserve("u0")
        before = list(ctl.events)
        with pytest.raises(IllegalOperation, match="occupy_no_gradient"):
            ctl.occupy_no_gradient("u0")
        assert list(ctl.events) == before and ctl.unit_state("u0") is UnitState.IN_FLIGHT
    # a rule that chose a marked group for a batch (a broken rule) would train it: the adapter
    # refuses it as an invariant, changing nothing
    ctl = PeerController("verl_drop", config, 2, now=lambda: 0.0)
    for u in ("u0", "u1"):
        ctl.reserve(u)
    ctl.occupy_no_gradient("u0")
    ctl.occupy("u1")
    ctl.rule.take_batch = lambda: [ctl._units["u0"], ctl._units["u1"]]
    with pytest.raises(InvariantViolation, match="carries no gradient"):
        ctl.consume()
    assert ctl.unit_state("u0") is UnitState.FINISHED and not ctl._training


# ------------------------------------------------------------------ the hand-worked trace -----

def test_verl_filters_the_group_at_its_next_sample_and_refills_then(tmp_path):
    """verl_drop, eta 1, batch 2 of 2, a step trains 2.0 s, by hand:

    * t=0: verl submits its warm-up batch and step 1's (4 prompts, tag 1): g0..g3 at v0;
    * t=1: g0, g1 finish; the waiting trainer samples them (tag 1) and trains until t=3;
    * t=2: g2 finishes, its rewards all equal: placed marked, it stays in verl's buffer; no
      refill (verl has nothing to submit until its trainer samples);
    * t=2.5: g3 finishes;
    * t=3: publish v1; step 2 submits 2 prompts (tag 2); its sample evicts g2 (``filter``,
      ``no_gradient``) and refills it 1:1 (tag 2): g4, g5, g6 reserved at v1; g3 alone is
      not a batch;
    * t=4.5: g4 finishes: the waiting trainer's sample has two, g3 (tag 1) and g4 (tag 2),
      and takes them.

    Before (the driver's abort at finish): g2 aborted at t=2 and its re-armed group reserved
    as g4 at v0 at once, before the publish."""
    driver, trainer, clock = _scenario("verl_drop")
    records = run(driver, clock)
    ops = _ops(driver)
    assert ops[:14] == [
        *[("reserve", f"g{k}", None) for k in range(4)],
        ("occupy", "g0", None), ("occupy", "g1", None),
        ("consume", ["g0", "g1"], None),
        ("occupy", "g2", {"no_gradient": True}),
        ("occupy", "g3", None),
        ("publish", None, None),
        ("filter", "g2", {"reason": "no_gradient"}),
        *[("reserve", f"g{k}", None) for k in (4, 5, 6)],
    ]
    assert ops[14:16] == [("occupy", "g4", None), ("consume", ["g3", "g4"], None)]
    reserved = {e.unit_id: e.v_traj for e in driver.controller.events if e.op == "reserve"}
    assert [reserved[f"g{k}"] for k in range(7)] == [0, 0, 0, 0, 1, 1, 1]
    # when, on the driver's clock: placed marked at t=2, filtered at the sample at t=3
    notes = {(n["event"], n["unit"]): n for n in driver.notes if n.get("unit") == NO_GRAD}
    assert notes[("occupy", NO_GRAD)]["t"] == 2.0 and notes[("occupy", NO_GRAD)]["no_gradient"]
    assert notes[("filter", NO_GRAD)] == {"t": 3.0, "event": "filter", "unit": NO_GRAD,
                                          "at": "sample"}
    # nothing of it trained; the driver forgot its data at the filter
    assert [[g.unit_id for g in b.groups] for b in trainer.batches] == [["g0", "g1"],
                                                                        ["g3", "g4"]]
    assert NO_GRAD not in driver.groups
    assert records[-1].tokens_trained == _trained_tokens(trainer) == 4 * (3 + 4)
    summary = driver.log_counts.summary()
    assert summary["filtered"] == 1 and summary["trained"] == 4
    assert "no_gradient" not in summary["aborted_by_reason"]
    # the lenient (peer) check holds the log; without --peer it is refused
    report = check(_log(driver), peer="verl_drop")
    assert report.ok and report.dropped == 1, report.problem
    assert _check_cli(tmp_path, driver, "--peer", "verl_drop") == 0
    assert _check_cli(tmp_path, driver) == 2


@pytest.mark.parametrize("policy", ["nemo_in_order", "areal", "roll"])
def test_a_rule_that_filters_at_finish_keeps_the_abort_and_the_re_arm(policy, tmp_path):
    """The same script under rules that do not filter at sample (NeMo-RL trains such groups
    unless the driver's filter removes them; AReaL and ROLL filter when they finish): g2 is
    aborted with reason ``no_gradient`` when it finishes, its re-armed group bound to the next
    unit at once (NeMo-RL's replace); nothing of it is placed or trained."""
    driver, trainer, clock = _scenario(policy, steps=3)
    run(driver, clock)
    ops = _ops(driver)
    at = ops.index(("abort", NO_GRAD, {"reason": "no_gradient"}))
    assert ops[at + 1][0] == "reserve"  # the re-armed group, bound to the next unit
    assert not [o for o in ops if o[1] == NO_GRAD and o[0] in ("occupy", "filter")]
    assert NO_GRAD not in {g.unit_id for b in trainer.batches for g in b.groups}
    assert driver.log_counts.summary()["filtered"] >= 1
    assert _check_cli(tmp_path, driver, "--peer", policy) == 0
    if policy == "nemo_in_order":
        # by hand: NeMo-RL's dataloader admits eta + 1 = 2 batches (g0..g3, v0); g0, g1 train
        # from t=1; g2 finishes at t=2 (no gradient): aborted, and the rule's group re-armed
        # as g4 at v0 at once, before the step's publish at t=3
        assert [o[:2] for o in ops[:10]] == [
            ("reserve", "g0"), ("reserve", "g1"), ("reserve", "g2"), ("reserve", "g3"),
            ("occupy", "g0"), ("occupy", "g1"), ("consume", ["g0", "g1"]),
            ("abort", NO_GRAD), ("reserve", "g4"), ("occupy", "g3")]
        assert ops[10][0] == "publish"
        assert [n["t"] for n in driver.notes if n.get("unit") == NO_GRAD] == [2.0]


def test_reserve_occupy_is_unchanged(tmp_path):
    """Reserve–Occupy under the same script: g2 aborted with reason ``no_gradient`` at t=2
    (the core's abort; never occupied), strict check-trace holds the log."""
    driver, trainer, clock = _scenario("reserve_occupy", steps=3)
    run(driver, clock)
    ops = _ops(driver)
    assert ("abort", NO_GRAD, {"reason": "no_gradient"}) in ops
    assert not [o for o in ops if o[1] == NO_GRAD and o[0] != "reserve" and o[0] != "abort"]
    assert NO_GRAD not in {g.unit_id for b in trainer.batches for g in b.groups}
    assert _check_cli(tmp_path, driver) == 0  # strict


def test_a_crash_with_the_group_finished_and_untrained_leaves_a_log_that_checks(tmp_path):
    """The trainer dies at t=3, exporting step 1's weights, while g2 (no gradient, placed
    marked at t=2) waits in verl's buffer for the sample that never comes: the run fails, g2
    stays FINISHED (not filtered, not trained), the driver's shutdown leaves the controller's
    invariants whole and the crash-cut log holds under the rule's check."""
    driver, trainer, clock = _scenario("verl_drop", trainer_fails=True)
    with pytest.raises(RuntimeError, match="the trainer died"):
        run(driver, clock)
    ctl = driver.controller
    assert ctl.unit_state(NO_GRAD) is UnitState.FINISHED
    ctl.check()
    ops = _ops(driver)
    assert [o for o in ops if o[1] == NO_GRAD] == [
        ("reserve", NO_GRAD, None), ("occupy", NO_GRAD, {"no_gradient": True})]
    assert ("publish", None, None) not in ops
    assert [[g.unit_id for g in b.groups] for b in trainer.batches] == [["g0", "g1"]]
    assert _check_cli(tmp_path, driver, "--peer", "verl_drop") == 0


# ------------------------------------------------------------------ through train -------------

FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false", "--set", "staleness.policy=verl_drop",
        "--set", "recovery.enabled=false"]


def test_train_crashed_with_a_marked_group_is_checked_and_not_resumed(tmp_path, tiny_model,
                                                                      capsys, monkeypatch):
    """``train`` (fake engine, the GRPO trainer on the tiny model, exact-answer reward on the
    fake engine's random digits: most groups score 0 throughout) dies right after the first
    group without gradient placed marked once a step has trained (a run that trained nothing
    is removed, so that the same command starts it again): its ``events.jsonl`` holds that unit
    FINISHED with ``meta.no_gradient``, never consumed; ``check-trace --peer verl_drop`` holds
    the log; ``--resume`` refuses in one line (a peer's run keeps no recovery state), changing
    nothing."""
    placed = PeerController.occupy_no_gradient

    def dies(self, unit_id, meta=None):
        placement = placed(self, unit_id, meta)
        if self.version >= 1:
            raise RuntimeError("the process died here")
        return placement

    monkeypatch.setattr(PeerController, "occupy_no_gradient", dies)
    out = tmp_path / "run"
    code = main(["train", *FAKE, "--steps", "3", "--output-dir", str(out)])
    assert code not in (0, 2)
    monkeypatch.setattr(PeerController, "occupy_no_gradient", placed)
    records = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    marked = [r["unit"] for r in records if r.get("op") == "occupy"
              and (r.get("meta") or {}).get("no_gradient")]
    assert marked and [r["op"] for r in records].count("publish") >= 1
    ends = [r for r in records if r.get("unit") == marked[-1]]
    assert [r["op"] for r in ends] == ["reserve", "occupy"]  # FINISHED, not filtered
    assert not [r for r in records if r.get("op") == "consume"
                and set(marked) & {u["unit"] for u in r["batch"]["units"]}]
    capsys.readouterr()
    assert main(["check-trace", str(out / "events.jsonl"), "--peer", "verl_drop"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    capsys.readouterr()
    assert main(["train", "--no-progress", "--resume", str(out), "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert "cannot be resumed" in err and "staleness.policy=verl_drop" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()
            if p.is_file() and p.name != ".lock"} == before


# ------------------------------------------------------------------ real vLLM ----------------

@pytest.mark.vllm
@pytest.mark.asyncio(loop_scope="session")
async def test_verl_filters_at_sample_on_real_vllm(engine, tiny_model, tmp_path):
    """verl_drop on the CPU engine and the torch trainer, with the filtering workload's reward
    (a seeded 40 % of the prompts score 0.0 for every answer): every group without gradient is
    placed marked and filtered at a later consume (never aborted at finish, never trained);
    the trainer's tokens are exactly those of the trained groups; the log checks."""
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.session import run_training

    from .helpers import load_bench

    bench = load_bench("peers_compare")
    cfg = load_config(None, {
        "run.progress": False, "run.plot": False, "run.eval_prompts": 0,
        "run.check_invariants": True, "run.output_dir": str(tmp_path), "run.steps": 3,
        "staleness.batch_size": 4, "staleness.group_size": 2, "staleness.max_staleness": 1,
        "staleness.policy": "verl_drop", "recovery.enabled": False})
    reward = bench.NoGradientReward(0, 0.4)
    prompts = load_prompts()
    seen = []

    def spy(driver):
        train_step = driver.trainer.train_step

        async def record(batch):
            seen.append(batch)
            return await train_step(batch)

        driver.trainer.train_step = record

    result = await run_training(cfg, tiny_model, prompts, reward, tmp_path, rollout=engine,
                                log=lambda _: None, driver_hook=spy)
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    at = {(r.get("op"), r.get("unit")): i for i, r in enumerate(events)}
    prompt_of = {r["unit"]: r["meta"]["prompt"] for r in events if r.get("op") == "reserve"}
    marked = [r["unit"] for r in events if r.get("op") == "occupy"
              and (r.get("meta") or {}).get("no_gradient")]
    # the seeded prompts without gradient that finished are among the marked groups
    finished = {r["unit"] for r in events if r.get("op") == "occupy"}
    none = {u for u in finished if reward.no_gradient(prompts[prompt_of[u]])}
    assert none and none <= set(marked)
    assert not [r for r in events if r.get("op") == "abort"
                and (r.get("meta") or {}).get("reason") == "no_gradient"]
    for u in marked:  # filtered after it was placed, or still waiting at the end
        if ("filter", u) in at:
            assert at[("filter", u)] > at[("occupy", u)]
            assert events[at[("filter", u)]]["meta"] == {"reason": "no_gradient"}
    assert any(("filter", u) in at for u in marked)
    trained = {g.unit_id for b in seen for g in b.groups}
    assert len(seen) == 3 and not trained & set(marked)
    assert result.rows[-1]["tokens_trained"] == sum(
        len(s.token_ids) for b in seen for g in b.groups for s in g.samples)
    assert main(["check-trace", str(tmp_path / "events.jsonl"), "--peer", "verl_drop"]) == 0
