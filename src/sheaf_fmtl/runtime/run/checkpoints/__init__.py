"""A run's state on disk: resumable checkpoints, their format and writer (:mod:`.checkpoint`), reading
them (:mod:`.checkpoint_read`), what one process's shard holds (:mod:`.shard`), what a checkpoint
vouches for (:mod:`.integrity`), and the final state, gathered across processes (:mod:`.gather`)."""
