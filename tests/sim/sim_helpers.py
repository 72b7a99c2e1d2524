"""Helpers shared by the simulator tests (a uniquely named module, not a package: tests/ has no
__init__.py, so pytest puts this folder on sys.path)."""

from __future__ import annotations

from reserve_occupy_sim.model.core import Simulator
from reserve_occupy_peers import make_policy

BATCH = 4  # groups per batch in the tests


def run_policy(policy, workload, cost, batches=8, batch_size=BATCH):
    """Run a policy instance, or a (name, eta[, options]) tuple, to ``batches`` batches."""
    if isinstance(policy, tuple):
        name, eta, opts = (policy + ({},))[:3]
        policy = make_policy(name, eta, **opts)
    return Simulator(policy, workload, cost, batches=batches, batch_size=batch_size).run()


def sim_cli(argv):
    """``python -m runtime simulate ARGV`` in-process: its exit status."""
    import argparse

    from reserve_occupy_sim import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))
