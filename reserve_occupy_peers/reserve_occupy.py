"""Reserve–Occupy: the project's own controller (``reserve_occupy.StalenessController``).

Source: the protocol of the PSRL authors' blog post "异步 RL 框架的 Staleness,究竟怎么控制(三)?"
(part 3), as corrected in spec/PROTOCOL.md (§7) and implemented in ``reserve_occupy/``. The
unit is one GRPO group with one slot (§6.4); with partial rollout the group keeps the
version stamped at reservation (§6.1), whatever versions later decode it.

This module only translates simulator events into controller calls and back; every decision
(whether to admit, where a finished group goes, which batch is ready, what oversampling aborts)
is the controller's:

* L1: while the rollout has a free slot, ``reserve`` the next group; ``None`` means wait.
  (PSRL admits against the engines' free concurrency in the same way.)
* a group finished: ``occupy``; reservations the closing rule aborted are stopped (L2).
  If it carries no gradient (reward filtering on), ``filter`` it right away (§6.3): finished
  units of later buffers move forward into the hole and admission refills through ordinary
  reserves.
* trainer idle: ``consume``; the batch is the consumed buffer's groups.
* new weights live: ``publish``.
* ``stuck_timeout_s`` (§6.2, off by default): while the idle trainer waits on a STUCK head
  buffer (no EMPTY slot, not READY), a clock runs; it restarts whenever the head stops being
  STUCK or is consumed. When it reaches the timeout the policy calls ``release_stuck`` and aborts
  the returned groups in the engines (L2 waste); finished groups of later buffers move forward and
  admission refills. Aborted groups are lost work, and since the ones still running when the clock
  expires are the long ones, the timeout biases training toward short answers. With the timeout
  on, the progress rule of ``reserve_occupy.stuck`` applies as in the driver: a release with no
  placement since the previous one doubles the next wait, and from the third such release in a
  row it also aborts the groups in flight since before the previous release, whatever their
  buffer (``escalated``; spec/PROTOCOL.md §6.2, docs/runtime.md "Progress guarantees").
* ``stuck_action`` / ``stuck_threshold`` (the release's options, spec/PROTOCOL.md §6.2; need the
  timeout; ``release`` by default): when at most ``stuck_threshold`` of the head's B groups are
  missing, ``retry`` aborts the head's groups as the release does and re-admits the same prompts
  before any new one (``retried``); ``truncate`` finishes them with what they decoded so far
  (``Simulator.truncate``: nothing wasted, the cut responses train; ``truncated``).


Streaming (``streaming=True``, the protocol's ``Config.streaming``; off by default): with a
streaming trainer (``cost.train.chunk_groups``) the idle trainer calls ``stream``, which hands
every OCCUPIED unit of the head buffer not handed yet (they can no longer leave it). The policy
holds them until they make a chunk of at least ``min(chunk_groups, still lacking)`` groups (the
same rule as NeMo-RL's ``min_groups_for_streaming_train``) and hands them to the trainer; when
``consume`` returns the READY head buffer, the units of its batch not handed yet are the step's
last chunk. ``chunk_exact`` hands chunks of exactly ``chunk_groups`` (the last one: the rest),
as PSRL's fine-grain overlap emits them (``wait_for_training_chunk``). Without a streaming
trainer the option does nothing.

Oversampling and the extension prototypes (all off by default; the source protocol otherwise):

* ``capacity`` C > B: batch-level oversampling (§6.6); reservations a closing READY buffer
  cannot relocate are aborted (L2). Group-level oversampling (§6.5) is the simulator's
  ``candidates`` (``core.Simulator``), which this policy needs no option for.
* ``progress_close``: progress-aware closure. When the controller aborts reservations (a READY
  buffer closed), the policy stops the groups that *decoded least* instead: for each aborted unit
  X whose group gX has decoded tokens, the RESERVED unit Y (still running) with the fewest decoded
  tokens and ``v_traj(Y) <= v_gen(gX)`` is found; if gY decoded less than gX, gY is stopped and gX
  takes Y's identity in the controller. Because gX's oldest decoding version is no older than
  Y's stamp, training gX in Y's place keeps its staleness <= eta (the bound is checked).
* ``idle_surplus``: idle-capacity oversampling (needs C > B). A reservation that makes its buffer
  hold more than B units is kept only if the group's candidates fit in engine slots that are free
  right now; otherwise it is handed back (``abort`` before anything ran: no waste) and admission
  waits. Base (non-surplus) groups join the engine queue ahead of surplus ones.
* ``head_priority``: deadline-aware engine priority. Groups reserved into the head buffer (the
  next to train) join the engine queue ahead of everything else (vLLM's priority scheduling
  without preemption).
* ``lookahead`` N > 0: length-aware admission. Among the next N prompts of the workload the
  policy admits the one whose earlier-epoch mean response length (``GroupSpec.hint``) is the
  largest, so long groups get the most of their staleness window; the rest wait their turn.
"""

