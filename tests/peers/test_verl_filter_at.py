"""``verl_drop``'s ``filter_at``: verl's own (``"sample"``) evicts a group without gradient and
refills its prompt at the trainer's next sample; ``"finish"`` does both when the group
finishes — what the runtime's driver filter gives the real-engine bench's verl row, and the
term that explains the simulator's miss against it (docs/peers.md, "The filtering workload")."""

from __future__ import annotations

import pytest

from reserve_occupy_peers import make_policy

from tests.peers.test_peers_2026 import ScriptHost


def _host(filter_at: str | None) -> ScriptHost:
    # eta 0, batch 2 of 1, parameter_sync_step 1 (mini-batch = batch), no warm-up batch: the
    # first step's 2 prompts are submitted at once, tagged step 1
    opts = {} if filter_at is None else {"filter_at": filter_at}
    return ScriptHost(make_policy("verl_drop", 0, num_warmup_batches=0, parameter_sync_step=1,
                                  **opts))


def test_verl_s_own_filter_waits_for_the_trainer_s_sample():
    h = _host(None)
    assert [g.gid for g in h.groups] == [0, 1]
    h.finish(0, no_grad=True)
    assert h.filtered == [] and len(h.groups) == 2  # nothing until the trainer samples
    h.finish(1)
    assert h.take() is None  # the sample evicts g0 and submits g2 in its place
    assert h.filtered == [0] and len(h.groups) == 3
    h.finish(2)
    assert h.take() == [1, 2]


def test_filter_at_finish_refills_the_moment_the_group_finishes():
    h = _host("finish")
    h.finish(0, no_grad=True)
    assert h.filtered == [0] and len(h.groups) == 3  # g2 submitted at once, tagged step 1
    assert h.groups[2].tag == 1
    h.finish(1)
    h.finish(2)
    assert h.take() == [1, 2] and h.dropped == []
    assert h.policy.settings()["filter_at"] == "finish"
    assert "filter_at" not in _host(None).policy.settings()  # verl's own: the stored runs'


def test_a_bad_filter_at_is_refused():
    with pytest.raises(ValueError, match="filter_at must be one of sample, finish"):
        make_policy("verl_drop", 1, filter_at="poll")
