"""Crash recovery (docs/recovery.md): the controller's durable event log in the trace format
(``journal``), the trajectory store and atomic trainer checkpoints (``store``), a run
directory's state and the driver's hooks into it (``durable``), and the procedure that rebuilds
a crashed run from them (``resume``)."""
