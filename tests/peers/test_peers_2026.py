"""The peers as their frameworks ship them in late 2026 (issue 38, item 1): ``nemo_windowed``,
``nemo_ready_first``, ``verl_wait``, ``prime_rl``, ``tinker``, ``window_fifo``.

Each rule first on a hand-worked trace: a scripted host (``ScriptHost``, every ``Host`` call
recorded, nothing simulated) drives the rule through a small scenario whose admissions,
batches, drops and aborts are worked out in the comments from the rule's definition (its
module docstring cites the source), and the test asserts the rule does exactly that. Then each
rule in the simulator (a small workload, conservation and its bound), in the runtime's driver on
the fake engine (its log read by ``check-trace --peer``), and through the CLI (``simulate
--policy``, ``train`` with ``staleness.policy`` and ``rollout.backend=fake``, ``check-trace
--peer``).
"""

from __future__ import annotations

import json

import pytest

from reserve_occupy_porting.report import render_text
from reserve_occupy_peers import PEERS_2026, POLICIES, Group, make_policy

NEW = [cls.name for cls in PEERS_2026]


# ------------------------------------------------------------------ a scripted host ---------

class G(Group):
    """A group as the scripted host hands it to the rule (its own single trajectory)."""

    __slots__ = ("spec", "group")

    def __init__(self, gid: int, v_tag: int, spec: int | None) -> None:
        self.gid, self.v_tag, self.spec = gid, v_tag, spec
        self.tag, self.state, self.no_grad = None, Group.RUNNING, False
        self.requests, self.group = [self], self

    def __repr__(self) -> str:
        return f"g{self.gid}"


class ScriptHost:
    """Answers ``Host``; the test moves time: ``finish`` (a group completes, then the rule may
    admit, as both hosts do), ``take`` (the idle trainer asks for a batch), ``publish``."""

    paused = False
    trainer_idle = True
    now = 0.0

    def __init__(self, policy, batch_size: int = 2, group_size: int = 1) -> None:
        self.batch_size, self.group_size = batch_size, group_size
        self.version = 0
        self.groups: list[G] = []
        self.dropped: list[int] = []
        self.aborted: list[int] = []
        self.filtered: list[int] = []
        self.policy = policy
        policy.attach(self)
        policy.admit()

    # Host
    def rollout_has_room(self) -> bool:
        return True

    def admit(self, v_tag=None, spec=None, priority=False) -> G:
        g = G(len(self.groups), self.version if v_tag is None else v_tag, spec)
        self.groups.append(g)
        return g

    def abort_group(self, group: G) -> None:
        assert group.state == Group.RUNNING, group
        group.state = Group.ABORTED
        self.aborted.append(group.gid)

    def drop(self, requests) -> None:
        for r in requests:
            assert r.group.state == Group.DONE, r
            self.dropped.append(r.group.gid)

    def filter(self, group: G) -> None:
        group.state = Group.FILTERED
        self.filtered.append(group.gid)

    def set_timer(self, t: float) -> None:
        raise AssertionError("no rule here sets a timer")

    # the script
    def finish(self, *gids: int, no_grad: bool = False) -> None:
        for gid in gids:
            g = self.groups[gid]
            assert g.state == Group.RUNNING, g
            g.state, g.no_grad = Group.DONE, no_grad
            self.policy.on_group_done(g)
            self.policy.admit()

    def take(self) -> list[int] | None:
        got = self.policy.take_batch()
        self.policy.admit()
        return None if got is None else [r.group.gid for r in got]

    def publish(self) -> None:
        self.version += 1
        self.policy.on_publish(self.version)
        self.policy.admit()

    def admitted(self) -> list[int]:
        return [g.gid for g in self.groups]

    def v_tags(self, *gids: int) -> list[int]:
        return [self.groups[g].v_tag for g in gids]


