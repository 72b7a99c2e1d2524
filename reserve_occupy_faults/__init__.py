"""Deterministic fault injection: seeded schedules of engine crashes, hung generations, process
and trainer crashes and lost trainer ranks with restarts from the event log, NaN rewards and
duplicate, late or unknown completion messages, run against the real driver, controller,
durability and recovery code on a virtual clock (``harness``) and in the simulator (``sim``);
every run is checked (``properties``), and broken variants (``variants``) show the checks can
fail. ``python -m reserve_occupy_faults``. ``checks`` is the old name of ``properties``, kept as a
shim for one release."""
