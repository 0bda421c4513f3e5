"""The round engine: the simulation, its transports, shards and faults; it imports nothing of
:mod:`sheaf_fmtl.runtime.run`."""