def test_the_new_rules_are_registered_after_the_old_ones():
    # tables keep their order: the new rules come last in POLICIES; trl (TRL's
    # AsyncGRPOTrainer) and verl_drop (verl V1's drop strategy) are not duplicated
    names = list(POLICIES)
    assert names[-len(NEW):] == NEW == ["nemo_windowed", "nemo_ready_first", "verl_wait",
                                        "prime_rl", "tinker", "window_fifo"]
    assert "trl_async" not in POLICIES and "verl_v1_drop" not in POLICIES
    assert {n: POLICIES[n].bounded for n in NEW} == {
        "nemo_windowed": True, "nemo_ready_first": False, "verl_wait": False,
        "prime_rl": True, "tinker": True, "window_fifo": True}


# ------------------------------------------------------------------ hand-worked traces ------

def test_nemo_windowed_by_hand():
    # W = eta = 1, 2 groups a step, max_inflight_prompts 4, max_buffered_rollouts 8
    h = ScriptHost(make_policy("nemo_windowed", 1, max_inflight_prompts=4,
                               max_buffered_rollouts=8))
    # ungated: the 4 in-flight permits go at once, all at v0
    assert h.admitted() == [0, 1, 2, 3] and h.v_tags(0, 1, 2, 3) == [0] * 4
    h.finish(0, 1)  # each frees an in-flight permit: g4, g5 at v0
    assert h.admitted() == [0, 1, 2, 3, 4, 5]
    assert h.take() == [0, 1]  # ready in [0, 0], slot order
    h.publish()  # v1: nothing in flight is older than 1 - W = 0; 4 in flight, nothing admitted
    assert h.aborted == [] and len(h.groups) == 6
    h.finish(2, 4, 5)  # g6, g7, g8 at v1
    assert h.v_tags(6, 7, 8) == [1, 1, 1]
    assert h.take() == [2, 4]  # window [0, 1]: g2, g4, g5 ready (v0); the first two in slot order
    h.publish()  # v2: window [1, 2]; g3 (v0) still running: cancelled; then one permit: g9 at v2
    assert h.aborted == [3] and h.admitted()[-1] == 9 and h.v_tags(9) == [2]
    # the trainer asks at v2: g5 (v0, ready) is evicted (dropped); nothing else ready
    assert h.take() is None and h.dropped == [5]
    assert [g.gid for g in h.policy.slots] == [6, 7, 8, 9]


def test_nemo_ready_first_by_hand():
    # W = eta = 1, 2 groups a step: batch d is released once the trainer reaches d - 1
    h = ScriptHost(make_policy("nemo_ready_first", 1, max_inflight_prompts=8))
    assert h.admitted() == [0, 1, 2, 3]  # batches 0 and 1 at v0; batch 2 waits for v1
    h.finish(1, 2, 3)
    assert h.take() == [1, 2]  # every ready group, slot order (g0 still generating)
    h.publish()  # v1: batch 2 = g4, g5
    assert h.admitted() == [0, 1, 2, 3, 4, 5]
    h.finish(4)
    assert h.take() == [3, 4]
    h.publish()  # v2: batch 3 = g6, g7
    h.finish(5, 6)
    assert h.take() == [5, 6]
    h.publish()  # v3: batch 4 = g8, g9
    h.finish(0, 7)
    # g0, admitted at v0, trains at v3: staleness 3 > W = 1 (counts bounded, ages not);
    # nothing dropped, nothing aborted
    assert h.take() == [0, 7] and h.version - h.v_tags(0)[0] == 3
    assert h.dropped == h.aborted == []
    assert h.admitted() == list(range(10))


