"""The peers' staleness rules behind the runtime's driver: ``staleness.policy`` other than
``reserve_occupy``.

Design
------
**One implementation of each rule.** A peer's rule (when to admit, what to train, what to drop)
is written once, in ``reserve_occupy_peers`` (the package beneath both callers), against the
rule API of ``reserve_occupy_peers.api``: a rule is a ``Policy`` and asks its host only through
``Host`` (``admit``, ``abort_group``, ``drop``, ``filter``, ``version``, ``now``, ``paused``,
``trainer_idle``, ``rollout_has_room``, ``set_timer``, ``batch_size``, ``group_size``). The
simulator is one host; ``PeerController`` is the other: it instantiates the very rule class the
simulator runs and answers ``Host`` itself, so the runtime imports no simulator and the
simulator's results stay identical by construction (tests/runtime/test_peers.py pins a
fingerprint of the simulated runs of the rules the runtime drives, so a later edit to one of
them shows). The rules are sans-I/O (no clock, threads or engines: they only ask their host).

The peers live here, in ``runtime/``, not in the core ``reserve_occupy/``: they are not
verified and not part of the protocol; the core stays the one verified controller. Reserve–
Occupy stays the default and its code path (``JournaledController``) is unchanged.

**The controller interface.** ``PeerController`` answers the calls the driver makes of the
Reserve–Occupy controller, with the same types and typed errors:

* ``reserve(unit)``: the policy's L1. A policy admits by calling ``Host.admit()``; here that
  makes an *admitted group* (the policy's handle, ``PeerGroup``) which waits in a queue until the
  driver's next ``reserve`` binds it to a unit id (a prompt the policy submitted, waiting for the
  engine, as verl's submitted prompts do). ``reserve`` first takes a waiting group; if there is
  none it asks the policy to admit (``policy.admit()``); if the policy admits nothing, it refuses
  (None: the driver waits for a change and asks again). ``v_traj`` is the version at ``reserve``,
  the weights the unit's first token is generated with (the simulator's ``v_gen``).
* ``occupy(unit)``: the group finished; the policy hears ``on_group_done``.
* ``occupy_no_gradient(unit)`` (only for a rule that discards a group without gradient when its
  trainer samples, ``keeps_no_gradient``: ``Policy.filters_at_sample``, verl's
  ``ReplayBufferAsync``, tinker, torchtitan's windowed FIFO): the group finished and its
  rewards are all equal. It is occupied as any finished group, with the simulator's mark
  (``group.no_grad``) and the occupy logged with ``meta.no_gradient``; it stays in the rule's
  buffer until the rule's next ``take_batch`` (or ``take_chunk``) discards it (``Host.filter``:
  a ``filter`` event, ``meta.reason = "no_gradient"``, handed to the driver by
  ``take_dropped``), and the rule refills then, as its source does (verl: evict and refill 1:1
  at the trainer's next sample, not when the group finishes). A marked group is never batched
  (``InvariantViolation`` if a rule chose one).
* ``abort(unit)``: the *runtime* lost the group (unit timeout, failed candidates, a raising
  reward, shutdown, and the zero-variance filter for every rule but those above: the
  ``on_group_done`` filters of AReaL, ROLL and the synchronous loop, and NeMo-RL, whose source
  trains such groups: the filtering bench runs it with the driver's filter off). The simulator has no such event, so the
  adapter gives every rule the same answer: the policy's group is re-armed and waits to be bound
  to the next reserved unit, keeping its tag (target step, submission step) and whatever
  accounting the rule holds for it: NeMo-RL's ``on_dropped_prompt="replace"``, a refill at once.
  (Until the runtime gave verl's rule ``occupy_no_gradient``, its groups without gradient took
  this path too: refilled when they finished, sooner than verl refills; docs/peers.md, "The
  filtering workload".)
* ``consume()``: the policy's L3, ``take_batch``; the finished groups it discards
  (``Host.drop``: verl's stale evictions, weight_fifo's too-old groups; ``Host.filter``: the
  marked groups without gradient) are logged as ``filter`` events with ``meta.reason =
  "stale"`` (``"no_gradient"``) and handed to the driver by ``take_dropped`` so it can forget
  their data.
* ``publish()``: the version moves; the policy hears ``on_publish``. A rule may abort in-flight
  groups of its own choice there (ROLL's cohorts older than its lag: ``Host.abort_group``),
  logged as ``abort`` with ``meta.reason = "stale"`` and handed to the driver by
  ``take_aborted`` so it stops their requests; the finished ones it drops go as at
  ``consume``.
* ``stream()`` (``trainer.streaming``, only for a rule whose simulator policy streams,
  ``peer_streams``, read from ``Policy.streams``: NeMo-RL's ``in_order`` and ``weight_fifo``,
  whose ``_train_pump`` trains a step in chunks, and ``unbounded``): the policy's own
  ``take_chunk(min(chunk_groups, lacking), lacking)``, as the simulator's streaming trainer
  calls it, decides which finished groups the trainer may train now. They leave the rule's
  buffer at once (its permits return: the driver wakes admission), become STREAMED and join
  the open step; the version does not move inside a step, so each trains at the staleness the
  consume will log. ``consume`` then never asks the rule
  for a whole batch (``take_batch``): it returns the open step once all ``batch_size`` of its
  units have been streamed (``Batch.streamed`` names them all), and the head status is READY
  from then until that consume. A rule that does not stream refuses ``trainer.streaming`` with
  a one-line error naming it (``train --check``; ``PeerController`` raises
  ``UnsupportedByRuntime``). ``release_stuck``: no peer has a STUCK state (the head status is
  never STUCK).
* a rule's timer (AReaL's ``wait_timeout_s``): ``Host.set_timer`` sets ``timer``; the driver's
  watchdog calls ``fire_timer`` when its clock reaches it (the rule then may admit).

**The event log** is the core's trace format (``reserve_occupy.trace``): the same ``Event``
records, without slots (a peer has none), and a header naming the rule in ``x_policy`` (and
``x_bounded``: whether the rule itself promises staleness <= eta; ``x_eta``: the eta it
enforces, 0 for ``synchronous``). Only ``check-trace --peer NAME`` reads such a log with the
peer checker (``reserve_occupy_porting.checker``), taking the bound and eta from the named rule (a
header that disagrees is refused; without ``--peer`` the log is refused, never checked
leniently): unit lifecycles, versions, full batches and each trained unit's staleness; it fails
a bounded rule's batch staler than eta but only reports the trained staleness of an unbounded
rule (the rule breaks the bound by design).

Where a runtime run differs from a simulated one (the rule is the same; its surroundings are
the runtime's): a unit's ``v_traj`` is the version at ``reserve`` (the simulator's ``v_gen`` is
the version its first request started under, after any queueing); the zero-variance test is
the runtime's (``staleness.filter_zero_variance``, on the rewards, before ``occupy``): a rule
that filters at its sample sees the marked group and runs its own filter path then, the others
never see a no-gradient group (the driver aborts it when it finishes); ``unbounded``'s free
slot is fewer than ``max_in_flight`` groups in flight (``staleness.max_concurrency``, default
(eta + 1) x batch_size, the most Reserve–Occupy keeps in flight), not the engines' sequence
slots; verl runs with ``parameter_sync_step=1`` (colocate_async, as the runtime is).

Which rules run here: ``PEER_POLICIES``. The others of the simulator need what the runtime's
driver does not give a policy: trajectory-level batches (TRL, whose unit is a trajectory, not a
group), the future (clairvoyant: the workload's lengths before generation), a trainer that
streams finer than groups (PSRL's fine-grained rule is about chunks of trajectories).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from reserve_occupy import (
    UNIT_LIFECYCLE,
    Batch,
    BufferStatus,
    Config,
    Event,
    IllegalOperation,
    InvariantViolation,
    Placement,
    Removal,
    Reservation,
    StalenessController,
    UnitState,
)
from reserve_occupy.errors import DuplicateUnit, EventsForgotten, IllegalUnitState, UnknownUnit
from reserve_occupy.machine import drop_events
from reserve_occupy.types import BatchUnit, SlotRef

from reserve_occupy_peers import POLICIES, RESERVE_OCCUPY, Group, Policy, make_policy

from .records import STALE  # meta.reason of a finished unit the rule dropped untrained
from .records import forget_metas
from ._moved import renamed

# The simulator's policies the runtime can drive, in the order tables use.
PEER_POLICIES = ("nemo_in_order", "nemo_weight_fifo", "verl_drop", "roll", "areal", "synchronous",
                 "unbounded",
                 # issue 38: the rules as shipped in late 2026 (reserve_occupy_peers.PEERS_2026)
                 "nemo_windowed", "nemo_ready_first", "verl_wait", "prime_rl", "tinker",
                 "window_fifo")
POLICY_CHOICES = (RESERVE_OCCUPY, *PEER_POLICIES)


# The staleness settings each rule honours (docs/runtime.md, "Peers' rules": the table "what
# each rule honours"). Every rule takes the batch shape (``batch_size``, ``group_size``) and
# runs under the driver's group-level oversampling (``candidates``) and zero-variance filter
# (``filter_zero_variance``), which are the runtime's own, not the rule's. ``max_concurrency``
# acts only through ``Host.rollout_has_room`` (the engine's room), which only ``synchronous``
# and ``unbounded`` ask; the other rules bound what is in flight by their own count (NeMo-RL's
# dataloader batches, verl's 1:1 refill, ROLL's quotas, AReaL's count bound) and would run 16
# or 32 groups at once under ``max_concurrency=2`` while the log said 2: they refuse it.
# ``capacity`` (batch-level oversampling) is Reserve–Occupy's alone. ``max_staleness`` is the
# rule's eta (``synchronous`` runs at 0 whatever it says: its eta is 0 by definition, and the
# bench compares every rule at one eta). tests/runtime/test_check_resume_hardening.py checks
# this table against the policies' source (a rule that asks ``rollout_has_room`` honours
# ``max_concurrency``).
_EVERY_RULE = frozenset({"max_staleness", "batch_size", "group_size", "candidates",
                         "filter_zero_variance"})
RULE_SETTINGS: dict[str, frozenset[str]] = {
    "nemo_in_order": _EVERY_RULE,
    "nemo_weight_fifo": _EVERY_RULE,
    "verl_drop": _EVERY_RULE,
    "roll": _EVERY_RULE,
    "areal": _EVERY_RULE,
    "synchronous": _EVERY_RULE | {"max_concurrency"},
    "unbounded": _EVERY_RULE | {"max_concurrency"},
    "nemo_windowed": _EVERY_RULE,
    "nemo_ready_first": _EVERY_RULE,
    "verl_wait": _EVERY_RULE,
    "prime_rl": _EVERY_RULE,
    "tinker": _EVERY_RULE,
    "window_fifo": _EVERY_RULE,
}
# staleness.* settings that are off when None, which a rule that does not honour them refuses
# (``capacity``: config validation refuses it with every peer, naming it Reserve–Occupy's; the
# core's ``Config`` fills it with ``batch_size``, so ``PeerController`` cannot tell it was set)
OPTIONAL_SETTINGS = ("max_concurrency",)


def unhonoured(name: str, given: dict[str, Any]) -> str | None:
    """The first ``staleness.*`` setting of ``given`` (name -> value; None: not set) that the
    peer's rule ``name`` does not honour, as one line naming the rule and the rules that do;
    None if it honours all it was given (or ``name`` is not a peer's rule)."""
    if name not in RULE_SETTINGS:
        return None
    for key in OPTIONAL_SETTINGS:
        if given.get(key) is None or key in RULE_SETTINGS[name]:
            continue
        others = [p for p in PEER_POLICIES if key in RULE_SETTINGS[p]]
        which = f"of the peers only {', '.join(others)} honour it"
        return (f"staleness.{key}={given[key]} is not honoured by staleness.policy={name} "
                f"(the rule bounds its groups in flight itself; {which}): leave it unset")
    return None


def peer_streams(name: str) -> bool:
    """Whether the simulator's policy ``name`` streams (``Policy.streams``: it hands a
    streaming trainer chunks), read from the class itself, not from a list kept here."""
    return bool(POLICIES[name].streams) if name in PEER_POLICIES else False


class UnsupportedByRuntime(RuntimeError):
    """The policy asked for something the runtime's driver cannot give it."""


class PeerGroup(Group):
    """The rule's handle on one admitted group (the rule API's ``Group``, bound to a unit).
    ``requests`` is the group itself: ``members(groups)`` then lists each group once, and the
    adapter maps what a rule returns back to its units."""

    __slots__ = ("unit_id", "v_traj", "group")

    def __init__(self, gid: int, v_tag: int) -> None:
        self.gid = gid
        self.unit_id: Any = None  # bound by reserve
        self.v_tag = v_tag
        self.v_traj = -1
        self.tag: object = None  # the rule's own (target step, submission step)
        self.state = PeerGroup.RUNNING
        self.no_grad = False  # set by occupy_no_gradient (a rule that filters at sample)
        self.requests = [self]
        self.group = self

    def __repr__(self) -> str:
        return f"PeerGroup({self.gid}, unit={self.unit_id!r}, {self.state})"


def _no_clock() -> float:
    raise UnsupportedByRuntime("this PeerController has no clock (pass now=): its rule sets a "
                               "timer")


def make_rule(name: str, eta: int) -> Policy:
    """The peer's rule ``name`` (``reserve_occupy_peers``) with the options the runtime runs it
    with."""
    if name not in PEER_POLICIES:
        raise ValueError(f"unknown peer policy {name!r} (choose from {', '.join(PEER_POLICIES)})")
    return make_policy(name, eta, **rule_options(name))


def rule_options(name: str) -> dict[str, Any]:
    """The options the runtime runs peer ``name``'s rule with, where they differ from the
    simulator's defaults (a simulation of a real-engine run passes the same: bench/calibrate.py,
    bench/workload_predict.py)."""
    # verl: parameter_sync_step=1 is verl's colocate_async (the runtime's trainer and engine
    # share the machine); the simulator's default, 4, is separate_async.
    if name in ("verl_drop", "verl_wait"):
        return {"parameter_sync_step": 1}
    # tinker: the driver chooses the prompts, so a discarded group's prompt is not requeued
    if name == "tinker":
        return {"requeue": False}
    return {}


class PeerController:
    """A peer's rule (``reserve_occupy_peers``) with the driver's controller interface; see the
    module docstring. It is also the rule's host: it answers the rule API's ``Host`` calls
    (below, "the rule's host") itself. ``max_in_flight``: the groups the engine runs at once,
    for rules that admit on a free slot (``unbounded``). ``chunk_groups``: with
    ``config.streaming``, the least groups a chunk takes (the simulator's
    ``cost.train.chunk_groups``; NeMo-RL's ``min_groups_for_streaming_train``)."""

    def __init__(self, policy: str, config: Config, group_size: int,
                 max_in_flight: int | None = None,
                 now: Callable[[], float] | None = None, chunk_groups: int = 1) -> None:
        if config.streaming and not peer_streams(policy):
            if policy not in PEER_POLICIES:
                make_rule(policy, config.max_staleness)  # the unknown-policy ValueError
            raise UnsupportedByRuntime(f"staleness.policy={policy} does not stream (its "
                                       f"simulator policy has no take_chunk): set "
                                       f"trainer.streaming=false")
        if isinstance(chunk_groups, bool) or not isinstance(chunk_groups, int) \
                or chunk_groups < 1:
            raise ValueError(f"chunk_groups must be an int >= 1, got {chunk_groups!r}")
        refused = unhonoured(policy, {"max_concurrency": config.max_concurrency})
        if refused is not None:  # a setting the rule would ignore is never accepted silently
            raise UnsupportedByRuntime(refused)
        self.policy_name = policy
        self.chunk_groups = chunk_groups
        # the driver's clock, read only by a rule that sets a timer (``timer``, ``fire_timer``)
        self._clock = now if now is not None else _no_clock
        self.timer = math.inf
        self.config = config
        self.rule = make_rule(policy, config.max_staleness)
        self.bounded = bool(self.rule.bounded)
        # a finished group without gradient goes to the rule (occupy_no_gradient), which
        # discards it at its next sample, rather than being aborted by the driver at finish
        self.keeps_no_gradient = bool(self.rule.filters and self.rule.filters_at_sample)
        self.max_in_flight = (max_in_flight if max_in_flight is not None else
                              config.max_concurrency or
                              (config.max_staleness + 1) * config.batch_size)
        self.version = 0
        self._events: list[Event] = []
        self._forgotten = 0  # events numbered below this were dropped (forget_events)
        self.metas: dict[int, dict[str, Any]] = {}
        self.in_flight = 0
        self._gids = 0
        self._waiting: deque[PeerGroup] = deque()  # admitted by the rule, no unit yet
        self._units: dict[Any, PeerGroup] = {}
        self._states: dict[Any, UnitState] = {}
        self._dropped: list[Any] = []
        self._aborted: list[Any] = []
        self._training = False  # consumed, not yet published
        # streaming: the units stream() handed for the open step, in the order handed
        self._step: list[BatchUnit] = []
        # the rule admitted groups or moved its timer inside a consume or publish (AReaL's
        # prepare_batch round): the driver must wake admission and its watchdog
        self._admission_moved = False
        self.batch_size = config.batch_size  # Host: the rule's batch shape
        self.group_size = group_size
        self.rule.attach(self)

    # ------------------------------------------------------------------ state ----------------

    @property
    def head(self) -> int:
        return self.version

    @property
    def head_status(self) -> BufferStatus:
        # never STUCK: the STUCK timeout is Reserve–Occupy's; READY only for a streamed step
        # that is whole (a whole-batch rule decides its batch only when consume asks it)
        if self.config.streaming and len(self._step) == self.config.batch_size:
            return BufferStatus.READY
        return BufferStatus.PENDING

    @property
    def events(self) -> list[Event]:
        """The log (StalenessController.events); ``EventsForgotten`` after ``forget_events``."""
        if self._forgotten:
            raise EventsForgotten("events", self._forgotten)
        return self._events

    @property
    def last_event(self) -> Event | None:
        return self._events[-1] if self._events else None

    @property
    def event_count(self) -> int:
        return self._forgotten + len(self._events)

    def events_since(self, seq: int) -> list[Event]:
        if seq < self._forgotten:
            raise EventsForgotten(f"events_since({seq})", self._forgotten)
        return self._events[seq - self._forgotten:]

    def forget_events(self, before: int) -> None:
        """Drop the events numbered below ``before`` and their metas from memory, as
        ``StalenessController.forget_events`` (ValueError naming a ``before`` outside
        ``first held .. event_count``, nothing dropped)."""
        self._forgotten = drop_events(self._events, self._forgotten, before)
        forget_metas(self.metas, before)

    def unit_state(self, unit_id: Any) -> UnitState:
        self._check_id("unit_state", unit_id)
        if unit_id not in self._states:
            raise UnknownUnit("unit_state", unit_id)
        return self._states[unit_id]

    def fire_timer(self) -> None:
        """The rule's timer expired (the driver's watchdog calls this at ``timer``)."""
        self.timer = math.inf
        self.rule.on_timer()

    def take_dropped(self) -> list[Any]:
        """The finished units the rule dropped since the last call (the driver forgets them)."""
        out, self._dropped = self._dropped, []
        return out

    def take_admission_moved(self) -> bool:
        """Whether, since the last call, a consume returned a batch (the rule's admission may
        open: NeMo-RL's permits, verl's refills), or a consume or publish admitted groups (the
        rule's waiting queue grew) or changed the rule's timer; the driver then wakes admission
        and the watchdog. Only then: waking on every consume would spin the trainer's loop."""
        moved, self._admission_moved = self._admission_moved, False
        return moved

    def _watch_admission(self, op: Callable[[], Any]) -> Any:
        waiting, timer = len(self._waiting), self.timer
        try:
            return op()
        finally:
            if len(self._waiting) > waiting or self.timer != timer:
                self._admission_moved = True

    def take_aborted(self) -> list[Any]:
        """The in-flight units the rule aborted since the last call (the driver stops them)."""
        out, self._aborted = self._aborted, []
        return out

    # ------------------------------------------------------------------ operations -----------

    def reserve(self, unit_id: Any, meta: dict[str, Any] | None = None) -> Reservation | None:
        self._check_id("reserve", unit_id)
        if unit_id in self._states:
            raise DuplicateUnit(unit_id, self._states[unit_id].value)
        if not self._waiting:
            self.rule.admit()
        if not self._waiting:
            return None
        group = self._waiting.popleft()
        group.unit_id, group.v_traj = unit_id, self.version
        self._units[unit_id] = group
        self._states[unit_id] = UNIT_LIFECYCLE["reserve"][None]
        self.in_flight += 1
        self._log("reserve", meta, unit_id=unit_id, v_traj=self.version)
        return Reservation(unit_id, self.version, SlotRef(self.version, None))  # type: ignore

    def occupy(self, unit_id: Any, meta: dict[str, Any] | None = None) -> Placement:
        return self._occupy(unit_id, meta, no_grad=False)

    def occupy_no_gradient(self, unit_id: Any, meta: dict[str, Any] | None = None) -> Placement:
        """The group finished and its rewards carry no gradient: occupied with the mark
        (``group.no_grad``; ``meta.no_gradient`` on its event), left in the rule's buffer for
        the rule to discard at its next sample. Only for a rule that filters at sample
        (``keeps_no_gradient``); any other refuses (``IllegalOperation``), changing nothing:
        the driver aborts such a group when it finishes."""
        if not self.keeps_no_gradient:
            raise IllegalOperation("occupy_no_gradient", "TRAINING" if self._training else "IDLE",
                                   requires=f"a rule that discards a group without gradient "
                                            f"at its sample ({self.policy_name} does not: "
                                            f"abort it)")
        return self._occupy(unit_id, {**(meta or {}), "no_gradient": True}, no_grad=True)

    def _occupy(self, unit_id: Any, meta: dict[str, Any] | None, no_grad: bool) -> Placement:
        group, self._states[unit_id] = self._live("occupy", unit_id)
        self.in_flight -= 1
        group.state = PeerGroup.DONE
        group.no_grad = no_grad
        self._log("occupy", meta, unit_id=unit_id, v_traj=group.v_traj)
        self.rule.on_group_done(group)
        return Placement(unit_id, group.v_traj, SlotRef(self.version, None))  # type: ignore

    def abort(self, unit_id: Any, meta: dict[str, Any] | None = None) -> Removal:
        group, self._states[unit_id] = self._live("abort", unit_id)
        self.in_flight -= 1
        del self._units[unit_id]
        self._log("abort", meta, unit_id=unit_id)
        # the rule's group waits for the next reserved unit, tag and accounting kept
        group.unit_id, group.v_traj = None, -1
        self._waiting.appendleft(group)
        return Removal(unit_id, SlotRef(self.version, None))  # type: ignore[arg-type]

    def consume(self, meta: dict[str, Any] | None = None) -> Batch | None:
        if self._training:
            raise IllegalOperation("consume", "TRAINING")
        if self.config.streaming:
            return self._consume_step(meta)
        chosen = self._watch_admission(self.rule.take_batch)
        if chosen is None:
            return None
        units = self._finished_units(chosen, "peer-batch")
        if len(units) != self.config.batch_size:
            raise InvariantViolation("peer-batch", f"{self.policy_name} selected {len(units)} "
                                                   f"groups, not batch_size "
                                                   f"{self.config.batch_size}")
        for u in units:
            self._states[u.unit_id] = UNIT_LIFECYCLE["consume"][self._states[u.unit_id]]
            del self._units[u.unit_id]
        batch = Batch(self.version, tuple(units))
        self._training = True
        self._admission_moved = True  # the rule's admission may open (take_admission_moved)
        self._log("consume", meta, batch=batch)
        return batch

    def _consume_step(self, meta: dict[str, Any] | None) -> Batch | None:
        """Streaming: the open step once every unit of it was streamed (else None)."""
        if len(self._step) < self.config.batch_size:
            return None
        units, self._step = tuple(self._step), []
        for u in units:
            self._states[u.unit_id] = UNIT_LIFECYCLE["consume"][self._states[u.unit_id]]
        batch = Batch(self.version, units, tuple(u.unit_id for u in units))
        self._training = True
        self._admission_moved = True  # the rule's admission may open (take_admission_moved)
        self._log("consume", meta, batch=batch)
        return batch

    def _finished_units(self, chosen: Sequence[Any], invariant: str) -> list[BatchUnit]:
        """The units of the groups a rule chose (each once, in order), each a finished unit."""
        units, seen = [], set()
        for r in chosen:
            group = r.group
            if group.gid in seen:
                continue
            seen.add(group.gid)
            if group.unit_id is None or self._states.get(group.unit_id) is not UnitState.FINISHED:
                raise InvariantViolation(invariant, f"{self.policy_name} selected {group!r}, "
                                                    f"which is not a finished unit")
            if group.no_grad:  # occupy_no_gradient: never trained
                raise InvariantViolation(invariant, f"{self.policy_name} selected {group!r}, "
                                                    f"which carries no gradient")
            units.append(BatchUnit(group.unit_id, group.v_traj, self.version - group.v_traj))
        return units

    def publish(self, meta: dict[str, Any] | None = None) -> None:
        if not self._training:
            raise IllegalOperation("publish", "IDLE")
        self._log("publish", meta)
        self.version += 1
        self._training = False
        self._watch_admission(lambda: self.rule.on_publish(self.version))

    def stream(self, meta: dict[str, Any] | None = None) -> tuple[BatchUnit, ...]:
        """Streaming: the next chunk of the open step, as the rule's ``take_chunk`` chooses it
        (at least ``min(chunk_groups, lacking)`` finished groups, at most what the step lacks);
        ``()`` when the rule hands nothing or the step is whole. The units are STREAMED: the
        trainer may train them now, and the consume that closes the step returns them."""
        if not self.config.streaming:
            raise IllegalOperation("stream", "TRAINING" if self._training else "IDLE",
                                   requires="Config.streaming (trainer.streaming)")
        if self._training:
            raise IllegalOperation("stream", "TRAINING")
        lacks = self.config.batch_size - len(self._step)
        if lacks == 0:
            return ()
        chosen = self._watch_admission(
            lambda: self.rule.take_chunk(min(self.chunk_groups, lacks), lacks))
        if chosen is None:
            return ()
        units = self._finished_units(chosen, "peer-chunk")
        if not units or len(units) > lacks:
            raise InvariantViolation("peer-chunk", f"{self.policy_name} handed a chunk of "
                                                   f"{len(units)} groups to a step that lacks "
                                                   f"{lacks}")
        for u in units:
            self._states[u.unit_id] = UNIT_LIFECYCLE["stream"][self._states[u.unit_id]]
            del self._units[u.unit_id]
        self._step += units
        self._admission_moved = True  # the chunk left the rule's buffer: its permits returned
        self._log("stream", meta, batch=Batch(self.version, tuple(units)))
        return tuple(units)

    def release_stuck(self, meta: dict[str, Any] | None = None) -> tuple[()]:
        return ()  # the head is never STUCK: nothing to release

    @property
    def release_action(self) -> None:
        return None  # the head is never STUCK: no release to choose an action for

    def drop_finished(self, unit_id: Any, meta: dict[str, Any] | None = None) -> Removal:
        # only a truncating STUCK release leaves a finished unit to drop, and a peer has none
        raise UnsupportedByRuntime(f"{self.policy_name}: a peer's rule has no truncating STUCK "
                                   f"release, so no finished unit {unit_id!r} to drop")

    def check(self) -> None:
        """The adapter's own invariants: unit counts agree with the states."""
        flying = sum(1 for s in self._states.values() if s is UnitState.IN_FLIGHT)
        if flying != self.in_flight:
            raise InvariantViolation("peer-in-flight", f"{flying} units IN_FLIGHT, counted "
                                                       f"{self.in_flight}")
        streamed = sum(1 for s in self._states.values() if s is UnitState.STREAMED)
        if streamed != len(self._step):
            raise InvariantViolation("peer-streamed", f"{streamed} units STREAMED, the open "
                                                      f"step holds {len(self._step)}")
        for unit_id, group in self._units.items():
            if group.unit_id != unit_id:
                raise InvariantViolation("peer-binding", f"{unit_id!r} is bound to {group!r}")

    # ------------------------------------------------------------------ the log --------------

    def trace_records(self, producer: str | None = None) -> Any:
        """The log in the trace format: the header (with ``x_policy``), then every event."""
        from reserve_occupy.trace import event_to_record, header

        head = header(self.config, producer)
        head["x_policy"] = self.policy_name
        head["x_bounded"] = self.bounded
        head["x_eta"] = self.rule.eta  # the bound the rule enforces (synchronous: 0)
        yield head
        for event in self.events:
            record = event_to_record(event)
            if event.seq in self.metas:
                record["meta"] = self.metas[event.seq]
            yield record

    # ------------------------------------------------------------------ the rule's host ------
    # reserve_occupy_peers.api.Host: every call a rule makes of its host, answered here.

    paused = False  # the driver reserves only while the engine is open

    @property
    def now(self) -> float:
        """The driver's clock (read only by a rule that sets a timer)."""
        return self._clock()

    @property
    def trainer_idle(self) -> bool:
        return not self._training

    def rollout_has_room(self) -> bool:
        """Room in the engine: nothing admitted waits for a unit, and fewer than
        ``max_in_flight`` groups are in flight."""
        return not self._waiting and self.in_flight + len(self._waiting) < self.max_in_flight

    def admit(self, v_tag: int | None = None, spec: int | None = None,
              priority: bool = False) -> PeerGroup:
        """The rule admits a group: it waits for the driver's next ``reserve`` to bind it to a
        unit (at the front of the queue with ``priority``)."""
        if spec is not None:
            raise UnsupportedByRuntime(f"{self.policy_name}: choosing the prompt "
                                       f"(spec={spec}) is not supported by the runtime")
        group = PeerGroup(self._gids, self.version if v_tag is None else v_tag)
        self._gids += 1
        (self._waiting.appendleft if priority else self._waiting.append)(group)
        return group

    def abort_group(self, group: PeerGroup) -> None:  # type: ignore[override]
        """The rule stops an in-flight group of its own choice (ROLL's stale cohorts): a group
        still waiting for a unit is withdrawn; a bound one is logged as aborted
        (``meta.reason = "stale"``) and handed to the driver by ``take_aborted``."""
        if group.state != PeerGroup.RUNNING:
            raise IllegalUnitState("abort", group.unit_id, group.state)
        group.state = PeerGroup.ABORTED
        if group.unit_id is None:
            self._waiting.remove(group)
            return
        unit_id = group.unit_id
        self._states[unit_id] = self._next_state("abort", unit_id)
        self.in_flight -= 1
        del self._units[unit_id]
        self._aborted.append(unit_id)
        self._log("abort", {"reason": STALE}, unit_id=unit_id)

    def filter(self, group: PeerGroup) -> None:  # type: ignore[override]
        """The rule discards a finished group that carries no gradient."""
        self._discard(group, "no_gradient")

    def drop(self, requests: Sequence[PeerGroup]) -> None:  # type: ignore[override]
        """The rule discards finished groups it will not train (stale)."""
        seen: set[int] = set()
        for r in requests:
            if r.group.gid not in seen:
                seen.add(r.group.gid)
                self._discard(r.group, STALE)

    def set_timer(self, t: float) -> None:
        """The rule's one timer (AReaL's wait timeout): the driver's watchdog calls
        ``fire_timer`` once its clock reaches ``timer``."""
        if t < self.now:
            raise UnsupportedByRuntime(f"{self.policy_name} set a timer in the past")
        self.timer = t

    # ------------------------------------------------------------------ internals ------------

    def _log(self, op: str, meta: dict[str, Any] | None, **fields: Any) -> None:
        seq = self._forgotten + len(self._events)
        self._events.append(Event(seq, op, self.version, self.version, **fields))
        if meta:
            self.metas[seq] = meta

    def _discard(self, group: PeerGroup, reason: str) -> None:
        """The rule discards a finished group (``drop``/``filter``)."""
        unit_id = group.unit_id
        state = self._states.get(unit_id)
        if unit_id is None or state not in UNIT_LIFECYCLE["filter"]:
            raise IllegalUnitState("filter", unit_id, (state or UnitState.IN_FLIGHT).value)
        group.state = PeerGroup.FILTERED
        self._states[unit_id] = UNIT_LIFECYCLE["filter"][state]
        del self._units[unit_id]
        self._dropped.append(unit_id)
        self._log("filter", {"reason": reason}, unit_id=unit_id)

    # The unit lifecycle is the core's: ``reserve_occupy.UNIT_LIFECYCLE`` (what each operation
    # requires of the unit it names, and what it makes of it) and the core's id check, raising
    # the core's typed errors, so a peer's log breaks a lifecycle exactly where the core would.

    _check_id = staticmethod(StalenessController._check_id)

    def _next_state(self, op: str, unit_id: Any) -> UnitState:
        """The state ``op`` moves ``unit_id`` to (``UNIT_LIFECYCLE``), or the core's typed
        error (``InvalidUnitId``, ``UnknownUnit``, ``IllegalUnitState``); changes nothing."""
        self._check_id(op, unit_id)
        state = self._states.get(unit_id)
        if state is None:
            raise UnknownUnit(op, unit_id)
        edges = UNIT_LIFECYCLE[op]
        if state not in edges:
            raise IllegalUnitState(op, unit_id, state.value)
        return edges[state]

    def _live(self, op: str, unit_id: Any) -> tuple[PeerGroup, UnitState]:
        """The rule's group bound to ``unit_id`` and the state ``op`` moves it to."""
        state = self._next_state(op, unit_id)
        return self._units[unit_id], state


# ``REFERENCE``, the old name of ``RESERVE_OCCUPY`` here (the word also named other things), kept
# for one release; it warns (``DeprecationWarning``)
__getattr__ = renamed(__name__, {"REFERENCE": "RESERVE_OCCUPY"}, globals())
