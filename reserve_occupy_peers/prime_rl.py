"""prime-rl's orchestrator: ``max_off_policy_steps``, stale episodes voided in flight and in the
queue.

Source: PrimeIntellect-ai/prime-rl @ 559b44772e471d1538537b8805cc77f3824a5e64 (2026-08-21),
``src/prime_rl/orchestrator/dispatcher.py`` (group creation with ``policy_version_at_start``
470–489, ``fill_inflight`` 403ff., ``on_version_pending`` 367–399),
``src/prime_rl/orchestrator/train_sink.py`` (``add`` 127–136, ``_drop_stale`` 166–206,
``process_batch`` 340–368), ``src/prime_rl/orchestrator/orchestrator.py`` (``TARGET_LAG = 1``,
104; dispatch gate 970–993; ship-hold 662–676), ``src/prime_rl/orchestrator/utils.py``
(``min_fresh_version`` 51–54, ``episode_staleness`` 57–71) and
``packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py`` (``max_off_policy_steps``
default 8, 532; ``concurrency.max_inflight`` ceiling 1024, 434). PR #3313 (merged 2026-08-21)
made the queue sweep drop on in-queue staleness too.

Batch ``k`` (0-based here; prime-rl's ``step = k + 1``) trains on version ``k``.

* L1: one permit per episode up to ``max_inflight`` episodes (a whole group of ``group_size``
  episodes is admitted at once, stamped ``policy_version_at_start`` = the version now); no
  staleness gate on a dispatch, but the orchestrator's gate pauses new dispatch while
  ``lead = (step - 1) - policy.version > TARGET_LAG = 1``, where ``step`` is the batch being
  assembled.
* L3: finished groups join ``pending_batch`` in completion order. Before every readiness check
  (and for each freshly inserted group) the sink voids the queued episodes with
  ``policy.start < min_fresh = (step - 1) - max_off_policy_steps``; a batch is the first
  ``batch_size`` samples of the queue (FIFO), shipped once ``policy.version >= step - 1 -
  TARGET_LAG`` (the ship-hold). Shipped batches wait for the trainer in order.
* L2: ``on_version_pending`` cancels the in-flight groups with ``policy_version_at_start <
  min_fresh`` ("a compute saver; the sink's queue sweep is what guarantees the bound").

eta is ``max_off_policy_steps`` (shipped default 8): trained staleness ``(step - 1) -
policy.start <= eta``, queue time included. **Drops** (cancelled in flight, voided in the
queue). **Strict per episode.**

What differs from the shipped code, and why:
* batches are counted in groups: prime-rl counts samples (``batch_size`` samples, or a token
  budget) and may cut a group across two batches; with ``batch_size * group_size`` samples and
  whole groups arriving, a batch never cuts one, which this rule assumes;
* the concurrency controller (``max_inflight`` grown from a KV-capacity estimate, burst-capped
  per 5 s) is its ceiling, ``max_inflight`` (default 1024 episodes): the engines queue what
  they cannot run;
* the in-flight cancellation runs in ``on_publish``, after the sync (the rule API has no
  pre-sync hook; the engines are paused during the sync, so the same tokens are wasted);
* a batch is formed only when its ship-hold allows it (prime-rl may form it earlier and hold
  it; its staleness check is against the same ``step`` either way);
* zero-advantage samples are trained (prime-rl prunes their tokens from the loss, it does not
  filter groups): ``filters = False``.
"""

from __future__ import annotations

from collections import deque

from .api import Group, Policy, Trajectory
from .base import members

TARGET_LAG = 1  # orchestrator.py: hard-coded


class PrimeRl(Policy):
    name = "prime_rl"
    label = "prime-rl"
    source = ("PrimeIntellect-ai/prime-rl@559b4477 src/prime_rl/orchestrator/train_sink.py "
              "(_drop_stale), dispatcher.py (on_version_pending)")
    bounded = True
    filters = False

    def __init__(self, eta: int, max_inflight: int = 1024) -> None:
        super().__init__(eta)
        if isinstance(max_inflight, bool) or not isinstance(max_inflight, int) \
                or max_inflight < 1:
            raise ValueError(f"prime_rl: max_inflight must be an int >= 1, got "
                             f"{max_inflight!r}")
        self.max_inflight = max_inflight

    def attach(self, sim) -> None:
        super().attach(sim)
        if self.max_inflight < self.group_size:
            raise ValueError(f"prime_rl: max_inflight={self.max_inflight} episodes is less than "
                             f"one group ({self.group_size})")
        self.k = 0  # the batch being assembled (prime-rl's progress.step - 1)
        self.inflight_eps = 0  # episodes dispatched, not finished
        self._running: dict[int, Group] = {}  # dispatched, not finished (by gid)
        self.pending: deque[Group] = deque()  # pending_batch: finished groups, FIFO
        self.shipped: deque[list[Trajectory]] = deque()  # formed batches k, k+1 ...
        self.voided = 0  # groups dropped as stale (queue or arrival)
        self.cancelled = 0  # in-flight groups cancelled

    def _min_fresh(self) -> int:
        return self.k - self.eta  # (step - 1) - max_off_policy_steps

    def admit(self) -> None:
        sim = self.sim
        if self.k - sim.version > TARGET_LAG:  # the orchestrator's dispatch gate
            return
        while not sim.paused and self.inflight_eps + self.group_size <= self.max_inflight:
            group = sim.admit()  # policy_version_at_start = version now
            self._running[group.gid] = group
            self.inflight_eps += self.group_size

    def on_group_done(self, group: Group) -> None:
        del self._running[group.gid]
        self.inflight_eps -= self.group_size
        self.pending.append(group)
        self._assemble()

    def _sweep(self) -> None:
        """``_drop_stale``: void the queued groups older than ``min_fresh``."""
        low = self._min_fresh()
        stale = [g for g in self.pending if g.v_tag < low]
        if stale:
            self.voided += len(stale)
            self.pending = deque(g for g in self.pending if g.v_tag >= low)
            self.sim.drop(members(stale))

    def _assemble(self) -> None:
        """The sink: sweep the queue (on every inserted group and readiness check), then form
        the batches the ship-hold lets out."""
        self._sweep()
        while (self.sim.version >= self.k - TARGET_LAG  # ship-hold: v >= (step - 1) - LAG
               and len(self.pending) >= self.batch_size):
            batch = [self.pending.popleft() for _ in range(self.batch_size)]
            self.shipped.append(members(batch))
            self.k += 1
            self._sweep()

    def take_batch(self):
        self._assemble()
        if not self.shipped:
            return None
        return self.shipped.popleft()

    def on_publish(self, version: int) -> None:
        """``on_version_pending``: cancel in-flight groups that can no longer be fresh."""
        low = self._min_fresh()
        for g in [g for g in self._running.values() if g.v_tag < low]:
            self.sim.abort_group(g)
            del self._running[g.gid]
            self.inflight_eps -= self.group_size
            self.cancelled += 1
        self._assemble()

    def settings(self) -> dict:
        return {"eta": self.eta, "max_off_policy_steps": self.eta,
                "max_inflight": self.max_inflight, "TARGET_LAG": TARGET_LAG,
                "voided": self.voided, "cancelled_in_flight": self.cancelled,
                "unit of L3": "episode (whole groups here)"}

    def describe_state(self) -> str:
        return (f"k={self.k} inflight_eps={self.inflight_eps} pending={len(self.pending)} "
                f"shipped={len(self.shipped)}")