def test_verl_wait_by_hand():
    # eta 0: max_off_policy_threshold 1; one warm-up batch; parameter_sync_step 1 (one
    # mini-batch a step, as the runtime runs it); 2 groups a step
    h = ScriptHost(make_policy("verl_wait", 0, parameter_sync_step=1))
    assert h.admitted() == [0, 1, 2, 3]  # warm-up + step 1's batch, all tagged step 1
    assert [h.groups[i].tag for i in range(4)] == [1, 1, 1, 1]
    h.finish(0, 1, 2)
    # g3 is pending with 1 - 1 + 1 >= 1: head-of-line blocking (verl_drop would sample now)
    assert h.take() is None
    h.finish(3)
    assert h.take() == [0, 1]  # smallest tags, ties in completion order
    h.publish()  # step 2: one batch submitted, tagged 2
    assert h.admitted() == [0, 1, 2, 3, 4, 5] and [h.groups[i].tag for i in (4, 5)] == [2, 2]
    h.finish(4)
    assert h.take() is None  # g5 pending, 2 - 2 + 1 >= 1
    h.finish(5)
    # finished: g2, g3 (tag 1), g4, g5 (tag 2): the oldest go, submitted at v0, trained at v1:
    # staleness 1 > eta 0. Nothing is dropped: "wait" is dropless, and breaks the bound here.
    assert h.take() == [2, 3] and h.dropped == []
    # the drop strategy on the same script evicts g2, g3 (2 - 1 + 1 > 1) and refills them
    d = ScriptHost(make_policy("verl_drop", 0, parameter_sync_step=1))
    d.finish(0, 1, 2)
    assert d.take() == [0, 1]
    d.finish(3)
    d.publish()
    d.finish(4, 5)
    assert d.take() == [4, 5] and d.dropped == [2, 3]


def test_prime_rl_by_hand():
    # eta = max_off_policy_steps 1, 2 groups of 1 episode a batch, max_inflight 3 episodes;
    # batch k trains on version k and takes groups with v_tag >= k - 1
    h = ScriptHost(make_policy("prime_rl", 1, max_inflight=3))
    assert h.admitted() == [0, 1, 2]
    h.finish(0)  # queue [g0]; g3 admitted (v0)
    h.finish(1)  # queue [g0, g1]: batch 0 formed (ship-hold: v0 >= -1); g4 admitted (gate: 1-0)
    assert h.admitted() == [0, 1, 2, 3, 4]
    assert h.take() == [0, 1]
    h.finish(2)  # g5 admitted
    h.finish(3)  # batch 1 = [g2, g3] formed (v0 >= 0); now assembling batch 2: gate 2 - 0 > 1
    assert h.admitted() == [0, 1, 2, 3, 4, 5] and h.policy.k == 2
    # g4 (v0) arrives while batch 2 (trains at v2, needs v_tag >= 1) is assembled: voided
    h.finish(4)
    assert h.dropped == [4] and h.admitted() == [0, 1, 2, 3, 4, 5]  # gate still shut
    h.publish()  # v1: on_version_pending cancels g5 (v0 < 1); the gate opens: g6, g7, g8 at v1
    assert h.aborted == [5] and h.admitted()[6:] == [6, 7, 8] and h.v_tags(6, 7, 8) == [1] * 3
    assert h.take() == [2, 3]  # batch 1 at v1: staleness 1
    h.finish(6)  # g9 at v1 (gate: 2 - 1 = 1)
    h.finish(7)  # batch 2 = [g6, g7] (v1 >= 2 - 1); assembling batch 3: the gate shuts
    assert h.policy.k == 3 and h.admitted()[-1] == 9
    h.publish()  # v2: batch 3 needs v_tag >= 2: g8, g9 (v1) are cancelled in flight
    assert h.take() == [6, 7] and h.dropped == [4] and h.aborted == [5, 8, 9]


