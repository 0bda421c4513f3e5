"""The run around the round engine: the loop, the run folder and its recorder, checkpoints,
integrity, resume, the summary, signals and launching ranks."""
