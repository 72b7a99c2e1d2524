"""Studies run on the simulator's model (``..model``), one question each.

``experiments`` (the source's experiments and the regime map, ``make sim-experiments``),
``frontier`` (policies and extension prototypes against the clairvoyant bound), ``bound`` (the
clairvoyant limit: a provable bound and the best constructed schedule), ``regimes`` (the regime
map), ``diagnose`` (one cell taken apart), ``scenarios``, ``heatmaps``, ``plots`` and ``report``
(tables and figures), ``pages`` (the generated tables of docs/: which results file each is
rendered from). docs/sim/ has one page per study.
"""