def test_tinker_by_hand():
    # eta = max_steps_off_policy 1, groups_per_batch 2 (= the workers); prompts by index
    h = ScriptHost(make_policy("tinker", 1))
    assert [g.spec for g in h.groups] == [0, 1]
    h.finish(0, 1)  # prompts 2, 3 at v0
    assert h.take() == [0, 1]
    h.publish()
    h.finish(2)  # prompt 4 at v1
    assert h.take() is None  # batch [g2], one short
    h.finish(4)  # prompt 5 at v1
    assert h.take() == [2, 4]
    h.publish()  # v2
    h.finish(3)  # g3 (v0) done; prompt 6 at v2
    # 2 - 0 > 1: discarded, prompt 3 requeued at the back of the builder queue ([7, 3])
    assert h.take() is None and h.dropped == [3]
    h.finish(5)  # prompt 7 from the queue's front
    h.finish(6)  # prompt 3 again, behind it
    assert h.take() == [5, 6]  # g5: 2 - 1 = 1, kept
    assert [g.spec for g in h.groups] == [0, 1, 2, 3, 4, 5, 6, 7, 3]
    assert h.v_tags(8) == [2]
    # a group with equal rewards is filtered (remove_constant_reward_groups), not requeued
    h.finish(7, no_grad=True)
    assert h.take() is None and h.filtered == [7] and 7 not in h.policy.builders
    assert h.dropped == [3]


def test_tinker_in_the_runtime_does_not_choose_prompts():
    # requeue=False (the runtime's driver picks prompts): the discarded prompt is not redone
    h = ScriptHost(make_policy("tinker", 0, requeue=False))
    h.finish(0)  # g2 at v0
    h.publish()
    h.finish(1)  # g3 at v1
    # eta 0 at v1: g0 and g1 (v0) are discarded; no prompt is chosen, none requeued
    assert h.take() is None and h.dropped == [0, 1]
    assert [g.spec for g in h.groups] == [None] * 4 and not h.policy.builders


def test_window_fifo_by_hand():
    # eta 2, P = 2, window_fraction 0.5: S = eta - 1 = 1, B = (S+1)P = 4, W = floor(0.5*4) = 2,
    # bound (B + W - 2) // P = 2 = eta
    h = ScriptHost(make_policy("window_fifo", 2, window_fraction=0.5))
    p = h.policy
    assert (p.S, p.active_max, p.window, p.bound, p.eta) == (1, 4, 2, 2, 2)
    assert h.admitted() == [0, 1, 2, 3]  # 4 slots, charged at admission
    h.finish(1, 2)  # no slot returns: nothing admitted
    # window [0, 1]: g1 is the oldest finished in it; g2 is finished but outside
    assert h.take() is None and [g.gid for g in p.batch] == [1]
    h.finish(0)
    assert h.take() == [1, 0]
    h.publish()  # the step's 2 slots return: g4, g5 at v1
    assert h.admitted() == [0, 1, 2, 3, 4, 5]
    assert h.take() is None  # takes g2 (head); then window [3, 4]: nothing finished
    h.finish(4)
    assert h.take() == [2, 4]  # g4 inside the window although g3 runs
    h.publish()  # g6, g7 at v2
    h.finish(5)
    assert h.take() is None  # head g3 runs; window [3, 4]; g5 finished but outside it
    h.finish(3)
    # g3 (admitted v0) trains at v2: staleness 2 = the bound; nothing dropped
    assert h.take() == [3, 5] and h.version - h.v_tags(3)[0] == 2 and h.dropped == []
    # a group without gradient is filtered and its slot returns at once (an admission follows)
    h.finish(6, no_grad=True)
    before = len(h.groups)
    assert h.take() is None and h.filtered == [6] and len(h.groups) == before + 1


@pytest.mark.parametrize("eta, P, expected", [
    # (S, window_fraction, W, bound)
    (0, 2, (0, None, 1, 0)), (1, 4, (1, None, 1, 1)),  # floor(0.3 * 4) = 1: strict FIFO
    (2, 4, (1, 0.3, 2, 2)), (1, 16, (0, 0.3, 4, 1)), (3, 16, (2, 0.3, 14, 3)),
    (4, 16, (4, None, 1, 4)),  # S = 3 would give W = 19 > P + 1, bound 5
])
def test_window_fifo_maps_eta_to_torchtitans_bound(eta, P, expected):
    h = ScriptHost(make_policy("window_fifo", eta), batch_size=P)
    p = h.policy
    assert (p.S, p.fraction, p.window, p.bound) == expected and p.eta == eta
    # the shipped defaults: S = 3, P = 8, W = floor(0.3 * 32) = 9: max_offpolicy_steps 4
    shipped = ScriptHost(make_policy("window_fifo", 0, target_offpolicy_steps=3), batch_size=8)
    assert (shipped.policy.window, shipped.policy.eta) == (9, 4)


