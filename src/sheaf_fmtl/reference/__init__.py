"""Independent oracles of the mathematics, used by the tests and the bench, never by a run.

- :mod:`.dense`: the coboundary and the sheaf Laplacian as dense matrices built entry by entry;
- :mod:`.loop`: Algorithm 1 written literally, one Python loop over clients and one over edges.

They are slow on purpose: they follow the paper's formulas with no stacking, batching or deferred
updates, so that the fast path (``sheaf_fmtl.sheaf``, ``sheaf_fmtl.algorithms.maps.learned``) can be
checked against them and timed against them.
"""
