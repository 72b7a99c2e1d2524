"""The peers' staleness rules (the policies the simulator compares and the runtime's driver can
run in the controller's place), one module each, beneath both callers.

Every rule implements ``api.Policy`` and asks its host only through ``api.Host``; the two hosts
are the simulator (``reserve_occupy_sim``) and the runtime (``runtime.peers.PeerController``),
and this package imports neither (nor torch, vLLM or a clock). None of the rules contains
protocol logic of the controller (only ``reserve_occupy`` calls it). ``POLICIES`` maps CLI names
to classes in the order tables use. Until the move (issue 35) this package was
``reserve_occupy_sim.model.policies``; that name still imports it, for one release.
"""

from __future__ import annotations

from .api import INF, Group, Host, Policy, PolicyError, SimulatorHost
from .areal import Areal
from .clairvoyant import Clairvoyant
from .nemo_in_order import NemoInOrder
from .nemo_ready_first import NemoReadyFirst
from .nemo_weight_fifo import NemoWeightFifo
from .nemo_windowed import NemoWindowed
from .prime_rl import PrimeRl
from .psrl import PsrlFineGrain
from .reserve_occupy import ReserveOccupy
from .roll import Roll
from .synchronous import Synchronous
from .tinker import Tinker
from .trl import Trl
from .unbounded import Unbounded
from .verl_drop import VerlDrop
from .verl_wait import VerlWait
from .window_fifo import WindowFifo

# The rules as the frameworks ship them in late 2026 (issue 38, item 1), after the others so that
# every table's order stays. verl V1's ``drop`` strategy is ``verl_drop`` and TRL's
# ``AsyncGRPOTrainer`` is ``trl`` (the same files at the same commits): not duplicated.
PEERS_2026: tuple[type[Policy], ...] = (NemoWindowed, NemoReadyFirst, VerlWait, PrimeRl, Tinker,
                                        WindowFifo)

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (ReserveOccupy, NemoInOrder, NemoWeightFifo, VerlDrop, Trl, Roll, Areal,
                Synchronous, Unbounded, Clairvoyant, PsrlFineGrain)
    + PEERS_2026
}

# Reserve–Occupy's own policy name: the runtime's default staleness.policy and the x_policy of a
# Reserve–Occupy log (runtime.peers and reserve_occupy_porting.checker, which called it REFERENCE)
RESERVE_OCCUPY = ReserveOccupy.name

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


__all__ = ["INF", "Group", "Host", "PEERS_2026", "POLICIES", "Policy", "PolicyError", "SOURCE_BASELINES",
           "RESERVE_OCCUPY", "SimulatorHost", "UnknownPolicy", "make_policy", "policy_names"]
