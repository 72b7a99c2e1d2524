"""Helpers the rules share. The interface every rule implements, ``Policy``, and what it may
ask of its host, ``Host``, are in ``.api``.
"""

from __future__ import annotations

from .api import Group, Trajectory


def chunk_of(ready: list[Group], least: int, most: int) -> list[Group] | None:
    """The first ``most`` of ``ready`` if there are at least ``least`` of them (NeMo-RL's
    ``select(min_prompt_groups, max_prompt_groups)``), else None."""
    if len(ready) < max(least, 1):
        return None
    return ready[:most]


def members(groups: list[Group]) -> list[Trajectory]:
    """The trajectories of these groups, in group order."""
    return [r for g in groups for r in g.requests]
