"""A simulated run's fingerprint: the hash of what its ledger records (every batch's version,
trajectories, staleness and times; what was dropped, filtered and aborted; the clock at the
end). The tests that pin a run's result to the simulator as it was compare these."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def fingerprint(sim: Any) -> str:
    ledger = sim.ledger
    blob = json.dumps([[(b.version, b.tids, b.staleness, round(b.t_consume, 9),
                         round(b.t_published, 9)) for b in ledger.batches],
                       ledger.dropped, ledger.filtered, [t for t, _ in ledger.aborted],
                       round(sim.now, 9)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
