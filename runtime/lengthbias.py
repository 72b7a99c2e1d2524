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

``length_bias_of_counts`` takes the two samples as histograms of integer lengths (token counts)
instead of lists: the runtime keeps running histograms, so that its once-a-step figures cost
O(distinct lengths), not O(samples so far) (``runtime.accounting.LengthLog``). It returns the
same floats as ``length_bias`` on the listed samples (see its docstring for why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def length_bias_of_counts(trained: Mapping[int, int], admitted: Mapping[int, int]) -> LengthBias:
    """``length_bias`` of two samples of integer lengths given as histograms {length: samples}.

    The same floats as ``length_bias`` on the samples listed out, bit for bit, while each
    sample's token total and size are below 2**53 (so that float64 holds every partial sum and
    count exactly): ``length_bias``'s mean is numpy's float64 sum (exact for integers below
    2**53, in any summation order) divided by the size, one correctly rounded division, which
    is what ``total / size`` on Python integers gives; its ECDF values are counts divided by
    the size, here the same counts (cumulative histogram counts) by the same division; the KS
    maximum is taken over the same set of points, every observed length (a length observed k
    times is k equal grid points there, one here: the same maximum). Raises ``ValueError`` for
    a length that is not an integer >= 0 or a count that is not an integer >= 0."""
    for name, hist in (("trained", trained), ("admitted", admitted)):
        for n, c in hist.items():
            if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
                    and isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 0):
                raise ValueError(f"length_bias_of_counts: {name} must map lengths >= 0 to "
                                 f"counts >= 0 (got {n!r}: {c!r})")
    nt, na = sum(trained.values()), sum(admitted.values())
    st = sum(n * c for n, c in trained.items())
    sa = sum(n * c for n, c in admitted.items())
    t_mean = st / nt if nt else float("nan")
    a_mean = sa / na if na else float("nan")
    ratio = t_mean / a_mean if nt and na and a_mean > 0 else float("nan")
    ks = float("nan")
    if nt and na:
        grid = sorted({n for n, c in trained.items() if c} | {n for n, c in admitted.items() if c})
        ft = np.cumsum(np.array([trained.get(n, 0) for n in grid], dtype=np.int64)) / nt
        fa = np.cumsum(np.array([admitted.get(n, 0) for n in grid], dtype=np.int64)) / na
        ks = float(np.max(np.abs(ft - fa)))
    return LengthBias(ratio=ratio, ks=ks, trained_mean=t_mean, admitted_mean=a_mean,
                      trained=int(nt), admitted=int(na))
