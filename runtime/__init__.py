"""Thin bindings around the pure core: the async driver, vLLM rollout, the torch GRPO trainer,
Ray placement, the discrete-event simulator and the command line.

Nothing here decides placement or admission: every such decision is the controller's
(``reserve_occupy.StalenessController``); the runtime feeds it events and acts on its answers.
"""

from . import _moved

_moved.install()  # the old names of the modules that left runtime/ (runtime/_moved.py)
