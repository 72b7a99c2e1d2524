"""The simulator's model: what a run of asynchronous RL costs and how each staleness control
schedules it.

``cost`` (how long things take, named presets), ``workload`` (workload files and the synthetic
generator), ``engine`` (one continuous-batching instance in closed form), ``core`` (the event loop
and ledger: a ``Host`` of the staleness controls, which live in ``reserve_occupy_peers``, one
module each, beneath the simulator and the runtime), ``filtering`` (reward filtering),
``metrics`` (what a run measured), ``checks`` (conservation, staleness bound, batch sizes,
determinism) and ``runner`` (run one or many simulations). The studies in ``..studies`` use it;
nothing here imports them.
"""
