"""In-process adapters that misbehave, for tests/porting/test_conformance_untrusted.py. A module
of its own that imports next to nothing, so that importing it (which ``--adapter-timeout``
bounds too) is quick however loaded the machine is."""

from __future__ import annotations

import os
import time
from pathlib import Path

from reserve_occupy_porting.vector_runner import ReferenceAdapter


class HangsInPublish(ReferenceAdapter):
    def publish(self):
        time.sleep(3600)


class SwallowsTheInterruption(ReferenceAdapter):
    """Catches everything, the timeout's interruption included, and hangs on."""

    def publish(self):
        while True:
            try:
                time.sleep(3600)
            except BaseException:  # noqa: BLE001, S110 -- the point of this adapter
                pass


class HangsInTheConstructor(ReferenceAdapter):
    def __init__(self):
        super().__init__()
        time.sleep(3600)


class InterruptsInPublish(ReferenceAdapter):
    def publish(self):
        raise KeyboardInterrupt


class WaitsInPublish(ReferenceAdapter):
    """Says where it is (a file named by the environment), then waits for the user's Ctrl-C."""

    def publish(self):
        Path(os.environ["WAITING_FILE"]).write_text("waiting")
        time.sleep(3600)