# ------------------------------------------------------------------ the simulator -----------

@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("eta", [1, 2])
def test_each_rule_simulates_and_keeps_what_it_promises(name, eta):
    from reserve_occupy_sim.model.checks import check_conservation, check_staleness
    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.cost import preset
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate

    workload = generate(3, MathReasoningShape(groups=96))
    sim = Simulator(make_policy(name, eta), workload, preset("qwen3-8b-h20"), batches=10,
                    batch_size=4).run()
    counts = check_conservation(sim)
    assert len(sim.ledger.batches) == 10 and counts["trained"] == 10 * 4 * workload.group_size
    if sim.policy.bounded:  # the unbounded ones: test_ready_first_trains_stragglers_...
        assert check_staleness(sim, sim.policy.eta) <= eta
    if name in ("nemo_ready_first", "verl_wait", "window_fifo"):
        assert not sim.ledger.dropped  # the dropless rules


def test_ready_first_trains_stragglers_past_eta_in_the_simulator():
    # not vacuous: on the long-tailed workload ready_first trains beyond its W, windowed never
    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.cost import preset
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate

    workload, cost = generate(1, MathReasoningShape(groups=128)), preset("qwen3-8b-h20")
    worst = {}
    for name in ("nemo_ready_first", "nemo_windowed"):
        sim = Simulator(make_policy(name, 1), workload, cost, batches=12, batch_size=4).run()
        worst[name] = max(s for b in sim.ledger.batches for s in b.staleness)
    assert worst["nemo_ready_first"] > 1 >= worst["nemo_windowed"]


# ------------------------------------------------------------------ the runtime -------------

def _runtime(name: str, eta: int = 1, steps: int = 6):
    from reserve_occupy.trace import dumps
    from reserve_occupy_porting.checker import check
    from runtime.rollout.fake import random_script

    from tests.runtime.helpers import make, run

    driver, _, trainer, clock = make(script=random_script(11, long_tail=0.3), max_staleness=eta,
                                     steps=steps, policy=name, train_s=0.3)
    run(driver, clock)
    log = [dumps(r) for r in driver.controller.trace_records("test")]
    return driver, trainer, check(log, peer=name)


@pytest.mark.parametrize("name", NEW)
def test_each_rule_runs_in_the_runtime_and_its_log_checks(name):
    driver, trainer, report = _runtime(name)
    assert driver.controller.rule.name == name and type(driver.controller.rule) is POLICIES[name]
    assert len(trainer.batches) == 6 and all(len(b.groups) == 4 for b in trainer.batches)
    assert report.ok, report.problem
    assert (report.policy, report.mode, report.batches) == (name, "peer", 6)
    assert report.bounded is POLICIES[name].bounded
    trained = [g.staleness for b in trainer.batches for g in b.groups]
    assert sum(report.staleness.values()) == len(trained) == 24
    assert report.staleness == {s: trained.count(s) for s in set(trained)}
    assert report.over_eta == sum(1 for s in trained if s > report.eta)
    if report.bounded:
        assert max(trained) <= 1 and report.over_eta == 0
    drops = [e for e in driver.controller.events if e.op == "filter"]
    assert report.dropped == len(drops)


