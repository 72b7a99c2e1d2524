"""Helpers the policies share. The interface every policy implements, ``Policy``, is in
``..core``, beside the simulator it talks to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core import SimGroup
    from ..engine import Request


def chunk_of(ready: list[SimGroup], least: int, most: int) -> list[SimGroup] | None:
    """The first ``most`` of ``ready`` if there are at least ``least`` of them (NeMo-RL's
    ``select(min_prompt_groups, max_prompt_groups)``), else None."""
    if len(ready) < max(least, 1):
        return None
    return ready[:most]


def members(groups: list[SimGroup]) -> list[Request]:
    """The trajectories of these groups, in group order."""
    return [r for g in groups for r in g.requests]
