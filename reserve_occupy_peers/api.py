"""The rule API: what a peer's staleness rule is (``Policy``), what it holds of an admitted group
(``Group``), what it may ask of the host that runs it (``Host``) and the error a host raises when
a rule asks wrongly (``PolicyError``).

Two hosts run the same rule classes: the simulator (``reserve_occupy_sim.model.core.Simulator``,
simulated engines and trainer) and the runtime (``runtime.peers.PeerController``, the real
driver's controller). Neither is imported here: a host is whatever answers ``Host``'s calls, so
this package depends on neither caller (and on no torch, vLLM or clock).

``Host`` names every call a rule the runtime can drive makes of its host; a change to what a
rule asks of its host is a change to ``Host``, which both hosts then must answer
(tests/peers/test_rule_host.py checks the rules' source, the simulator and the runtime's
controller against it). ``SimulatorHost`` adds what the rules that only the simulator can run
read of it (the engines, the workload's future, the ledger): the clairvoyant bound, TRL's
trajectory-level batches, Reserve–Occupy's simulator policy and PSRL's.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Protocol

INF = math.inf  # "no timer" for ``Host.set_timer``

# A host's trajectory record (the simulator's ``engine.Request``; in the runtime a group is its
# own single trajectory). ``members`` lists them; a rule returns them from ``take_batch``.
Trajectory = Any


class PolicyError(RuntimeError):
    """A rule used its host's API wrongly (aborted a group that had finished, set a timer in the
    past, handed a chunk larger than the step lacks). The simulator raises its subclass
    ``reserve_occupy_sim.model.core.PolicyError`` (also a ``SimulationError``)."""


class Group:
    """One admitted GRPO group, as a rule reads it: the host's record of it (the simulator's
    ``SimGroup``, the runtime's ``PeerGroup``) extends this one with its own fields."""

    __slots__ = ("gid", "v_tag", "tag", "state", "no_grad", "requests")

    RUNNING, DONE, ABORTED, FILTERED = "running", "done", "aborted", "filtered"

    gid: int  # admission index
    v_tag: int  # the version the rule stamped at admission (its own notion of v_traj)
    tag: object  # free for the rule (target step, cohort, ...)
    state: str  # RUNNING, DONE, ABORTED or FILTERED
    no_grad: bool  # set when it finishes: all rewards equal, so no gradient
    requests: list[Trajectory]  # its trajectories

    @property
    def done(self) -> bool:
        return self.state == Group.DONE


class Host(Protocol):
    """Every call a rule may make on its host (``Policy.sim``). Both hosts answer all of them.

    ``admit`` is L1 (a group joins the host's queue; ``spec`` picks the prompt, which only the
    simulator supports; ``priority`` puts it ahead of earlier admissions), ``abort_group`` L2
    (stop an in-flight group of the rule's choice), ``drop`` and ``filter`` L3 (discard finished
    trajectories: stale, or carrying no gradient). ``set_timer`` sets the rule's one timer
    (``INF`` cancels); the host calls ``Policy.on_timer`` when it expires."""

    batch_size: int  # groups per trained batch
    group_size: int  # trajectories per group

    @property
    def version(self) -> int:
        """The weight version the trainer last published."""
        ...

    @property
    def now(self) -> float:
        """The host's clock, in seconds."""
        ...

    @property
    def paused(self) -> bool:
        """A weight sync holds the engines (nothing new may start)."""
        ...

    @property
    def trainer_idle(self) -> bool:
        """The trainer waits for a batch."""
        ...

    def rollout_has_room(self) -> bool:
        """A slot is free and nothing admitted waits for one."""
        ...

    def admit(self, v_tag: int | None = None, spec: int | None = None,
              priority: bool = False) -> Group:
        ...

    def abort_group(self, group: Group) -> None:
        ...

    def drop(self, requests: list[Trajectory]) -> None:
        ...

    def filter(self, group: Group) -> None:
        ...

    def set_timer(self, t: float) -> None:
        ...


class SimulatorHost(Host, Protocol):
    """``Host`` plus what the simulator-only rules read (clairvoyant, trl, reserve_occupy's
    simulator policy, psrl): the runtime cannot answer these, which is why those rules run only
    in the simulator (``runtime.peers.PEER_POLICIES`` lists the others)."""

    candidates: int  # requests admitted per group (group-level oversampling)
    workload: Any  # the workload: every group's prompt and (future) response lengths
    instances: list[Any]  # the engines, with their running counts
    ledger: Any  # what was admitted, trained, aborted, dropped, filtered so far

    def free_slots(self) -> int:
        ...

    def live_tokens(self, req: Trajectory) -> float:
        ...

    def truncate(self, group: Group) -> None:
        """Finish a running group now with what it decoded so far (the STUCK release's
        ``truncate``, spec/PROTOCOL.md §6.2); its trajectories train with their cut lengths."""
        ...


