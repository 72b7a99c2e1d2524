"""Kept for one release: the old name of ``reserve_occupy_porting.drive``
(the porting kit's seeded drives of a controller). ``workload`` also names a module of the simulator
(``reserve_occupy_sim.model.workload``), so issue 35 renamed this one; importing it re-exports
the new module's public names, the same objects, and warns (``DeprecationWarning``).
Import ``reserve_occupy_porting.drive`` instead.
"""

from __future__ import annotations

import warnings

from .drive import (
    Profile,
    Recording,
    Step,
    drive,
    play,
)

__all__ = [
    "Profile",
    "Recording",
    "Step",
    "drive",
    "play",
]

warnings.warn("reserve_occupy_porting.workload was renamed reserve_occupy_porting.drive "
              "(issue 35); the old name is kept for one release", DeprecationWarning, stacklevel=2)
