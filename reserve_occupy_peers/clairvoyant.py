"""A clairvoyant, strictly bounded, drop-free schedule: the achievable side of the limit.

Source: none; it is a reference like ``synchronous`` and ``unbounded``, written for the
clairvoyant limit of docs/sim/bound.md (``reserve_occupy_sim/studies/bound.py``). It
reads every group's lengths from the workload in advance, which no real controller can.

Every admitted group gets a *deadline*: the version it was admitted at plus ``eta`` (its first
decode step is at that version or later, so training it by its deadline keeps its staleness
within ``eta``). The schedule keeps the deadlines feasible at all times (earliest-deadline-first
on B groups per step), so it never drops, aborts or overruns:

* L1: admit the next group while an engine slot is free and the untrained admitted groups are
  fewer than ``B`` times the batches still to be taken up to the new group's deadline; with
  ``max_running`` it also stops while that many requests are decoding (a clairvoyant throttle
  that keeps stragglers' decode steps short). With ``start="longest"`` it admits every group
  the deadlines allow at once, whether or not slots are free, and queues them longest first
  (the next groups of the workload, ordered by their longest member): at η = 1 each batch
  waits for a length-cap straggler, and one queued behind its batch's other groups starts
  about a minute late (docs/sim/bound.md, "What sets the period at η = 1").
* L3: a step takes every group due at it (it waits until they have finished), then as many
  finished groups as the later deadlines require, then fills up to ``B`` with finished groups.
  ``fill="long"`` fills with the longest finished groups first (the clairvoyant choice: long
  answers leave the window early), ``fill="short"`` with the shortest, ``fill="fifo"`` in
  finishing order. It never waits for more than it needs.

No-gradient groups (reward filtering) are filtered, as the source of every bounded framework
with dynamic sampling does.
"""

from __future__ import annotations

from .api import Group, Policy
from .base import members

FILLS = ("long", "short", "fifo")
STARTS = ("fifo", "longest")


class Clairvoyant(Policy):
    name = "clairvoyant"
    label = "clairvoyant (EDF)"
    source = "reference: knows every length in advance; earliest-deadline-first on B per step"
    bounded = True

    def __init__(self, eta: int, fill: str = "long", max_running: int | None = None,
                 start: str = "fifo") -> None:
        super().__init__(eta)
        if fill not in FILLS:
            raise ValueError(f"clairvoyant: fill must be one of {FILLS}, got {fill!r}")
        if start not in STARTS:
            raise ValueError(f"clairvoyant: start must be one of {STARTS}, got {start!r}")
        if start == "longest" and max_running is not None:
            raise ValueError("clairvoyant: start='longest' admits regardless of running "
                             "requests; max_running applies to start='fifo' only")
        if max_running is not None and (isinstance(max_running, bool)
                                        or not isinstance(max_running, int) or max_running < 1):
            raise ValueError(f"clairvoyant: max_running must be an int >= 1 or None, "
                             f"got {max_running!r}")
        self.fill = fill
        self.max_running = max_running
        self.start = start

    def attach(self, sim) -> None:
        super().attach(sim)
        self._untrained: list[Group] = []  # admitted, not trained or filtered, by deadline
        self._order = 0  # finishing order, for fill="fifo"
        self._finished_at: dict[int, int] = {}
        self._cursor = 0  # start="longest": the next workload index not admitted yet

    def _deadline(self, group: Group) -> int:
        return group.v_tag + self.eta

    def _steps_left(self) -> int:
        """Batches still to be taken at versions ``version .. version + eta``."""
        sim = self.sim
        taken_now = len(sim.ledger.batches) > sim.version  # this version's batch is in training
        return self.eta + (0 if taken_now else 1)

    def admit(self) -> None:
        sim = self.sim
        if self.start == "longest":
            self._admit_longest_first()
            return
        while sim.rollout_has_room():
            if len(self._untrained) + 1 > self.batch_size * self._steps_left():
                return
            if self.max_running is not None:
                running = sum(i.k for i in sim.instances)
                if running >= self.max_running:
                    return
            self._untrained.append(sim.admit())

    def _admit_longest_first(self) -> None:
        sim = self.sim
        if sim.paused:
            return
        room = self.batch_size * self._steps_left() - len(self._untrained)
        if room <= 0:
            return
        groups = sim.workload.groups
        n = len(groups)
        nxt = range(self._cursor, self._cursor + room)
        for i in sorted(nxt, key=lambda i: (-max(groups[i % n].response_lens), i)):
            self._untrained.append(sim.admit(spec=i))
        self._cursor += room

    def on_group_done(self, group: Group) -> None:
        if group.no_grad:
            self.sim.filter(group)
            self._untrained.remove(group)
            return
        self._order += 1
        self._finished_at[group.gid] = self._order

    def _fill_key(self, group: Group):
        if self.fill == "long":
            return -max(group.spec.response_lens)
        if self.fill == "short":
            return max(group.spec.response_lens)
        return self._finished_at[group.gid]

    def take_batch(self):
        sim, B = self.sim, self.batch_size
        version = sim.version
        untrained = self._untrained
        # Earliest-deadline-first: after this step at most B*k untrained groups may have
        # deadlines <= version + k (k >= 0), since only k steps remain to train them.
        finished = sorted((g for g in untrained if g.done),
                          key=lambda g: (self._deadline(g), self._fill_key(g), g.gid))
        chosen: list[Group] = []
        taken: set[int] = set()
        for k in range(self.eta + 1):
            last = version + k
            due = sum(1 for g in untrained if self._deadline(g) <= last)
            have = sum(1 for g in chosen if self._deadline(g) <= last)
            short = due - B * k - have
            if short <= 0:
                continue
            pool = [g for g in finished if self._deadline(g) <= last and g.gid not in taken]
            if len(pool) < short or len(chosen) + short > B:
                return None  # a group that must train now is still decoding: wait for it
            for g in pool[:short]:
                chosen.append(g)
                taken.add(g.gid)
        rest = sorted((g for g in finished if g.gid not in taken),
                      key=lambda g: (self._fill_key(g), self._deadline(g), g.gid))
        if len(chosen) + len(rest) < B:
            return None
        batch = chosen + rest[: B - len(chosen)]
        gone = {g.gid for g in batch}
        self._untrained = [g for g in untrained if g.gid not in gone]
        return members(batch)

    def settings(self) -> dict:
        return {"eta": self.eta, "fill": self.fill, "max_running": self.max_running,
                "start": self.start, "knows_lengths": True}

    def describe_state(self) -> str:
        done = sum(1 for g in self._untrained if g.done)
        return f"{len(self._untrained)} untrained admitted groups, {done} finished"
