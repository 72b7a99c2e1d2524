"""A discrete-event simulator of asynchronous RL: the Reserve–Occupy controller against the
staleness controls of verl, NeMo-RL, TRL, ROLL and AReaL on one workload and one cost model.

Modules: ``cost`` (how long things take, named presets), ``workload`` (trace files and the
synthetic generator), ``engine`` (one continuous-batching instance in closed form), ``core`` (the
event loop and ledger), ``policies`` (one module per staleness control), ``metrics`` (what a run
measured), ``checks`` (conservation, staleness bound, batch sizes, determinism), ``runner`` (run
one or many simulations), ``plots``, ``experiments`` (the source's experiments) and ``cli``.
"""

from .core import PolicyError, SimulationError, SimulationStalled, Simulator
from .cost import PRESETS, CostModel, load_cost, preset
from .workload import TraceError, Workload, generate, load_trace

__all__ = ["CostModel", "PRESETS", "PolicyError", "SimulationError", "SimulationStalled",
           "Simulator", "TraceError", "Workload", "generate", "load_cost", "load_trace", "preset"]
