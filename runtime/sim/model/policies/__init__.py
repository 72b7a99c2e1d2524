"""The staleness-control policies the simulator compares, one module each.

Every policy implements ``..core.Policy``; none contains protocol logic of the controller (only
``reserve_occupy`` calls it). ``POLICIES`` maps CLI names to classes in the order tables use.
"""

from __future__ import annotations

from ..core import Policy
from .areal import Areal
from .clairvoyant import Clairvoyant
from .nemo_in_order import NemoInOrder
from .nemo_weight_fifo import NemoWeightFifo
from .psrl import PsrlFineGrain
from .reserve_occupy import ReserveOccupy
from .roll import Roll
from .synchronous import Synchronous
from .trl import Trl
from .unbounded import Unbounded
from .verl_drop import VerlDrop

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (ReserveOccupy, NemoInOrder, NemoWeightFifo, VerlDrop, Trl, Roll, Areal,
                Synchronous, Unbounded, Clairvoyant, PsrlFineGrain)
}

# The comparison of the source's section 10 (the baselines it measured), in its order.
SOURCE_BASELINES = ("nemo_in_order", "nemo_weight_fifo", "verl_drop", "trl", "roll")


class UnknownPolicy(ValueError):
    pass


def make_policy(name: str, eta: int, **options) -> Policy:
    try:
        cls = POLICIES[name]
    except KeyError:
        raise UnknownPolicy(
            f"unknown policy {name!r} (choose from {', '.join(POLICIES)})") from None
    return cls(eta, **options)


def policy_names(text: str) -> list[str]:
    """The policies a ``--policy``/``--policies`` comma list names ("all": every one)."""
    if text.strip() == "all":
        return list(POLICIES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UnknownPolicy(f"the policy list is empty (choose from {', '.join(POLICIES)})")
    for n in names:
        if n not in POLICIES:
            raise UnknownPolicy(f"unknown policy {n!r} (choose from {', '.join(POLICIES)})")
    return names


__all__ = ["POLICIES", "Policy", "SOURCE_BASELINES", "UnknownPolicy", "make_policy", "policy_names"]