class Policy:
    """The interface every staleness-control rule implements: subclasses set the class
    attributes and override the hooks they need.

    A rule sees its host through ``Host``'s calls (``self.sim``) and answers at three points,
    one per control layer of the source: ``admit`` (L1: call ``sim.admit()`` for each group to
    start now), what it does on ``on_group_done`` / ``on_publish`` (L2: ``sim.abort_group``), and
    ``take_batch`` (L3: return the trajectories of the next batch, ``None`` to keep the trainer
    waiting, and ``sim.drop(...)`` for finished data it discards). Rules hold their own queues;
    the host holds time, engines and the ledger.

    With a streaming trainer the host calls ``take_chunk`` instead of ``take_batch``: the next
    chunk of the open step (at least ``least`` and at most ``most`` finished groups) or None. A
    rule whose framework streams sets ``streams = True`` and overrides it; the default hands the
    whole batch as one chunk once ``take_batch`` returns it (a whole-batch framework on a chunked
    trainer).

    With reward filtering on, a finished group may carry no gradient (``group.no_grad``). A
    rule whose source discards such groups calls ``sim.filter(group)`` and sets ``filters =
    True``; one whose source has no such path trains them (zero advantage) and sets ``filters =
    False``. *When* it discards one is the rule's too: in ``on_group_done`` (when the group
    finishes: AReaL, ROLL, the synchronous loop), or only when its trainer next samples
    (``take_batch``/``take_chunk``: verl's ``ReplayBufferAsync`` evicts and refills it there,
    tinker and torchtitan skip it as the batch is assembled), which such a rule says with
    ``filters_at_sample = True``. A host that learns a group has no gradient before the rule
    could (the runtime's driver rewards it first) reads it: it hands such a rule the group
    finished and marked, and removes it itself for a rule that discards at finish
    (``runtime.peers``).
    """

    name: ClassVar[str] = ""  # registry and CLI name
    label: ClassVar[str] = ""  # short name for tables and plots
    source: ClassVar[str] = ""  # where the algorithm comes from (file @ commit)
    bounded: ClassVar[bool] = True  # promises staleness <= eta for every trained trajectory
    uses_eta: ClassVar[bool] = True  # False for the synchronous and unbounded references
    filters: bool = True  # discards no-gradient groups (sim.filter) instead of training them
    filters_at_sample: bool = False  # ... when its trainer samples, not when they finish
    streams: ClassVar[bool] = False  # hands a streaming trainer chunks (take_chunk)

    def __init__(self, eta: int) -> None:
        if isinstance(eta, bool) or not isinstance(eta, int) or eta < 0:
            raise ValueError(f"{self.name}: eta must be an int >= 0, got {eta!r}")
        self.eta = eta  # the bound this rule enforces (subclasses may adjust it)
        self.requested_eta = eta  # the comparison's eta this run belongs to
        self.sim: Any = None  # the host (a ``Host``; the simulator-only rules: ``SimulatorHost``)

    def attach(self, sim: Host) -> None:
        self.sim = sim
        self.batch_size = sim.batch_size
        self.group_size = sim.group_size

    # ----------------------------------------------------------------- hooks ----------------

    def admit(self) -> None:
        """L1: admit groups (``self.sim.admit()``) while this rule allows."""

    def on_group_done(self, group: Group) -> None:
        """Every trajectory of ``group`` finished."""

    def take_batch(self) -> list[Trajectory] | None:
        """L3: the trainer is idle; return the next batch's trajectories or None to wait."""
        raise NotImplementedError

    def take_chunk(self, least: int, most: int) -> list[Trajectory] | None:
        """Streaming trainer: the next chunk of the open step, ``least`` to ``most`` groups'
        trajectories, or None to keep the trainer waiting. Default: the whole batch."""
        return self.take_batch()

    def on_publish(self, version: int) -> None:
        """The new version is live on the rollout instances (L2 actions go here)."""

    def on_timer(self) -> None:
        """The timer set with ``sim.set_timer`` expired."""

    # ----------------------------------------------------------------- reporting ------------

    def settings(self) -> dict:
        """The parameters this run used, for the JSON output."""
        return {"eta": self.eta}

    def describe_state(self) -> str:
        """One line of internal state for stall reports."""
        return "-"
