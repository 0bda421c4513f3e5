"""Benchmarks: the loop reference of Algorithm 1 and the bandwidth-floor harness (``sheaf-fmtl bench``)."""
