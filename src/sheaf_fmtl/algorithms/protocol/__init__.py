"""The protocol every algorithm follows (:mod:`.algorithm`: ``init / local / send / receive``, the
run's context, the registry's decorators) and the snapshots of state its checkpoints take."""