from __future__ import annotations

import math

from reserve_occupy import BufferStatus, Config, SlotState, StalenessController, UnitState
from reserve_occupy.config import STUCK_ACTIONS
from reserve_occupy.stuck import StuckTimeouts

from .api import INF, Group, Policy
from .base import members


class ReserveOccupy(Policy):
    name = "reserve_occupy"
    label = "Reserve–Occupy"
    source = "reserve_occupy.StalenessController (this project); PSRL blog part 3"
    bounded = True

    def __init__(self, eta: int, capacity: int | None = None, check_every: int = 0,
                 stuck_timeout_s: float | None = None, progress_close: bool = False,
                 idle_surplus: bool = False, head_priority: bool = False,
                 lookahead: int = 0, streaming: bool = False,
                 chunk_exact: bool = False, stuck_action: str = "release",
                 stuck_threshold: int | None = None) -> None:
        super().__init__(eta)
        if stuck_action not in STUCK_ACTIONS:
            raise ValueError(f"reserve_occupy: stuck_action must be one of "
                             f"{', '.join(STUCK_ACTIONS)}, got {stuck_action!r}")
        if stuck_action != "release" and stuck_timeout_s is None:
            raise ValueError(f"reserve_occupy: stuck_action {stuck_action!r} acts at the STUCK "
                             f"timeout: set stuck_timeout_s")
        self.stuck_action = stuck_action
        self.stuck_threshold = stuck_threshold  # validated by the controller's Config
        self._retry: list[int] = []  # retry: prompts (workload indices) to re-admit first
        self._fresh = 0  # retry: the next workload index never admitted
        self.retried: list[int] = []  # groups a retry aborted (their prompts re-admitted)
        self.truncated: list[int] = []  # groups a truncate finished early
        for name, flag in (("progress_close", progress_close), ("idle_surplus", idle_surplus),
                           ("head_priority", head_priority), ("streaming", streaming),
                           ("chunk_exact", chunk_exact)):
            if not isinstance(flag, bool):
                raise ValueError(f"reserve_occupy: {name} must be a bool, got {flag!r}")
        if isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 0:
            raise ValueError(f"reserve_occupy: lookahead must be an int >= 0, got {lookahead!r}")
        if idle_surplus and capacity is None:
            raise ValueError("reserve_occupy: idle_surplus needs a capacity > batch size")
        if chunk_exact and not streaming:
            raise ValueError("reserve_occupy: chunk_exact needs streaming")
        if streaming and stuck_timeout_s is not None:
            raise ValueError("reserve_occupy: stuck_timeout_s with streaming is not modelled")
        self.streaming = streaming
        self.streams = streaming
        self.chunk_exact = chunk_exact
        self._held: list[int] = []  # streamed units not yet handed to the trainer
        self._handed: set[int] = set()  # units of the open step handed to the trainer
        self.progress_close = progress_close
        self.idle_surplus = idle_surplus
        self.head_priority = head_priority
        self.lookahead = lookahead
        self._unit: dict[int, int] = {}  # group id -> controller unit id (they differ after swaps)
        self._vtraj: dict[int, int] = {}  # controller unit id -> v_traj of its reservation
        self._next_unit = 0
        self._cursor = 0  # lookahead: first workload index not yet admitted
        self._taken: set[int] = set()  # lookahead: indices admitted ahead of the cursor
        self.swaps = 0  # progress_close: aborts redirected to a group that decoded less
        self.handed_back = 0  # idle_surplus: surplus reservations returned unused
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
        self.timeouts = StuckTimeouts(math.inf if stuck_timeout_s is None
                                      else float(stuck_timeout_s))
        self._flying: dict[int, float] = {}  # unit -> admission time, in admission order
        self.escalated: list[int] = []  # groups a fruitless release aborted outside the head

    def attach(self, sim) -> None:
        super().attach(sim)
        extra = {"streaming": True} if self.streaming else {}  # the source protocol otherwise
        if self.stuck_action != "release":
            extra.update(stuck_action=self.stuck_action, stuck_threshold=self.stuck_threshold)
        self.controller = StalenessController(Config(
            max_staleness=self.eta, batch_size=self.batch_size, capacity=self.capacity, **extra))

    def _tick(self) -> None:
        if self.check_every:
            self._ops += 1
            if self._ops % self.check_every == 0:
                self.controller.check()

    def admit(self) -> None:
        sim, ctl = self.sim, self.controller
        while sim.rollout_has_room():
            unit = self._next_unit  # unit ids are the controller's; a group id is the sim's
            reservation = ctl.reserve(unit)
            if reservation is None:
                return
            self._next_unit += 1
            priority = False
            if self.idle_surplus or self.head_priority:
                surplus = self._surplus(reservation.slot.buffer)
                if surplus and sim.free_slots() < sim.candidates:
                    ctl.abort(unit)  # nothing ran: handing it back costs nothing
                    self.handed_back += 1
                    self._tick()
                    return
                priority = (self.idle_surplus and not surplus) or (
                    self.head_priority and reservation.slot.buffer == ctl.head)
            if self._retry:  # retry: a released prompt goes again, before any new one
                spec: int | None = self._retry.pop(0)
            elif self.stuck_action == "retry" and not self.lookahead:
                spec, self._fresh = self._fresh, self._fresh + 1
            else:
                spec = self._next_prompt()
            group = sim.admit(v_tag=reservation.v_traj, spec=spec, priority=priority)
            group.tag = group.gid if spec is None else spec  # its workload index
            self._groups[unit] = group
            self._unit[group.gid] = unit
            self._vtraj[unit] = reservation.v_traj
            if self.stuck_timeout is not None:
                self._flying[unit] = sim.now
            self._tick()

    def _surplus(self, v_buffer: int) -> bool:
        """Does buffer ``v_buffer`` hold more than batch_size units (the last one is surplus)?"""
        if not self.idle_surplus:
            return False
        for view in self.controller.snapshot().buffers:
            if view.v_buffer == v_buffer:
                return sum(1 for st, _ in view.slots
                           if st is not SlotState.EMPTY) > self.batch_size
        return False

    def _next_prompt(self) -> int | None:
        """Length-aware admission: the workload index to admit next (None: the next in order)."""
        if not self.lookahead:
            return None
        groups = self.sim.workload.groups
        n = len(groups)
        while self._cursor in self._taken:
            self._taken.discard(self._cursor)
            self._cursor += 1
        window = [i for i in range(self._cursor, self._cursor + self.lookahead)
                  if i not in self._taken]
        if any(groups[i % n].hint is None for i in window):
            raise ValueError("reserve_occupy: lookahead needs earlier-epoch length hints "
                             "(GroupSpec.hint); this workload has none")
        best = max(window, key=lambda i: (groups[i % n].hint, -i))
        if best == self._cursor:
            self._cursor += 1
        else:
            self._taken.add(best)
        return best

    def _stop(self, units) -> None:
        """Stop the groups of the units the controller aborted (L2); with ``progress_close``,
        redirect each abort to a running group that decoded less (see the module docstring)."""
        victims = []
        for unit in units:
            self._flying.pop(unit, None)
            group = self._groups.pop(unit)
            del self._unit[group.gid]
            victims.append((unit, group))
        for unit, group in victims:
            if self.progress_close and group.v_gen >= 0:
                swap = self._least_decoded(group)
                if swap is not None:
                    other_unit, other = swap
                    self._groups[other_unit] = group  # group takes the other's reservation
                    self._unit[group.gid] = other_unit
                    del self._unit[other.gid]
                    self.swaps += 1
                    group = other
            self.sim.abort_group(group)

    def _least_decoded(self, group: Group):
        sim = self.sim
        mine = sum(sim.live_tokens(r) for r in group.requests)
        best, best_tokens = None, mine
        for unit, other in self._groups.items():
            if other.state != Group.RUNNING or self._vtraj[unit] > group.v_gen:
                continue
            tokens = sum(sim.live_tokens(r) for r in other.requests)
            if tokens < best_tokens:
                best, best_tokens = (unit, other), tokens
        return best

    def on_group_done(self, group: Group) -> None:
        unit = self._unit[group.gid]
        placement = self.controller.occupy(unit)
        self._flying.pop(unit, None)
        self._stop(placement.aborted)  # batch-level oversampling closed its slot
        self._tick()
        if group.no_grad:
            removal = self.controller.filter(unit)
            self.sim.filter(self._groups.pop(unit))
            del self._unit[group.gid]
            self._stop(removal.aborted)
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
        groups = [self._groups.pop(u) for u in batch.unit_ids]
        for g in groups:
            del self._unit[g.gid]
        return members(groups)

    def take_chunk(self, least: int, most: int):
        """Streaming (see the module docstring): the step's next chunk, or None."""
        if not self.streaming:
            return self.take_batch()
        ctl = self.controller
        batch = ctl.consume()
        if batch is not None:  # the head is READY: the rest of its batch is the last chunk
            self._tick()
            units = [u for u in batch.unit_ids if u not in self._handed]
            self._held, self._handed = [], set()
            return self._hand(units)
        streamed = ctl.stream()
        if streamed:
            self._tick()
            self._held += [u.unit_id for u in streamed]
        if len(self._held) < max(least, 1):
            return None
        take = least if self.chunk_exact else most
        units, self._held = self._held[:take], self._held[take:]
        self._handed.update(units)
        return self._hand(units)

    def _hand(self, units) -> list:
        groups = [self._groups.pop(u) for u in units]
        for g in groups:
            del self._unit[g.gid]
        return members(groups)

    def _head_stuck(self) -> bool:
        return self.controller.head_status is BufferStatus.STUCK

    def _watch_stuck(self) -> None:
        """The idle trainer found no READY head: run the §6.2 clock while the head is STUCK."""
        sim = self.sim
        if self._head_stuck():
            if self._stuck_since is None:
                self._stuck_since = sim.now
                self.timeouts.refresh(self.controller)
                sim.set_timer(sim.now + self.timeouts.timeout)
        elif self._stuck_since is not None:
            self._stuck_since = None
            sim.set_timer(INF)

    def on_timer(self) -> None:
        now, since, self._stuck_since = self.sim.now, self._stuck_since, None
        ctl = self.controller
        action = ctl.release_action  # release, retry or truncate (None: not STUCK)
        released = ctl.release_stuck()  # [] unless the head is STUCK
        if released:
            self.releases += 1
            self.release_log.append((now, since, len(released)))
        for unit in released:
            self._flying.pop(unit, None)
            group = self._groups[unit]
            if ctl.unit_state(unit) is UnitState.FINISHED:  # truncated: its partial output
                self.sim.truncate(group)
                self.truncated.append(group.gid)
                if group.no_grad:  # as on_group_done
                    removal = ctl.filter(unit)
                    self.sim.filter(self._groups.pop(unit))
                    del self._unit[group.gid]
                    self._stop(removal.aborted)
                continue
            del self._groups[unit]
            del self._unit[group.gid]
            self.sim.abort_group(group)
            self.released.append(group.gid)
            if action == "retry":
                self._retry.append(group.tag)  # type: ignore[arg-type]
                self.retried.append(group.gid)
        self._tick()
        if released:
            cutoff = self.timeouts.released(self.controller, now)
            if cutoff is not None:
                self._escalate(cutoff)

    def _escalate(self, cutoff: float) -> None:
        """Abort the groups in flight since before ``cutoff`` (``reserve_occupy.stuck``)."""
        for unit, t0 in list(self._flying.items()):
            if t0 >= cutoff:
                break  # admission order: the rest are younger
            del self._flying[unit]
            group = self._groups.get(unit)
            if group is None or group.state != Group.RUNNING \
                    or self.controller.unit_state(unit) is not UnitState.IN_FLIGHT:
                continue  # ended by a path that does not pass here (a crash)
            removal = self.controller.abort(unit)
            del self._groups[unit]
            del self._unit[group.gid]
            self.sim.abort_group(group)
            self.escalated.append(group.gid)
            self._stop(removal.aborted)
            self._tick()

    def on_publish(self, version: int) -> None:
        published = self.controller.publish()
        if published != version:
            raise AssertionError(f"controller at version {published}, simulator at {version}")

    def settings(self) -> dict:
        out = {"eta": self.eta, "capacity": self.capacity or self.batch_size,
               "unit": "GRPO group", "admission": "reserve while an engine slot is free"}
        for name in ("progress_close", "idle_surplus", "head_priority", "lookahead",
                     "streaming", "chunk_exact"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.progress_close:
            out["swaps"] = self.swaps
        if self.idle_surplus:
            out["handed_back"] = self.handed_back
        if self.stuck_timeout is not None:
            out.update(stuck_timeout_s=self.stuck_timeout, released_groups=len(self.released),
                       releases=self.releases)
            if self.escalated:
                out["escalated_groups"] = len(self.escalated)
        if self.stuck_action != "release":
            out.update(stuck_action=self.stuck_action, stuck_threshold=self.stuck_threshold,
                       retried_groups=len(self.retried), truncated_groups=len(self.truncated))
        return out

    def describe_state(self) -> str:
        return self.controller.snapshot().render().replace("\n", " | ")
