"""A discrete-event simulator of asynchronous RL: the Reserve–Occupy controller against the
staleness controls of verl, NeMo-RL, TRL, ROLL and AReaL on one workload and one cost model.

Two subpackages and a command line: ``model`` (cost, workload, engine, event loop, metrics,
checks, runner: what a simulated run is; the policies it runs are ``reserve_occupy_peers``), ``studies`` (the questions asked of the model:
the source's experiments, the regime map, the clairvoyant bound, the frontier, diagnosis) and
``cli`` (``reserve-occupy simulate``). Imports run one way: cli -> studies -> model.
"""

from .model.core import PolicyError, SimulationError, SimulationStalled, Simulator
from .model.cost import PRESETS, CostModel, load_cost, preset
from .model.workload import (TraceError, Workload, WorkloadError, generate, load_trace,
                             load_workload)

__all__ = ["CostModel", "PRESETS", "PolicyError", "SimulationError", "SimulationStalled",
           "Simulator", "Workload", "WorkloadError", "generate", "load_cost", "load_workload",
           "preset",
           "TraceError", "load_trace"]  # older names of WorkloadError and load_workload
