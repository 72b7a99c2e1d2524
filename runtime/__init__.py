"""The production path, and only it: the async driver and the controller interface it calls,
vLLM rollout, the torch GRPO trainer (one process, or FSDP2 ranks), Ray placement, crash
recovery, the config and the command line (README.md, "Layout", says the same).

Nothing here decides placement or admission: every such decision is the controller's
(``reserve_occupy.StalenessController``, or a peer's rule from ``reserve_occupy_peers`` in its
place); the runtime feeds it events and acts on its answers. The tools that measure or test it
live beside it and import it, never the other way: the simulator (``reserve_occupy_sim``), the
porting kit (``reserve_occupy_porting``) and the fault harness (``reserve_occupy_faults``);
``runtime.cli`` names their commands and imports one only when it runs.
"""

from . import _moved

_moved.install()  # the old names of the modules that left runtime/ (runtime/_moved.py)
