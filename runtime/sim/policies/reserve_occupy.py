"""Reserve–Occupy: the project's own controller (``reserve_occupy.StalenessController``).

Source: the protocol of the PSRL authors' blog post "异步 RL 框架的 Staleness,究竟怎么控制(三)?"
(part 3), as corrected in spec/PROTOCOL.md (§7) and implemented in ``reserve_occupy/``. The
unit is one GRPO group with one slot (source 7.4); with partial rollout the group keeps the
version stamped at reservation (7.1), whatever versions later decode it.

This module only translates simulator events into controller calls and back; every decision
(whether to admit, where a finished group goes, which batch is ready, what oversampling aborts)
is the controller's:

* L1: while the rollout has a free slot, ``reserve`` the next group; ``None`` means wait.
  (PSRL admits against the engines' free concurrency in the same way.)
* a group finished: ``occupy``; reservations the closing rule aborted are stopped (L2).
  If it carries no gradient (reward filtering on), ``filter`` it right away (source 7.3): finished
  units of later buffers move forward into the hole and admission refills through ordinary
  reserves.
* trainer idle: ``consume``; the batch is the consumed buffer's groups.
* new weights live: ``publish``.
* ``stuck_timeout_s`` (source 7.2, off by default): while the idle trainer waits on a STUCK head
  buffer (no EMPTY slot, not READY), a clock runs; it restarts whenever the head stops being
  STUCK or is consumed. When it reaches the timeout the policy calls ``release_stuck`` and aborts
  the returned groups in the engines (L2 waste); finished groups of later buffers move forward and
  admission refills. Aborted groups are lost work, and since the ones still running when the clock
  expires are the long ones, the timeout biases training toward short answers.
"""

from __future__ import annotations

from reserve_occupy import BufferStatus, Config, StalenessController

from ..core import Group
from ..engine import INF
from .base import Policy, members


class ReserveOccupy(Policy):
    name = "reserve_occupy"
    label = "Reserve–Occupy"
    source = "reserve_occupy.StalenessController (this project); PSRL blog part 3"
    bounded = True

    def __init__(self, eta: int, capacity: int | None = None, check_every: int = 0,
                 stuck_timeout_s: float | None = None) -> None:
        super().__init__(eta)
        if stuck_timeout_s is not None and (isinstance(stuck_timeout_s, bool)
                                            or not isinstance(stuck_timeout_s, (int, float))
                                            or not stuck_timeout_s > 0):
            raise ValueError(f"reserve_occupy: stuck_timeout_s must be a number > 0 or None, "
                             f"got {stuck_timeout_s!r}")
        self.capacity = capacity
        self.check_every = check_every  # run the controller's invariant check every N ops
        self.stuck_timeout = stuck_timeout_s
        self.controller: StalenessController = None  # type: ignore[assignment]
        self._groups: dict[int, Group] = {}
        self._ops = 0
        self._stuck_since: float | None = None
        self.released: list[int] = []  # groups release_stuck aborted
        self.releases = 0  # release_stuck calls that aborted something
        self.release_log: list[tuple[float, float, int]] = []  # (when, stuck since, groups)

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
        if group.no_grad:
            removal = self.controller.filter(group.gid)
            self.sim.filter(self._groups.pop(group.gid))
            for unit in removal.aborted:
                self.sim.abort(self._groups.pop(unit))
            self._tick()

    def take_batch(self):
        batch = self.controller.consume()
        if batch is None:
            if self.stuck_timeout is not None:
                self._watch_stuck()
            return None
        self._tick()
        if self._stuck_since is not None:
            self._stuck_since = None
            self.sim.set_timer(INF)
        return members([self._groups.pop(u) for u in batch.unit_ids])

    def _head_stuck(self) -> bool:
        return self.controller.head_status is BufferStatus.STUCK

    def _watch_stuck(self) -> None:
        """The idle trainer found no READY head: run the 7.2 clock while the head is STUCK."""
        sim = self.sim
        if self._head_stuck():
            if self._stuck_since is None:
                self._stuck_since = sim.now
                sim.set_timer(sim.now + self.stuck_timeout)
        elif self._stuck_since is not None:
            self._stuck_since = None
            sim.set_timer(INF)

    def on_timer(self) -> None:
        since, self._stuck_since = self._stuck_since, None
        released = self.controller.release_stuck()  # [] unless the head is STUCK
        if released:
            self.releases += 1
            self.release_log.append((self.sim.now, since, len(released)))
        for unit in released:
            self.sim.abort(self._groups.pop(unit))
            self.released.append(unit)
        self._tick()

    def on_publish(self, version: int) -> None:
        published = self.controller.publish()
        if published != version:
            raise AssertionError(f"controller at version {published}, simulator at {version}")

    def settings(self) -> dict:
        out = {"eta": self.eta, "capacity": self.capacity or self.batch_size,
               "unit": "GRPO group", "admission": "reserve while an engine slot is free"}
        if self.stuck_timeout is not None:
            out.update(stuck_timeout_s=self.stuck_timeout, released_groups=len(self.released),
                       releases=self.releases)
        return out

    def describe_state(self) -> str:
        return self.controller.snapshot().render().replace("\n", " | ")
