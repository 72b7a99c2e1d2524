"""Length bias: how the response lengths a run trained on differ from the lengths it admitted.

Dropping stale data, aborting reservations when an oversampled buffer closes, committing the
first n of a group's candidates and timing out stuck units all remove long answers more often
than short ones, so training sees a shorter distribution than the model produced. A controller
that gains throughput that way gains it by training shorter answers; this number sits next to
the throughput so that a reader can tell.

Two numbers, from two samples of response lengths (tokens, one per trajectory):

* ``ratio`` -- mean trained length / mean admitted length (1.0: no shift in the mean; < 1:
  training is biased toward short answers);
* ``ks`` -- the two-sample Kolmogorov–Smirnov distance, ``sup_x |F_trained(x) - F_admitted(x)|``
  of the empirical distribution functions (0: the same distribution; 1: disjoint).

The KS distance is computed here with numpy (sort both samples, evaluate both ECDFs at every
observed length): scipy is not a dependency of this project, and the statistic alone, without a
p-value, is a few lines. Pure functions, no state: the simulator
(``reserve_occupy_sim/model/metrics.py``) and the runtime can both call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LengthBias:
    """Trained against admitted response lengths (see the module docstring)."""

    ratio: float  # mean trained / mean admitted; nan when either sample is empty
    ks: float  # two-sample KS distance in [0, 1]; nan when either sample is empty
    trained_mean: float
    admitted_mean: float
    trained: int  # sample sizes
    admitted: int

    def to_json(self) -> dict:
        def num(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        return {"ratio": num(self.ratio), "ks": num(self.ks),
                "trained_mean": num(self.trained_mean), "admitted_mean": num(self.admitted_mean),
                "trained": self.trained, "admitted": self.admitted}


def ks_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sample Kolmogorov–Smirnov statistic ``sup_x |F_a(x) - F_b(x)|`` (nan if a sample is
    empty). Ties are handled by evaluating both right-continuous ECDFs at every observed value."""
    x = np.sort(np.asarray(a, dtype=np.float64))
    y = np.sort(np.asarray(b, dtype=np.float64))
    if x.size == 0 or y.size == 0:
        return float("nan")
    grid = np.concatenate([x, y])
    fx = np.searchsorted(x, grid, side="right") / x.size
    fy = np.searchsorted(y, grid, side="right") / y.size
    return float(np.max(np.abs(fx - fy)))


def length_bias(trained: Sequence[float], admitted: Sequence[float]) -> LengthBias:
    """Length bias of the ``trained`` response lengths against the ``admitted`` ones."""
    t = np.asarray(trained, dtype=np.float64)
    a = np.asarray(admitted, dtype=np.float64)
    for name, sample in (("trained", t), ("admitted", a)):
        if sample.ndim != 1 or not np.all(np.isfinite(sample)) or np.any(sample < 0):
            raise ValueError(f"length_bias: {name} must be a flat sequence of lengths >= 0")
    t_mean = float(t.mean()) if t.size else float("nan")
    a_mean = float(a.mean()) if a.size else float("nan")
    ratio = t_mean / a_mean if t.size and a.size and a_mean > 0 else float("nan")
    return LengthBias(ratio=ratio, ks=ks_distance(t, a), trained_mean=t_mean,
                      admitted_mean=a_mean, trained=int(t.size), admitted=int(a.size))
