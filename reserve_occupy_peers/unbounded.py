"""Unbounded staleness: the throughput ceiling of the comparison (not a real framework).

Source: none; it is the limit every staleness control gives up throughput against ("no
staleness control"). L1 admits whenever an engine slot
is free, there is no L2, and L3 trains the first ``batch_size`` groups to finish, whatever their
age. Rollout never waits for the trainer and nothing is dropped, so its effective throughput is
what the hardware allows; its staleness grows without bound when rollout outpaces training.
"""

from __future__ import annotations

from collections import deque

from .api import Group, Policy
from .base import chunk_of, members


class Unbounded(Policy):
    name = "unbounded"
    label = "unbounded"
    source = "reference ceiling: no staleness bound (admit on free slot, FIFO by completion)"
    bounded = False
    uses_eta = False
    streams = True  # with a streaming trainer: chunks of the first finished groups

    def attach(self, sim) -> None:
        super().attach(sim)
        self._finished: deque[Group] = deque()

    def admit(self) -> None:
        while self.sim.rollout_has_room():
            self.sim.admit()

    def on_group_done(self, group: Group) -> None:
        if group.no_grad:
            self.sim.filter(group)
            return
        self._finished.append(group)

    def take_batch(self):
        if len(self._finished) < self.batch_size:
            return None
        return members([self._finished.popleft() for _ in range(self.batch_size)])

    def take_chunk(self, least: int, most: int):
        chosen = chunk_of(list(self._finished), least, most)
        if chosen is None:
            return None
        for _ in chosen:
            self._finished.popleft()
        return members(chosen)

    def settings(self) -> dict:
        return {"eta": None, "admission": "on free slot", "selection": "first finished"}

    def describe_state(self) -> str:
        return f"{len(self._finished)} finished groups waiting"
