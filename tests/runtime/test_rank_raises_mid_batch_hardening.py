"""A sharded trainer's rank that *raises* (not dies) in the middle of a batch fails the step at
once, not after ``trainer.collective_timeout_s``.

Before: the driver took any error of an input kind (``ValueError``, ``NonFiniteStep``, ...) for
one every rank raises alike before the step's first collective (a bad batch), and waited for
the other ranks' answers. When one rank raised it alone mid-batch (a fault in its forward
pass, a ``NonFiniteStep`` seen only there before the shared check), the others were waiting
in a collective it would never join: the step hung until the collective timeout (300 s by
default) and then failed as "trainer rank 0: RuntimeError: ... timed out". Reproduced with 2
ranks on the tiny model, a ValueError injected in rank 1's forward in its second step, the
default timeout: ``RankLost`` after 300.x s (a RuntimeError injected the same way: 0.1 s).

Now each rank says with its error whether every rank raises it alike
(``rank.raised_alike``: before the command's first collective, by its process group's
collective count, or at a point every rank reaches together), and the driver stops the ranks
at the first error that is not (``sharded.fatal_answer``). The end-to-end tests set the
collective timeout to an hour, far above the test's own limit: they can pass only if the
failure does not wait for it. Nothing is timed.
"""

from __future__ import annotations

import errno
import re

import pytest
import torch

from runtime.config import TrainerConfig
from runtime.trainer.base import NonFiniteStep
from runtime.trainer.grpo import GRPOTrainer
from runtime.trainer.rank import RankTrainer
from runtime.trainer.sharded import RankLost, ShardedTrainer, answer_values, fatal_answer

from .test_grpo_streaming import _batch, _chunks

HOUR = 3600.0  # the collective timeout of the end-to-end tests (their own limit: 600 s)


# ------------------------------------------------------------- the driver's decision ------

def _error(kind: str, alike: bool | None) -> tuple:
    """A rank's error answer; ``alike`` None: the five-field answer of before."""
    base = ("error", kind, f"{kind} in rank", "Traceback ...", None)
    return base if alike is None else (*base, alike)


@pytest.mark.parametrize("kind", ["ValueError", "NonFiniteStep", "FileNotFoundError"])
def test_an_input_error_raised_alone_mid_command_stops_the_ranks_at_once(kind):
    reason = fatal_answer(1, _error(kind, False), False, [0])
    assert reason == f"trainer rank 1: {kind}: {kind} in rank (rank(s) 0 had not answered)"
    # raised alike (a bad batch, before any collective): wait for the other ranks, as before
    assert fatal_answer(1, _error(kind, True), False, [0]) is None
    assert fatal_answer(1, _error(kind, None), False, [0]) is None


def test_every_rank_s_input_error_is_raised_as_it_is_only_when_raised_alike():
    failed: list[str] = []

    def fail(reason, cause=None):
        failed.append(reason)
        raise RankLost(reason)

    with pytest.raises(ValueError, match="ValueError in rank"):
        answer_values([_error("ValueError", True)] * 2, fail)
    assert not failed
    with pytest.raises(RankLost, match=r"^trainer rank 1: ValueError: ValueError in rank$"):
        answer_values([_error("ValueError", True), _error("ValueError", False)], fail)
    assert failed


def test_raised_alike_is_before_the_first_collective_or_marked():
    from torch.distributed.checkpoint.api import CheckpointException

    from runtime.trainer.dcp import checkpoint_error
    from runtime.trainer.rank import ALIKE, raised_alike

    assert raised_alike(ValueError("bad batch"), 12, 12)
    assert not raised_alike(ValueError("in the forward"), 12, 14)
    marked = NonFiniteStep("after the shared check")
    setattr(marked, ALIKE, True)
    assert raised_alike(marked, 12, 20)
    assert not raised_alike(NonFiniteStep("seen only here"), 12, 20)
    # torch raises a failed DCP save or load on every rank
    failed = CheckpointException("load", {0: (OSError(errno.ENOENT, "x"), None)})
    assert raised_alike(failed, 12, 20)
    # as runtime/trainer/dcp.py raises it: the error behind it, from it (a missing shard on a
    # sharded resume, after the load's collectives)
    try:
        try:
            raise failed
        except CheckpointException as exc:
            raise checkpoint_error(exc) from exc
    except OSError as unwrapped:
        assert unwrapped.errno == errno.ENOENT
        assert raised_alike(unwrapped, 12, 20)
    assert not raised_alike(FileNotFoundError("a file of its own"), 12, 20)
    assert raised_alike(ValueError("unknown count"), None, None)


