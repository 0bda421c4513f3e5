"""The training step every algorithm shares: local SGD steps and epochs, the local optimizer and its
schedule, the coupling term and its own step, the default coupling strength, the memory a coupling
will hold, and the snapshots of state for checkpoints."""
