"""Import AReaL for the tests (or skip them) without changing the rest of the suite's asyncio.

areal 1.0.4's ``areal/api/cli_args.py`` calls ``uvloop.install()`` when it is imported, which
makes uvloop the process-wide event-loop policy. Test modules are imported at collection, before
any test runs, so every later test (the runtime's, whose virtual clock drives asyncio's own
loop) would run on uvloop. The policy in force before the import is put back; AReaL's own task
runner creates its loop itself and does not need the global policy.
"""

from __future__ import annotations

import asyncio

import pytest

_policy = asyncio.get_event_loop_policy()
try:
    pytest.importorskip("areal.infra.workflow_executor",
                        reason="AReaL is not installed (make install puts areal==1.0.4 in)")
finally:
    asyncio.set_event_loop_policy(_policy)
