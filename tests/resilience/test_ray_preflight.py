"""Ray resource requests are checked against the cluster before any actor is created: a run
that asks for more than exists exits 2 with what was asked and what exists, instead of
waiting silently for ever (docs/ray.md, "When the cluster is too small")."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")  # the package imports ray (the ray extra)

from runtime.ray_backend.preflight import ClusterTooSmall, check, requests  # noqa: E402


def test_the_sum_of_the_actors_must_fit_the_cluster():
    asked = requests(2, {"num_cpus": 1}, {"num_cpus": 1})
    with pytest.raises(ClusterTooSmall, match=r"asks for 3 CPU in all \(2 engine actor\(s\) "
                                              r"x 1 CPU \+ the trainer actor's 1 CPU\), the "
                                              r"cluster has 2 CPU"):
        check(asked, {"CPU": 2.0}, [{"CPU": 2.0}])
    check(asked, {"CPU": 4.0}, [{"CPU": 4.0}])  # enough: no error


def test_one_actor_must_fit_one_node():
    asked = requests(1, {"num_gpus": 2}, {"num_cpus": 1})
    with pytest.raises(ClusterTooSmall, match="engine actor 0 asks for 2 GPU and no node"):
        check(asked, {"GPU": 2.0, "CPU": 8.0}, [{"GPU": 1.0, "CPU": 4.0},
                                                 {"GPU": 1.0, "CPU": 4.0}])


def test_a_custom_resource_the_cluster_lacks_is_named():
    asked = requests(1, {"accelerator_type:H100": 1}, {"num_cpus": 1})
    with pytest.raises(ClusterTooSmall, match="1 accelerator_type:H100.*has 0 accelerator"):
        check(asked, {"CPU": 8.0}, [{"CPU": 8.0}])




def test_the_ranks_placement_must_fit_the_nodes():
    # trainer.world_size 2, a CPU each: STRICT_PACK needs one node with 2, STRICT_SPREAD two
    # nodes with 1; the soft strategies place anywhere the totals allow
    from runtime.ray_backend.preflight import check_placement

    two_small = [{"CPU": 1.0}, {"CPU": 1.0}]
    one_big = [{"CPU": 2.0}]
    with pytest.raises(ClusterTooSmall, match="STRICT_PACK puts the 2 trainer ranks on one "
                                              "node, 2 x 1 CPU, and no node"):
        check_placement(2, {"num_cpus": 1}, "STRICT_PACK", two_small)
    with pytest.raises(ClusterTooSmall, match="STRICT_SPREAD .* and 1 node\\(s\\) hold"):
        check_placement(2, {"num_cpus": 1}, "STRICT_SPREAD", one_big)
    check_placement(2, {"num_cpus": 1}, "STRICT_PACK", one_big)
    check_placement(2, {"num_cpus": 1}, "STRICT_SPREAD", two_small)
    check_placement(2, {"num_cpus": 1}, "SPREAD", one_big)
    asked = requests(1, {"num_cpus": 1}, {"num_cpus": 1}, world=2)
    assert [who for who, _ in asked] == ["engine actor 0", "trainer rank 0", "trainer rank 1"]
    with pytest.raises(ClusterTooSmall, match=r"1 engine actor\(s\) x 1 CPU \+ 2 trainer "
                                              r"rank\(s\) x 1 CPU\), the cluster has 2 CPU"):
        check(asked, {"CPU": 2.0}, one_big)
