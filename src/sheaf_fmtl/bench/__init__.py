"""Benchmarks (``sheaf-fmtl bench``): Sheaf-FMTL rounds against the memory-bandwidth floor and the loop
reference, the cohort gradients, the scaling sweep; :mod:`.harness` runs them all."""
