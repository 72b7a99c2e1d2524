"""A batch trained in several optimizer steps (``trainer.minibatches`` or ``epochs`` > 1) is
one step for ``NonFiniteStep``: a NaN or an infinity in a later minibatch's loss or gradient
leaves the weights and the optimizer state bit-identical to what they were before the batch
(before, the earlier minibatches' optimizer steps stayed in memory), the error names the
minibatch, and the trainer then trains as if the failed batch had never come.

On the tiny model, in process, with fixed behaviour log-probabilities."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from runtime.config import TrainerConfig
from runtime.trainer.base import GroupSample, NonFiniteStep, Sample, TrainBatch
from runtime.trainer.grpo import GRPOTrainer

PROMPT = (5, 6, 14, 11)


def _batch(version: int, nan_in: str | None = None) -> TrainBatch:
    """Two groups of two samples. ``_rows`` lists them g1/0, g1/1, g2/0, g2/1 and
    ``minibatches=2`` deals them [g1/0, g2/0], [g1/1, g2/1]: ``nan_in="g1"`` puts a NaN
    behaviour log-probability in g1/1 only, so minibatch 1 is finite and minibatch 2's loss
    NaN."""
    groups = []
    for unit, responses, rewards in (("g1", ((13, 12, 2), (7, 2)), (1.0, 0.0)),
                                     ("g2", ((6, 6, 6, 2), (4, 2)), (0.0, 1.0))):
        samples = []
        for i, (r, rw) in enumerate(zip(responses, rewards)):
            lp = [-1.0] * len(r)
            if unit == nan_in and i == 1:
                lp[0] = math.nan
            samples.append(Sample(tuple(r), tuple(lp), (version,) * len(r), rw, "stop", 1, i))
        groups.append(GroupSample(unit, 0, PROMPT, version, version, tuple(samples)))
    return TrainBatch(version, tuple(groups))


def _state(tr: GRPOTrainer) -> tuple[dict, dict]:
    """Copies of the parameters and of the optimizer's whole state (moments, step counts,
    param groups with their learning rate)."""
    params = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    return params, copy.deepcopy(tr.opt.state_dict())


def _assert_same(a: tuple[dict, dict], b: tuple[dict, dict]) -> None:
    (pa, oa), (pb, ob) = a, b
    assert pa.keys() == pb.keys()
    changed = [n for n in pa if not torch.equal(pa[n], pb[n])]  # bit-identical, not close
    assert not changed, changed[:5]
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys()
    for i, st in oa["state"].items():
        assert st.keys() == ob["state"][i].keys()
        for k, v in st.items():
            assert torch.equal(v, ob["state"][i][k]) if torch.is_tensor(v) \
                else v == ob["state"][i][k], (i, k)


def _trainer(tiny_model, tmp_path, name: str, **settings) -> GRPOTrainer:
    out = tmp_path / name
    out.mkdir()
    # a warm-up schedule: the learning rate of the batch differs from the one before it
    return GRPOTrainer(tiny_model, TrainerConfig(lr=1e-2, warmup_steps=3, **settings), out,
                       seed=0, total_steps=10)


def _inf_gradient_in_pass_2(tr: GRPOTrainer) -> None:
    """``epochs=2``: the second pass's gradient infinite (a hook on one parameter, added once
    the first pass's optimizer step is taken); the losses stay finite."""
    step = tr._optimizer_step
    param = next(tr.model.parameters())
    calls = []

    def counted() -> float:
        if calls:
            return step()
        calls.append(1)
        norm = step()
        calls.append(param.register_hook(lambda g: g * math.inf))
        return norm

    tr._optimizer_step = counted  # type: ignore[method-assign]
    tr._remove_hook = lambda: [h.remove() for h in calls[1:]]  # type: ignore[attr-defined]


CASES = {
    # minibatch 2 of 2: a NaN loss (g1/1's NaN behaviour log-probability)
    "minibatches": ({"minibatches": 2}, "g1", r"step \d+, minibatch 2 of 2: the loss of "
                                              r"unit\(s\) g1 is NaN"),
    # the second pass over the batch: an infinite gradient, the losses finite
    "epochs": ({"epochs": 2}, None, r"step \d+, epoch 2 of 2: the gradient's norm is "
                                    r"(inf|nan) \(units g\d, g\d\)"),
}


@pytest.mark.parametrize("warm", [False, True], ids=["first batch", "after a batch"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_non_finite_later_minibatch_leaves_model_and_optimizer_as_before_the_batch(
        tiny_model, tmp_path, case, warm):
    settings, nan_in, says = CASES[case]
    tr = _trainer(tiny_model, tmp_path, "tr", **settings)
    twin = _trainer(tiny_model, tmp_path, "twin", **settings)  # never sees the failure
    if warm:  # Adam has moments and a step count, the optimizer a learning rate set
        tr._train(_batch(0))
        twin._train(_batch(0))
    before, steps = _state(tr), tr.steps
    _assert_same(before, _state(twin))
    if nan_in is None:
        _inf_gradient_in_pass_2(tr)
    try:
        with pytest.raises(NonFiniteStep, match=says):
            tr._train(_batch(1, nan_in))
    finally:
        if nan_in is None:
            tr._remove_hook()
            del tr._optimizer_step
    _assert_same(_state(tr), before)
    assert tr.steps == steps
    assert all(p.grad is None for p in tr.model.parameters())
    # the same batch without the fault: trained as by the twin, bit for bit, and it moves
    # the weights (the first minibatch's step alone would have, too)
    tr._train(_batch(1))
    twin._train(_batch(1))
    _assert_same(_state(tr), _state(twin))
    assert not all(torch.equal(before[0][n], p) for n, p in tr.model.named_parameters())


@pytest.mark.slow
def test_the_sharded_ranks_put_the_batch_back_alike(tiny_model, tmp_path):
    """Two FSDP2 ranks (each restores its shards of the DTensor parameters and moments): the
    NaN in minibatch 2 of 2 stops every rank with the same message, the exported weights after
    are bit-identical to those before the batch, and the trainer trains the next batch."""
    from safetensors.torch import load_file

    from runtime.trainer.sharded import ShardedTrainer

    tr = ShardedTrainer(tiny_model, TrainerConfig(lr=1e-2, minibatches=2), tmp_path / "sh",
                        seed=0, world_size=2)
    try:
        tr._train(_batch(0))  # the moments exist: the batch's first step would move them
        before = load_file(str(tr._export(1) / "model.safetensors"))
        with pytest.raises(NonFiniteStep, match=r"step 2, minibatch 2 of 2: the loss of "
                                                r"unit\(s\) g1 is NaN"):
            tr._train(_batch(1, "g1"))
        after = load_file(str(tr._export(2) / "model.safetensors"))
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k], after[k]) for k in before)
        tr._train(_batch(1))
        assert tr.steps == 2
        moved = load_file(str(tr._export(3) / "model.safetensors"))
        assert not all(torch.equal(before[k], moved[k]) for k in before)
    finally:
        tr.close()