# ------------------------------------------------------------- two ranks, end to end -------

class _FaultInForward(RankTrainer):
    """Rank 1 raises ``FAULT`` in the forward pass of its second step's minibatch (after the
    step's first collective, ``_padded``'s; rank 0 goes on into FSDP's gathers)."""

    FAULT: type[Exception] = ValueError

    def _minibatch(self, *args, **kwargs):
        self._in_minibatch = True
        try:
            return super()._minibatch(*args, **kwargs)
        finally:
            self._in_minibatch = False

    def _logprobs(self, model, *args, **kwargs):
        if self.rank == 1 and self.steps == 1 and getattr(self, "_in_minibatch", False) \
                and model is self.model:
            raise self.FAULT("injected fault in rank 1's forward")
        return super()._logprobs(model, *args, **kwargs)


class ValueErrorInForward(_FaultInForward):
    FAULT = ValueError


class NonFiniteInForward(_FaultInForward):
    """A NonFiniteStep seen only on rank 1, before the shared check."""
    FAULT = NonFiniteStep


class NonFiniteBeforeTheSharedCheck(RankTrainer):
    """Rank 1 raises ``NonFiniteStep`` in its second step's optimizer step, before the shared
    check (``_share_non_finite``): the step's only collective before it is the gradient
    norm's (a DTensor reduction), every group having been accumulated as a chunk."""

    def _share_non_finite(self, norm):
        if self.rank == 1 and self.steps == 1:
            raise NonFiniteStep("injected fault in rank 1's forward")  # (the same message)
        return super()._share_non_finite(norm)


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant, kind, how", [
    pytest.param("ValueErrorInForward", "ValueError", "train", id="value_error"),
    pytest.param("NonFiniteInForward", "NonFiniteStep", "accumulate", id="non_finite_streamed"),
    pytest.param("NonFiniteBeforeTheSharedCheck", "NonFiniteStep", "finish",
                 id="non_finite_before_the_shared_check"),
])
def test_a_rank_that_raises_mid_batch_fails_the_step_at_once(tiny_model, tmp_path, capfd,
                                                             variant, kind, how):
    """One typed error naming rank 1 and its error, raised while rank 0 had not answered
    (it waits in a collective rank 1 will not join, with an hour's timeout): every rank
    process is gone, nothing of the failed batch is exported or saved (the published v1 and
    the checkpoint as they were), no traceback printed, and the trainer refuses further work.
    ``how``: the fault in a whole-batch step, in a chunk (``accumulate``), or in the
    optimizer step of ``finish`` after every group was accumulated."""
    base = GRPOTrainer(tiny_model, TrainerConfig(lr=1e-3), tmp_path / "base", seed=0)
    out = tmp_path / "run"
    tr = ShardedTrainer(tiny_model, TrainerConfig(lr=1e-3), out, seed=0, world_size=2,
                        timeout_s=HOUR, rank_class=f"{__name__}:{variant}")
    try:
        assert tr.timeout_s == HOUR
        tr._train(_batch(base, version=1))
        v1 = tr._export(1)
        published = _weights(v1)
        tr._save(out / "checkpoint")
        saved = sorted((p.relative_to(out), p.stat().st_mtime_ns)
                       for p in (out / "checkpoint").rglob("*"))
        capfd.readouterr()
        second = _batch(base, version=2)
        if how == "finish":
            tr._accumulate(second)  # no fault yet: the step's rows, no optimizer step
        with pytest.raises(RankLost) as info:
            if how == "accumulate":
                tr._accumulate(_chunks(second)[0])
            elif how == "finish":
                tr._finish_step(second)
            else:
                tr._train(second)
        message = str(info.value)
        assert re.fullmatch(rf"trainer rank 1: {kind}: injected fault in rank 1's forward "
                            r"\(rank\(s\) 0 had not answered\)", message), message
        assert all(p.exitcode is not None for p in tr.procs)
        assert "Traceback" not in capfd.readouterr().err
        assert not (out / "weights" / "v2").exists()
        assert sorted(p.name for p in (out / "weights").iterdir()) == ["v1"]
        after = _weights(v1)
        assert after.keys() == published.keys()
        assert all(torch.equal(after[k], published[k]) for k in published)
        assert sorted((p.relative_to(out), p.stat().st_mtime_ns)
                      for p in (out / "checkpoint").rglob("*")) == saved
        assert not [p for p in out.rglob("*") if ".tmp-" in p.name]
        with pytest.raises(RankLost, match="stopped"):
            tr._export(2)
    finally:
        tr.close()
