"""The interface every staleness-control policy implements, and helpers they share.

A policy sees the simulator through a few calls and answers at three points, one per control
layer of the source: ``admit`` (L1: call ``sim.admit()`` for each group to start now), what it
does on ``on_group_done`` / ``on_publish`` (L2: ``sim.abort(group)``), and ``take_batch`` (L3:
return the trajectories of the next batch, ``None`` to keep the trainer waiting, and
``sim.drop(...)`` for finished data it discards). Policies hold their own queues; the simulator
holds time, engines and the ledger.

With a streaming trainer (``cost.train.chunk_groups`` >= 1) the simulator calls ``take_chunk``
instead of ``take_batch``: the next chunk of the open step (at least ``least`` and at most
``most`` finished groups) or None. A policy whose framework streams sets ``streams = True`` and
overrides it; the default hands the whole batch as one chunk once ``take_batch`` returns it (a
whole-batch framework on a chunked trainer).

With reward filtering on, a finished group may carry no gradient (``group.no_grad``). A policy
whose source discards such groups calls ``sim.filter(group)`` and sets ``filters = True``; one
whose source has no such path trains them (zero advantage) and sets ``filters = False``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ..core import Group, Simulator
    from ..engine import Request


class Policy:
    """Base class: subclasses set the class attributes and override the hooks they need."""

    name: ClassVar[str] = ""  # registry and CLI name
    label: ClassVar[str] = ""  # short name for tables and plots
    source: ClassVar[str] = ""  # where the algorithm comes from (file @ commit)
    bounded: ClassVar[bool] = True  # promises staleness <= eta for every trained trajectory
    uses_eta: ClassVar[bool] = True  # False for the synchronous and unbounded references
    filters: bool = True  # discards no-gradient groups (sim.filter) instead of training them
    streams: ClassVar[bool] = False  # hands a streaming trainer chunks (take_chunk)

    def __init__(self, eta: int) -> None:
        if isinstance(eta, bool) or not isinstance(eta, int) or eta < 0:
            raise ValueError(f"{self.name}: eta must be an int >= 0, got {eta!r}")
        self.eta = eta  # the bound this policy enforces (subclasses may adjust it)
        self.requested_eta = eta  # the comparison's eta this run belongs to
        self.sim: Simulator = None  # type: ignore[assignment]

    def attach(self, sim: Simulator) -> None:
        self.sim = sim
        self.batch_size = sim.batch_size
        self.group_size = sim.group_size

    # ----------------------------------------------------------------- hooks ----------------

    def admit(self) -> None:
        """L1: admit groups (``self.sim.admit()``) while this policy allows."""

    def on_group_done(self, group: Group) -> None:
        """Every trajectory of ``group`` finished."""

    def take_batch(self) -> list[Request] | None:
        """L3: the trainer is idle; return the next batch's trajectories or None to wait."""
        raise NotImplementedError

    def take_chunk(self, least: int, most: int) -> list[Request] | None:
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


def chunk_of(ready: list[Group], least: int, most: int) -> list[Group] | None:
    """The first ``most`` of ``ready`` if there are at least ``least`` of them (NeMo-RL's
    ``select(min_prompt_groups, max_prompt_groups)``), else None."""
    if len(ready) < max(least, 1):
        return None
    return ready[:most]


def members(groups: list[Group]) -> list[Request]:
    """The trajectories of these groups, in group order."""
    return [r for g in groups for r in g.requests]
