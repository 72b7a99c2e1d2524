"""Checks of a finished run, computed from the ledger: each one can fail (tests show how).

* ``conservation`` -- every admitted trajectory has exactly one fate: trained once, aborted in
  flight (L2), dropped after finishing (L3), filtered (finished without gradient), or still live
  (queued, running, finished and waiting) when the run ended; nothing trained, dropped or
  filtered before it finished (with a streaming trainer: before its chunk was handed to the
  trainer); nothing vanished.
* ``filtering`` -- only groups without gradient are filtered, always whole; a policy that filters
  never trains a group without gradient.
* ``released`` -- every group a timeout released (Reserve–Occupy's ``release_stuck``) was aborted
  in the engines, with an abort record (L2 waste) for each of its trajectories.
* ``tokens`` -- the tokens the engines decoded (integrated in closed form) equal the sum of what
  every trajectory produced, so the closed-form engine and the accounting agree.
* ``batches`` -- every trained batch has exactly ``batch_size * group_size`` trajectories.
* ``staleness`` -- every trained trajectory has staleness in ``[0, eta]`` (bounded policies).
* ``deterministic`` -- the same inputs give the same result, bit for bit.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Callable

from .core import Simulator
from .engine import Request


class CheckFailed(AssertionError):
    """A run broke a property. ``check`` names it; ``detail`` says how."""

    def __init__(self, check: str, detail: str) -> None:
        self.check = check
        self.detail = detail
        super().__init__(f"check {check!r} failed: {detail}")


def _handed_times(batch) -> list[float]:
    """When each trajectory of ``batch`` reached the trainer: its chunk's time with a streaming
    trainer, the consume time otherwise."""
    if not batch.chunks:
        return [batch.t_consume] * len(batch.tids)
    times: list[float] = []
    for t, n in batch.chunks:
        times += [t] * n
    if len(times) != len(batch.tids):
        raise CheckFailed("conservation", f"batch {batch.index}: its chunks hold {len(times)} "
                                          f"trajectories, the batch {len(batch.tids)}")
    return times


def check_conservation(sim: Simulator) -> dict[str, int]:
    """Raise ``CheckFailed('conservation', ...)`` unless every admitted trajectory has exactly
    one fate; return the fate counts."""
    ledger = sim.ledger
    by_tid: dict[int, Request] = {}
    for req in ledger.requests:
        if req.tid in by_tid:
            raise CheckFailed("conservation", f"trajectory {req.tid} admitted twice")
        by_tid[req.tid] = req
    fates: Counter[int] = Counter()
    for batch in ledger.batches:
        handed = _handed_times(batch)
        for tid, t_handed in zip(batch.tids, handed):
            fates[tid] += 1
            req = by_tid.get(tid)
            if req is None:
                raise CheckFailed("conservation", f"batch {batch.index} trained trajectory "
                                                  f"{tid}, which was never admitted")
            if req.state != Request.FINISHED or not req.t_end <= t_handed:
                raise CheckFailed("conservation", f"batch {batch.index} trained trajectory {tid} "
                                                  f"before it finished")
    for tid, _ in ledger.aborted:
        fates[tid] += 1
        if tid not in by_tid:
            raise CheckFailed("conservation", f"aborted trajectory {tid} was never admitted")
    for tid in ledger.dropped:
        fates[tid] += 1
        req = by_tid.get(tid)
        if req is None or req.state != Request.FINISHED:
            raise CheckFailed("conservation", f"dropped trajectory {tid} had not finished")
    for tid in ledger.filtered:
        fates[tid] += 1
        req = by_tid.get(tid)
        if req is None or req.state != Request.FINISHED:
            raise CheckFailed("conservation", f"filtered trajectory {tid} had not finished")
    twice = [tid for tid, n in fates.items() if n > 1]
    if twice:
        raise CheckFailed("conservation", f"{len(twice)} trajectories have more than one fate "
                                          f"(trained/aborted/dropped/filtered), e.g. "
                                          f"{sorted(twice)[:5]}")
    live = Counter()
    for req in ledger.requests:
        if fates[req.tid]:
            continue
        if req.state == Request.ABORTED:
            raise CheckFailed("conservation", f"trajectory {req.tid} was stopped in the engine "
                                              f"but no abort was recorded")
        if getattr(req.group, "state", None) == "filtered":
            raise CheckFailed("conservation", f"trajectory {req.tid} belongs to a filtered "
                                              f"group but no filter was recorded")
        live[req.state] += 1
    counts = {"admitted": len(by_tid),
              "trained": sum(len(b.tids) for b in ledger.batches),
              "aborted": len(ledger.aborted), "dropped": len(ledger.dropped),
              "filtered": len(ledger.filtered), "live": sum(live.values())}
    if (counts["admitted"] != counts["trained"] + counts["aborted"] + counts["dropped"]
            + counts["filtered"] + counts["live"]):  # pragma: no cover - implied above
        raise CheckFailed("conservation", f"counts do not add up: {counts}")
    return counts


def check_filtering(sim: Simulator) -> dict[str, int]:
    """Only no-gradient groups are filtered, whole; a filtering policy trains none of them.
    Return counts of no-gradient groups: in all, filtered, trained, other (aborted, dropped or
    still live)."""
    ledger = sim.ledger
    by_tid = {r.tid: r for r in ledger.requests}
    filtered = set(ledger.filtered)
    groups = {by_tid[tid].group.gid: by_tid[tid].group for tid in filtered}  # type: ignore
    for group in groups.values():
        if not group.no_grad:
            raise CheckFailed("filtering", f"group {group.gid} was filtered but carries a "
                                           f"gradient")
        missing = [r.tid for r in group.requests if r.tid not in filtered]
        if missing:
            raise CheckFailed("filtering", f"group {group.gid} was filtered in part: "
                                           f"trajectories {missing[:4]} were not")
    trained_no_grad = {by_tid[t].group.gid for b in ledger.batches  # type: ignore[union-attr]
                       for t in b.tids if by_tid[t].group.no_grad}  # type: ignore[union-attr]
    if sim.policy.filters and trained_no_grad:
        raise CheckFailed("filtering", f"{type(sim.policy).__name__} filters, yet trained "
                                       f"{len(trained_no_grad)} groups without gradient, e.g. "
                                       f"{sorted(trained_no_grad)[:4]}")
    no_grad = sum(1 for g in sim.groups if g.no_grad)
    return {"no_gradient": no_grad, "filtered": len(groups), "trained": len(trained_no_grad),
            "other": no_grad - len(groups) - len(trained_no_grad)}


def check_released(sim: Simulator) -> int:
    """Groups the policy released on a timeout were aborted in the engines and recorded as
    L2 waste; return how many."""
    released = getattr(sim.policy, "released", None) or []
    recorded = {tid for tid, _ in sim.ledger.aborted}
    for gid in released:
        group = sim.groups[gid]
        if group.state != "aborted":
            raise CheckFailed("released", f"group {gid} was released by the timeout but is "
                                          f"{group.state} in the engines")
        missing = [r.tid for r in group.requests if r.tid not in recorded]
        if missing:
            raise CheckFailed("released", f"group {gid} was released but trajectories "
                                          f"{missing[:4]} have no abort record")
    return len(released)


def check_truncated(sim: Simulator) -> int:
    """Every trajectory a truncation cut (``Simulator.truncate``) finished with at most its
    planned response, its group ended DONE or FILTERED (never aborted), and it was cut once;
    return how many."""
    by_tid = {r.tid: r for r in sim.ledger.requests}
    seen: set[int] = set()
    for tid, planned, kept in sim.ledger.truncated:
        req = by_tid.get(tid)
        if req is None or tid in seen:
            raise CheckFailed("truncated", f"trajectory {tid} was truncated twice or never "
                                           f"admitted")
        seen.add(tid)
        if req.state != Request.FINISHED or not 0 <= kept <= planned or req.length != kept:
            raise CheckFailed("truncated", f"trajectory {tid} truncated to {kept} of {planned} "
                                           f"tokens is {req.state} with length {req.length}")
        if getattr(req.group, "state", None) not in ("done", "filtered"):
            raise CheckFailed("truncated", f"trajectory {tid}'s group is "
                                           f"{getattr(req.group, 'state', None)}")
    return len(seen)


def check_tokens(sim: Simulator, rel: float = 1e-6) -> None:
    """The engines' integrated token count equals the trajectories' own counts."""
    decoded = sum(inst.decoded for inst in sim.instances)
    produced = sum(sim.live_tokens(r) for r in sim.ledger.requests)
    if not math.isclose(decoded, produced, rel_tol=rel, abs_tol=1e-3 * len(sim.ledger.requests)):
        raise CheckFailed("tokens", f"engines decoded {decoded:.3f} tokens but trajectories hold "
                                    f"{produced:.3f} (difference {decoded - produced:.3f})")


def check_batches(sim: Simulator) -> None:
    want = sim.batch_size * sim.group_size
    for batch in sim.ledger.batches:
        if len(batch.tids) != want:
            raise CheckFailed("batches", f"batch {batch.index} has {len(batch.tids)} "
                                         f"trajectories, expected {want}")
        if len(set(batch.tids)) != len(batch.tids):
            raise CheckFailed("batches", f"batch {batch.index} holds a trajectory twice")
    if len(sim.ledger.batches) != sim.n_batches:
        raise CheckFailed("batches", f"{len(sim.ledger.batches)} batches trained, "
                                     f"expected {sim.n_batches}")


def check_staleness(sim: Simulator, eta: int) -> int:
    """Every trained trajectory has staleness in [0, eta]; return the largest seen."""
    worst = 0
    for batch in sim.ledger.batches:
        for tid, s in zip(batch.tids, batch.staleness):
            if s < 0 or s > eta:
                raise CheckFailed("staleness", f"batch {batch.index} (version {batch.version}) "
                                               f"trained trajectory {tid} with staleness {s}, "
                                               f"outside [0, {eta}]")
            worst = max(worst, s)
    return worst


def check_run(sim: Simulator) -> None:
    """All checks that apply to this run's policy."""
    check_conservation(sim)
    check_filtering(sim)
    check_released(sim)
    check_truncated(sim)
    check_tokens(sim)
    check_batches(sim)
    if sim.policy.bounded:
        check_staleness(sim, sim.policy.eta)


def check_deterministic(run: Callable[[], dict]) -> None:
    """Run twice; the JSON-ready results must be identical."""
    first = json.dumps(run(), sort_keys=True)
    second = json.dumps(run(), sort_keys=True)
    if first != second:
        a, b = json.loads(first), json.loads(second)
        keys = sorted(k for k in a if a[k] != b.get(k))
        raise CheckFailed("deterministic", f"two runs with the same inputs differ in {keys[:6]}")
