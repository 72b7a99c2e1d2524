"""``scale_nodes`` scales the trainer's per-token terms and micro-batches and carries every other
field of the model unchanged: a field it does not name (the chunk terms, the engine's contention
for the trainer and its load shape) must not fall back to its default in the scaled model."""

from dataclasses import fields, replace

import pytest

from reserve_occupy_sim.model.cost import TOY, TrainCost, scale_nodes

SCALED = {"per_token_s", "per_token_sq_s", "microbatch_size"}


def _non_default(train: TrainCost) -> TrainCost:
    """Every field of ``train`` that ``scale_nodes`` does not scale, moved off its value."""
    changes = {}
    for f in fields(TrainCost):
        value = getattr(train, f.name)
        if f.name in SCALED:
            continue
        if f.name == "rollout_load":
            changes[f.name] = "hyperbolic"
        elif f.name == "chunk_share":
            changes[f.name] = value / 2  # at most 1
        elif isinstance(value, int):
            changes[f.name] = value + 3
        else:
            changes[f.name] = value + 0.25
    return replace(train, **changes)


@pytest.mark.parametrize("nodes", [2, 7])
def test_every_field_scale_nodes_does_not_scale_carries_over(nodes):
    model = replace(TOY, train=_non_default(TOY.train))
    scaled = scale_nodes(model, nodes)
    for f in fields(TrainCost):
        before, after = getattr(model.train, f.name), getattr(scaled.train, f.name)
        if f.name in ("per_token_s", "per_token_sq_s"):
            assert after == pytest.approx(before / nodes, rel=1e-15), f.name
        elif f.name == "microbatch_size":
            assert after == before * nodes
        else:
            assert after == before, f"{f.name}: {before!r} became {after!r}"
    assert scaled.rollout == model.rollout and scaled.instances == model.instances * nodes


def test_the_contention_term_survives_scaling():
    model = replace(TOY, train=replace(TOY.train, rollout_slowdown=0.86, rollout_load_n=40.0))
    scaled = scale_nodes(model, 4)
    assert (scaled.train.rollout_slowdown, scaled.train.rollout_load_n) == (0.86, 40.0)
