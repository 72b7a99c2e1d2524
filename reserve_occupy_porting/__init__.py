"""The porting kit: what lets another implementation of Reserve–Occupy prove it is right.

* ``checker``     -- strict replay of a trace through the reference controller, or a lenient
  check of the safety invariants alone; ``check_trace`` is its command line.
* ``safety``      -- the lenient mode's invariant tracker (needs no placements).
* ``compare``     -- field-by-field comparison of a logged event with the reference's outcome.
* ``report``      -- buffer tables and messages for a divergence or a violation.
* ``drive``       -- seeded random drivers that exercise a controller and record its trace.
* ``vectors``     -- the conformance corpus: generation, reading and writing
  ``reserve_occupy_porting/corpus``.
* ``vector_runner`` -- the adapter interface a port implements, and the runner that feeds it
  vectors.
* ``conformance`` -- the ``conformance`` command line (run, ``--check``, ``--regenerate``).

The trace format itself lives in the core, ``reserve_occupy.trace``. ``workload`` and ``runner``
are the old names of ``drive`` and ``vector_runner``, kept as shims for one release (the
simulator has modules of those names).
"""