def test_check_trace_fails_a_bounded_rule_over_its_eta_and_only_reports_an_unbounded_one():
    # the verl_wait log at eta 0 (it trains at staleness 1: see test_verl_wait_by_hand) is
    # reported under its own name; the same events fail when held to the bound
    from reserve_occupy.trace import dumps, parse_lines
    from reserve_occupy_porting.peer_safety import PeerTracker

    driver, _, report = _runtime("verl_wait", eta=0, steps=5)
    assert report.ok and report.over_eta > 0 and max(report.staleness) >= 1
    # dropless: what it discards untrained is only the groups without gradient, which the rule
    # filters at its sample (runtime.peers: occupy_no_gradient), none for staleness
    drops = [e for e in driver.controller.events if e.op == "filter"]
    assert all(driver.controller.metas[e.seq] == {"reason": "no_gradient"} for e in drops)
    assert report.dropped == len(drops)
    text = render_text(report, "log")
    assert "not bounded by its rule" in text
    assert f"discarded untrained: {len(drops)} finished" in text
    head, entries = parse_lines([dumps(r) for r in driver.controller.trace_records("test")])
    bounded = PeerTracker(head.config, "verl_wait", True, 0)
    problems = [v for v in map(bounded.step, entries) if v is not None]
    assert problems and problems[0].invariant == "staleness-bound"


def test_check_trace_reports_what_a_dropping_rule_dropped():
    driver, _, report = _runtime("nemo_windowed", eta=0, steps=5)
    drops = [e for e in driver.controller.events if e.op == "filter"]
    aborts = [e for e in driver.controller.events if e.op == "abort"]
    assert report.ok and report.over_eta == 0 and set(report.staleness) == {0}
    assert (report.dropped, report.aborted) == (len(drops), len(aborts))
    assert report.dropped + report.aborted > 0


# ------------------------------------------------------------------ the CLI -----------------

FAKE = ["--no-progress", "--set", "rollout.backend=fake", "--set", "run.eval_prompts=0",
        "--set", "staleness.batch_size=4", "--set", "staleness.group_size=4",
        "--set", "run.plot=false", "--set", "recovery.enabled=false"]


