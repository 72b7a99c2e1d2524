"""The simulator at many engines (issue 38 item 4): its earliest-event search recomputes only
the instances that can be next (``Simulator._next_event``), its dispatch picks the least loaded
instance without a Python loop, and its loop calls ``finish_due`` only where a completion is
due. Each must give the full scan's answer to the last bit: the runs below are pinned by the
fingerprints of their ledgers as the full scans made them (recorded on the code before these
changes), on deployments of 8 and 32 engines where ties and near-ties between engines, aborts
(verl's and ROLL's L2, the STUCK timeout) and the trainer's contention all happen."""

from __future__ import annotations


import pytest

from reserve_occupy_peers import make_policy
from reserve_occupy_sim.model.core import Simulator
from reserve_occupy_sim.model.cost import preset, scale_nodes
from reserve_occupy_sim.model.workload import MathReasoningShape, generate
from tests.ledger import fingerprint


def _cost(nodes: int, slowdown: float):
    from dataclasses import replace

    base = preset("qwen3-8b-h20")
    base = replace(base, rollout=replace(base.rollout, train_slowdown=slowdown))
    return scale_nodes(base, nodes)


# (policy, eta, options, nodes, train_slowdown) -> fingerprint, recorded with the full scans
PINNED = {
    ('reserve_occupy', 1, (), 4, 0.0): '281d845f2ab78d6a',
    ('reserve_occupy', 2, (('stuck_timeout_s', 200.0),), 4, 0.3): '4bc8fdee9918d6f7',
    ('verl_drop', 1, (), 4, 0.0): '0af4e4d2a4555631',
    ('roll', 1, (), 16, 0.0): '47e795c7c9bcf3b9',
    ('nemo_in_order', 2, (), 16, 0.3): 'ab76d963c6a2bd0f',
    ('prime_rl', 1, (), 4, 0.0): '6acfab7d3095b9e6',
}


@pytest.mark.parametrize("key", list(PINNED), ids=lambda k: f"{k[0]}-eta{k[1]}-x{k[3]}")
def test_many_engines_simulate_as_the_full_scan_did(key):
    name, eta, options, nodes, slowdown = key
    workload = generate(2, MathReasoningShape(groups=256))
    sim = Simulator(make_policy(name, eta, **dict(options)), workload, _cost(nodes, slowdown),
                    batches=6, batch_size=4 * nodes)
    assert fingerprint(sim.run()) == PINNED[key]


def test_the_earliest_event_is_the_full_scan_s_at_every_event(monkeypatch):
    fast = Simulator._next_event
    seen = []

    def both(self):
        # the full scan first: Instance.next_event only drops stale heap entries, which
        # changes nothing the fast search reads
        t_full, due_full = self._trainer_until, None
        for inst in self.instances:
            t = inst.next_event()
            if t < t_full:
                t_full, due_full = t, inst
        got = fast(self)
        assert got == (t_full, due_full)
        seen.append(got[1] is not None)
        return got

    monkeypatch.setattr(Simulator, "_next_event", both)
    workload = generate(3, MathReasoningShape(groups=128))
    Simulator(make_policy("verl_drop", 1), workload, _cost(8, 0.2), batches=4,
              batch_size=16).run()
    assert sum(seen) > 100 and not all(seen)  # engines' and the trainer's events both came
