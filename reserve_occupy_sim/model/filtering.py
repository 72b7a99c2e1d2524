"""Reward filtering (DAPO-style dynamic sampling): which finished groups carry no gradient.

A GRPO group whose rewards are all equal (every answer right, or every answer wrong) has zero
advantage everywhere, so it contributes no gradient. DAPO's "dynamic sampling" discards such
groups and samples more; some frameworks do that, others train them with zero advantage. The
simulator only decides *which* groups are degenerate; each policy handles them as its source does.

The model (an assumption, documented in docs/simulator.md):

* ``rate`` is the mean probability that a group has no gradient (0 turns filtering off).
* The probability depends on the group's difficulty, read from its response lengths: hard
  problems give long answers and loops cut at the cap, and are the ones every sample gets wrong.
  With ``z_g`` the standardised mean log response length of group ``g`` over the workload,
  ``p_g = min(1, c * exp(skew * z_g))`` with ``c`` chosen so that the mean of ``p_g`` is ``rate``.
  ``skew > 0`` puts the degenerate groups among the long ones (all wrong), ``skew < 0`` among the
  short ones (all right: an easy data set late in training), ``skew = 0`` makes it independent of
  length.
* The outcome of a group that rolls out workload position ``k`` is ``u_k < p_{k mod N}`` where
  ``u_k`` is the ``k``-th draw of ``numpy.random.default_rng(seed)``. ``k`` is the admission
  index for a policy that admits in workload order, and the prompt the policy chose for one that
  admits with ``spec`` (tinker's requeue, the clairvoyant schedule, Reserve–Occupy's ``retry``),
  so every policy sees the same outcome for the same prompt, and a prompt rolled out again gets
  the outcome it had (the simulator passed the admission index until issue 38's regime map
  showed tinker filtering other prompts' outcomes: tests/sim/test_filter_follows_the_prompt.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .workload import Workload


class FilterError(ValueError):
    """A reward-filter parameter is out of range; the message names it."""


@dataclass(frozen=True)
class RewardFilter:
    """Parameters of the no-gradient outcome (see the module docstring)."""

    rate: float
    skew: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if (isinstance(self.rate, bool) or not isinstance(self.rate, (int, float))
                or not 0.0 <= self.rate < 1.0):
            raise FilterError(f"filter rate must be a number in [0, 1), got {self.rate!r}")
        if (isinstance(self.skew, bool) or not isinstance(self.skew, (int, float))
                or not math.isfinite(self.skew) or abs(self.skew) > 10):
            raise FilterError(f"filter skew must be a number in [-10, 10], got {self.skew!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise FilterError(f"filter seed must be an integer, got {self.seed!r}")

    def probabilities(self, workload: Workload) -> np.ndarray:
        """``p_g`` for every group of the workload (mean ``rate``, each in [0, 1])."""
        n = len(workload)
        if self.rate == 0.0:
            return np.zeros(n)
        logs = np.array([np.log(g.response_lens).mean() for g in workload.groups])
        spread = logs.std()
        z = (logs - logs.mean()) / spread if spread > 0 else np.zeros(n)
        w = np.exp(self.skew * z)
        # mean(min(1, c*w)) grows monotonically in c: bisect for the c that gives `rate`
        lo, hi = 0.0, 1.0 / w.min()
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if np.minimum(1.0, mid * w).mean() < self.rate:
                lo = mid
            else:
                hi = mid
        return np.minimum(1.0, hi * w)

    def bind(self, workload: Workload) -> FilterOutcomes:
        return FilterOutcomes(self, workload)

    def to_json(self) -> dict:
        return {"rate": self.rate, "skew": self.skew, "seed": self.seed}


class FilterOutcomes:
    """The outcomes for one workload: ``no_gradient(k)`` for a group of workload position k."""

    _BLOCK = 4096

    def __init__(self, spec: RewardFilter, workload: Workload) -> None:
        self.spec = spec
        self.p = spec.probabilities(workload)
        self._rng = np.random.default_rng(spec.seed)
        self._u = np.empty(0)

    def no_gradient(self, k: int) -> bool:
        # Draws are made in fixed blocks from one stream, so u_k does not depend on the order
        # in which outcomes are asked for.
        while k >= len(self._u):
            self._u = np.concatenate([self._u, self._rng.random(self._BLOCK)])
        return bool(self._u[k] < self.p[k % len(self.p)])
