"""An exception other than ``NonFiniteStep`` raised partway through a batch (here an injected
fault in the forward pass of the batch's last sample) leaves the trainer's bookkeeping as
before the batch: no gradient, no units noted for the next optimizer step (``_grad_units``),
none noted as non-finite (``_non_finite``), no streamed step pending; and the next batch
trains bit-identically to a twin trainer that never saw the failure.

Before, the units of the failed batch's micro-batches stayed in ``_grad_units`` /
``_non_finite`` (a NaN loss noted before the fault made the next, clean batch fail with
``NonFiniteStep`` naming a unit it does not hold), and a batch of one optimizer step kept
the gradient its earlier micro-batches had accumulated (the next batch stepped with it).

On the tiny model, in process, with fixed behaviour log-probabilities. ``packing=False``,
``micro_batch=1``: one sample per forward/backward, so the fault comes after other samples'
losses were noted and back-propagated, and the micro-batches are the same however the batch
is split (the twin's comparison is bit for bit)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from runtime.config import TrainerConfig
from runtime.trainer.base import GroupSample, Sample, TrainBatch
from runtime.trainer.grpo import GRPOTrainer

PROMPT = (5, 6, 14, 11)
FAULTY = (4, 2)  # the response of g2/1: the batch's last sample in every split used here


class InjectedFault(RuntimeError):
    pass


def _batch(version: int, nan_in_g1: bool = False) -> TrainBatch:
    """Two groups of two samples (g1/0, g1/1, g2/0, g2/1). ``nan_in_g1``: g1/1's behaviour
    log-probability NaN (its loss is NaN), a sample trained before the faulty one."""
    groups = []
    for unit, responses, rewards in (("g1", ((13, 12, 2), (7, 2)), (1.0, 0.0)),
                                     ("g2", ((6, 6, 6, 2), FAULTY), (0.0, 1.0))):
        samples = []
        for i, (r, rw) in enumerate(zip(responses, rewards)):
            lp = [-1.0] * len(r)
            if nan_in_g1 and unit == "g1" and i == 1:
                lp[0] = math.nan
            samples.append(Sample(tuple(r), tuple(lp), (version,) * len(r), rw, "stop", 1, i))
        groups.append(GroupSample(unit, 0, PROMPT, version, version, tuple(samples)))
    return TrainBatch(version, tuple(groups))


def _trainer(tiny_model, tmp_path, name: str, **settings) -> GRPOTrainer:
    out = tmp_path / name
    out.mkdir()
    return GRPOTrainer(tiny_model, TrainerConfig(lr=1e-2, packing=False, micro_batch=1,
                                                 **settings), out, seed=0, total_steps=10)


def _arm(tr: GRPOTrainer) -> list[str]:
    """Make the next forward pass with gradient over the faulty sample raise (once). Returns
    the list the fault appends to when it fires."""
    inner = tr._logprobs
    fired: list[str] = []

    def logprobs(model, prompts, responses):
        if not fired and torch.is_grad_enabled() and any(tuple(r) == FAULTY
                                                         for r in responses):
            fired.append("fault")
            raise InjectedFault("injected fault in the forward pass")
        return inner(model, prompts, responses)

    tr._logprobs = logprobs  # type: ignore[method-assign]
    return fired


def _state(tr: GRPOTrainer) -> tuple[dict, dict]:
    params = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    return params, copy.deepcopy(tr.opt.state_dict())


def _assert_same(a: tuple[dict, dict], b: tuple[dict, dict]) -> None:
    (pa, oa), (pb, ob) = a, b
    changed = [n for n in pa if not torch.equal(pa[n], pb[n])]  # bit-identical, not close
    assert not changed, changed[:5]
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys()
    for i, st in oa["state"].items():
        for k, v in st.items():
            assert torch.equal(v, ob["state"][i][k]) if torch.is_tensor(v) \
                else v == ob["state"][i][k], (i, k)


def _assert_clean(tr: GRPOTrainer) -> None:
    """The bookkeeping of a trainer between batches."""
    assert tr._grad_units == []
    assert tr._non_finite == []
    assert tr._pending is None
    assert all(p.grad is None for p in tr.model.parameters())


SPLITS = {"one step": {}, "minibatches 2": {"minibatches": 2}, "epochs 2": {"epochs": 2}}


@pytest.mark.parametrize("nan_in_g1", [False, True], ids=["finite", "a NaN loss before"])
@pytest.mark.parametrize("split", list(SPLITS))
def test_a_fault_mid_batch_leaves_no_stale_units_or_gradient(tiny_model, tmp_path, split,
                                                             nan_in_g1):
    tr = _trainer(tiny_model, tmp_path, "tr", **SPLITS[split])
    twin = _trainer(tiny_model, tmp_path, "twin", **SPLITS[split])  # never sees the failure
    tr._train(_batch(0))  # warmed up: Adam has moments, the schedule a learning rate set
    twin._train(_batch(0))
    before, steps = _state(tr), tr.steps
    fired = _arm(tr)
    with pytest.raises(InjectedFault):
        tr._train(_batch(1, nan_in_g1))
    assert fired == ["fault"]
    _assert_clean(tr)
    assert tr.steps == steps
    if split != "one step":  # a batch of several steps is put back whole (_BatchSnapshot)
        _assert_same(_state(tr), before)
    # the next batch: trained as by the twin, bit for bit (no NonFiniteStep for a unit of
    # the failed batch, no gradient of it added)
    m1, m2 = tr._train(_batch(1)), twin._train(_batch(1))
    _assert_clean(tr)
    _assert_same(_state(tr), _state(twin))
    assert m1 == m2
    assert not all(torch.equal(before[0][n], p) for n, p in tr.model.named_parameters())


@pytest.mark.parametrize("nan_in_g1", [False, True], ids=["finite", "a NaN loss before"])
def test_a_fault_in_a_streamed_chunk_drops_the_pending_step(tiny_model, tmp_path, nan_in_g1):
    """Streaming: a chunk that fails partway drops the step pending (the earlier chunks'
    gradient with it: a chunk's part cannot be taken back out of the summed gradient), so
    ``finish_step`` trains the whole batch, as the twin that streamed nothing does."""
    tr = _trainer(tiny_model, tmp_path, "tr")
    twin = _trainer(tiny_model, tmp_path, "twin")
    for t in (tr, twin):
        t._finish_step(_batch(0))
    bad = _batch(1, nan_in_g1)
    tr._accumulate(TrainBatch(1, bad.groups[:1]))  # g1 (with its NaN loss, if any)
    assert tr._pending is not None
    fired = _arm(tr)
    with pytest.raises(InjectedFault):
        tr._accumulate(TrainBatch(1, bad.groups[1:]))  # g2: g2/0 trained, g2/1 faults
    assert fired == ["fault"]
    _assert_clean(tr)
    m1, m2 = tr._finish_step(_batch(1)), twin._finish_step(_batch(1))
    _assert_clean(tr)
    _assert_same(_state(tr), _state(twin))
    assert m1 == m2


def test_a_fault_in_the_streamed_batch_final_step_drops_the_pending_step(tiny_model,
                                                                         tmp_path):
    """Streaming: a failure in ``finish_step``'s own step, after the gradient was divided by
    the batch's tokens (here the gradient's norm, taken by the step, raises once), drops the
    step pending; the retry trains the whole batch as the twin does, instead of dividing the
    kept gradient again and stepping with it (a grad norm about 1/n of the twin's)."""
    tr = _trainer(tiny_model, tmp_path, "tr")
    twin = _trainer(tiny_model, tmp_path, "twin")
    for t in (tr, twin):
        t._finish_step(_batch(0))
    tr._accumulate(TrainBatch(1, _batch(1).groups[:1]))
    inner, fired = tr._optimizer_step, []

    def optimizer_step():
        if not fired:
            fired.append("fault")
            raise InjectedFault("injected fault in the optimizer step")
        return inner()

    tr._optimizer_step = optimizer_step  # type: ignore[method-assign]
    with pytest.raises(InjectedFault):
        tr._finish_step(_batch(1))
    assert fired == ["fault"]
    _assert_clean(tr)
    m1, m2 = tr._finish_step(_batch(1)), twin._finish_step(_batch(1))
    _assert_clean(tr)
    _assert_same(_state(tr), _state(twin))
    assert m1 == m2
