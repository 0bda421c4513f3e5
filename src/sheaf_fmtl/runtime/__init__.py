"""Running the algorithms, in two layers.

:mod:`.engine`, the round engine: a run's simulation (:class:`~.engine.simulate.Simulation`: one
synchronous round, its divergence check, bits and FLOPs summed over processes), its transports
(in one process, or one rank's shard over ``torch.distributed``), the placement of clients on shards, the
simulated faults and the divergence message.

:mod:`.run`, the run: the round loop around the engine (evaluations, callbacks, stops), the run
folder (its marker and lock, the recorder of ``metrics.csv`` and ``config.yaml``, the summary),
checkpoints and their integrity, resume, signals and what the ranks agree after each round,
launching the ranks of a multi-process run.

The engine imports nothing of the run (``tests/test_layering.py`` checks it)."""
