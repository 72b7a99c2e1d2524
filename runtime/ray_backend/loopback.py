"""Ray on the loopback address only: the local clusters this project starts (``train --backend
ray`` without ``ray.address``, its tests and tools) listen on 127.0.0.1 and nowhere else.

What does it, in Ray 2.60 (read in ``ray/_private/services.py`` and checked by
tests/resilience/test_ray.py and tests/integrations/test_verl.py):

* ``ray.init(_node_ip_address="127.0.0.1")`` and ``ray start --node-ip-address=127.0.0.1`` are
  not enough: ``resolve_ip_for_localhost`` turns a loopback address into the machine's own
  network address, on purpose, so that other machines can join.
* ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is Ray's own switch for single-machine clusters
  (the default on Windows and macOS): the node's address becomes 127.0.0.1, and the GCS, the
  raylets, the workers and the agents then bind their ports to it. It is read when ``ray`` is
  imported, and by every Ray process from its environment, so ``pin`` sets both.
* The dashboard stays off (``include_dashboard=False``); its agent process still starts, on
  127.0.0.1 like the rest.
* ``ray start --address=...`` refuses to add a worker node under that switch (Ray treats it as
  a one-machine platform); a multi-node cluster on one host is started with Ray's own
  ``ray.cluster_utils.Cluster``, whose nodes are started in-process with the same address.

Joining an existing cluster (``ray.address``) is left alone: that cluster's addresses are its
operator's choice.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable

LOOPBACK = "127.0.0.1"
ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def pin() -> None:
    """Make every Ray node started from this process (and its children) use 127.0.0.1."""
    os.environ.update(ENV)
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # ray already imported: it read the switch at import
        constants.ENABLE_RAY_CLUSTER = False


def is_loopback(ip: str) -> bool:
    return ip in (LOOPBACK, "::1", "::ffff:127.0.0.1") or ip.startswith("127.")


def listening(processes: Iterable[Any]) -> list[tuple[str, str, int]]:
    """``(process name, address, port)`` of every TCP socket the processes listen on
    (``psutil.Process`` objects; ones that went away meanwhile are skipped)."""
    import psutil

    out = []
    for p in processes:
        try:
            name = p.name()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.append((name, c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return sorted(out)


def exposed(processes: Iterable[Any]) -> list[tuple[str, str, int]]:
    """The listening sockets not on a loopback address (empty when pinned)."""
    return [s for s in listening(processes) if not is_loopback(s[1])]
