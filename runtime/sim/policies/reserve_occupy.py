"""Reserve–Occupy: the project's own controller (``reserve_occupy.StalenessController``).

Source: the protocol of /work/shared/reference/reserve-occupy-blog.zh.txt (PSRL's blog, part 3),
as corrected in /work/shared/PROTOCOL.md and implemented in ``reserve_occupy/``. The unit is one
GRPO group with one slot (source 7.4); with partial rollout the group keeps the version stamped
at reservation (7.1), whatever versions later decode it.

This module only translates simulator events into controller calls and back; every decision
(whether to admit, where a finished group goes, which batch is ready, what oversampling aborts)
is the controller's:

* L1: while the rollout has a free slot, ``reserve`` the next group; ``None`` means wait.
  (PSRL admits against the engines' free concurrency in the same way.)
* a group finished: ``occupy``; reservations the closing rule aborted are stopped (L2).
* trainer idle: ``consume``; the batch is the consumed buffer's groups.
* new weights live: ``publish``.
"""

from __future__ import annotations

from reserve_occupy import Config, StalenessController

from ..core import Group
from .base import Policy, members


class ReserveOccupy(Policy):
    name = "reserve_occupy"
    label = "Reserve–Occupy"
    source = "reserve_occupy.StalenessController (this project); PSRL blog part 3"
    bounded = True

    def __init__(self, eta: int, capacity: int | None = None, check_every: int = 0) -> None:
        super().__init__(eta)
        self.capacity = capacity
        self.check_every = check_every  # run the controller's invariant check every N ops
        self.controller: StalenessController = None  # type: ignore[assignment]
        self._groups: dict[int, Group] = {}
        self._ops = 0

    def attach(self, sim) -> None:
        super().attach(sim)
        self.controller = StalenessController(Config(
            max_staleness=self.eta, batch_size=self.batch_size, capacity=self.capacity))

    def _tick(self) -> None:
        if self.check_every:
            self._ops += 1
            if self._ops % self.check_every == 0:
                self.controller.check()

    def admit(self) -> None:
        sim, ctl = self.sim, self.controller
        while sim.rollout_has_room():
            gid = len(sim.groups)  # the id the next admitted group will get
            reservation = ctl.reserve(gid)
            if reservation is None:
                return
            group = sim.admit(v_tag=reservation.v_traj)
            self._groups[group.gid] = group
            self._tick()

    def on_group_done(self, group: Group) -> None:
        placement = self.controller.occupy(group.gid)
        for unit in placement.aborted:  # batch-level oversampling closed its slot
            self.sim.abort(self._groups.pop(unit))
        self._tick()

    def take_batch(self):
        batch = self.controller.consume()
        if batch is None:
            return None
        self._tick()
        return members([self._groups.pop(u) for u in batch.unit_ids])

    def on_publish(self, version: int) -> None:
        published = self.controller.publish()
        if published != version:
            raise AssertionError(f"controller at version {published}, simulator at {version}")

    def settings(self) -> dict:
        return {"eta": self.eta, "capacity": self.capacity or self.batch_size,
                "unit": "GRPO group", "admission": "reserve while an engine slot is free"}

    def describe_state(self) -> str:
        return self.controller.snapshot().render().replace("\n", " | ")
