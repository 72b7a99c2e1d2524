from __future__ import annotations

import pytest

from reserve_occupy import Group, GroupError


def test_group_completes_at_size_without_oversampling():
    g = Group("g", 3)
    assert not g.finish(0).complete
    assert not g.finish(2).complete
    p = g.finish(1)
    assert p.complete and not p.failed and p.surplus == ()
    assert g.committed == (0, 2, 1)


def test_group_oversampling_commits_first_finishers_and_lists_surplus_once():
    g = Group("g", 2, candidates=4)
    g.finish(3)
    p = g.finish(1)
    assert p.complete and p.surplus == (0, 2)
    with pytest.raises(GroupError, match="closed"):
        g.finish(0)


def test_group_fails_when_too_few_candidates_can_finish():
    g = Group("g", 2, candidates=3)
    assert not g.fail(0).failed
    g.finish(1)
    p = g.fail(2)
    assert p.failed and not p.complete and p.surplus == ()


def test_group_failure_reports_running_candidates_as_surplus():
    g = Group("g", 3, candidates=4)
    g.fail(0)
    p = g.fail(1)
    assert p.failed and p.surplus == (2, 3)


@pytest.mark.parametrize("size,candidates", [(0, None), (2, 1), (True, None), (2, 2.5)])
def test_group_rejects_bad_sizes(size, candidates):
    with pytest.raises(GroupError):
        Group("g", size, candidates)


def test_group_rejects_unknown_and_repeated_candidates():
    g = Group("g", 2, candidates=3)
    with pytest.raises(GroupError, match="no candidate 7"):
        g.finish(7)
    g.finish(0)
    with pytest.raises(GroupError, match="already reported"):
        g.fail(0)
    assert g.running == (1, 2)