@pytest.mark.parametrize("name", NEW)
def test_train_and_check_trace_from_the_cli(name, tmp_path, capsys):
    from runtime.cli import main

    out = tmp_path / "run"
    assert main(["train", *FAKE, "--steps", "3", "--output-dir", str(out),
                 "--set", f"staleness.policy={name}"]) == 0
    capsys.readouterr()
    events = out / "events.jsonl"
    assert json.loads(events.read_text().splitlines()[0])["x_policy"] == name
    assert main(["check-trace", str(events), "--peer", name, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["policy"] == name and report["batches"] == 3
    assert sum(report["staleness"].values()) == 12 and "dropped" in report


def test_simulate_runs_each_new_rule_from_the_cli(tmp_path, capsys):
    from runtime.cli import main

    out = tmp_path / "sim"
    assert main(["simulate", "--policy", ",".join(NEW), "--eta", "1", "--batches", "4",
                 "--batch-size", "4", "--groups", "64", "--out", str(out),
                 "--no-progress"]) == 0
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert {r["policy"] for r in runs} >= set(NEW)
    text = capsys.readouterr().out
    for cls in PEERS_2026:
        assert cls.label in text, cls.name


# ------------------------------------------------------------------ pinned -------------------

# sha256 (first 16 hex) of each run's ledger, as tests/runtime/test_peers.py pins the older
# rules the runtime drives (same workload, cost preset and fingerprint), so a later edit to
# one of these rules shows in the simulator and the runtime alike. Recorded at this commit.
# Three equal older rules' runs where the rules coincide on this workload: verl_wait at eta 3
# never reaches its threshold and does what verl_drop does (which drops nothing there);
# window_fifo at eta 1 with P = 4 is strict FIFO with 8 slots, which is nemo_in_order's
# schedule at eta 1; verl_wait at eta 1 equals roll's run at eta 1.
SIM_FINGERPRINTS_2026 = {
    ("nemo_windowed", 1): "4d0ea7f48f0249db", ("nemo_windowed", 3): "817e7734d5ca555f",
    ("nemo_ready_first", 1): "3bf594b5a66979f9", ("nemo_ready_first", 3): "db3e706258c25ba1",
    ("verl_wait", 1): "475e18b89f1f4d5a", ("verl_wait", 3): "0734d006a5c94476",
    ("prime_rl", 1): "4a867a42894a536d", ("prime_rl", 3): "14ad3ee46982ebe2",
    ("tinker", 1): "221ae85476148912", ("tinker", 3): "36e374d5feb9c27e",
    ("window_fifo", 1): "6d45c2850e88abef", ("window_fifo", 3): "681b5d4b18b540de",
}


def test_the_new_rules_simulate_as_recorded():
    from reserve_occupy_sim.model.core import Simulator
    from reserve_occupy_sim.model.cost import preset
    from reserve_occupy_sim.model.workload import MathReasoningShape, generate

    from tests.ledger import fingerprint

    workload, cost = generate(1, MathReasoningShape(groups=128)), preset("qwen3-8b-h20")
    assert {name for name, _ in SIM_FINGERPRINTS_2026} == set(NEW)
    got = {(name, eta): fingerprint(Simulator(make_policy(name, eta), workload, cost,
                                               batches=12, batch_size=4).run())
           for name, eta in SIM_FINGERPRINTS_2026}
    assert got == SIM_FINGERPRINTS_2026


# ------------------------------------------------------------------ nothing published moves --

def test_no_existing_study_or_bench_runs_the_new_rules_by_default():
    # the regime map, the streaming table, experiment 2 and make bench-peers keep their lists;
    # issue 38's rules run where named (--policy/--policies), so no published figure moves. The
    # regime map and the streaming study run them as rows and columns of their own
    # (regimes.PEERS, streaming.PEER_FRAMEWORKS) that no earlier table, target or map reads,
    # added to the stored results without rerunning them (tests/sim/test_regimes_peers.py,
    # tests/sim/test_streaming_peers_map.py)
    from reserve_occupy_sim.studies import bound, experiments, regimes, scenarios, streaming
    from tests.runtime.helpers import load_bench

    lists = [bound.TABLE_POLICIES, experiments.EXP2_POLICIES, regimes.BASELINES,
             regimes.REFERENCES, [p for _, p, _ in scenarios.FILTER_POLICIES],
             [f.policy for f in streaming.FRAMEWORKS if f not in streaming.PEER_FRAMEWORKS]]
    assert not set(NEW) & {p for names in lists for p in names}
    bench = load_bench("peers_compare")
    assert not set(NEW) & set(bench.DEFAULT_POLICIES)
    assert set(bench.DEFAULT_POLICIES) | set(NEW) == set(bench.POLICY_CHOICES)


# ------------------------------------------------------------------ streaming ----------------

@pytest.mark.parametrize("name", ["nemo_windowed", "nemo_ready_first"])
def test_the_new_nemo_samplers_stream_in_the_runtime_and_check(name):
    # NeMo-RL's _train_pump: each select is a chunk of at least min(chunk_groups, lacking)
    from tests.runtime.test_peers import _log
    from tests.runtime.test_peers_streaming import B, STEPS, _nemo

    from reserve_occupy_porting.checker import check

    driver, trainer, records = _nemo(True, chunk_groups=2, policy=name)
    assert len(records) == STEPS and trainer.chunks
    assert all(len(c) >= 2 for c in trainer.chunks)
    # every trained group came by stream, and each step trains exactly what it streamed
    steps = [e for e in driver.controller.events if e.op == "consume"]
    assert [set(e.batch.streamed) for e in steps] == [set(e.batch.unit_ids) for e in steps]
    assert [[g.unit_id for g in b.groups] for b in trainer.batches] == [
        list(e.batch.unit_ids) for e in steps]
    report = check(_log(driver), peer=name)
    assert report.ok, report.problem
    assert sum(report.staleness.values()) == STEPS * B


@pytest.mark.parametrize("name", ["verl_wait", "prime_rl", "tinker", "window_fifo"])
def test_the_whole_batch_rules_refuse_streaming(name):
    from reserve_occupy import Config
    from runtime.peers import PeerController, UnsupportedByRuntime

    with pytest.raises(UnsupportedByRuntime, match=f"{name} does not stream"):
        PeerController(name, Config(max_staleness=1, batch_size=2, streaming=True), 4)
