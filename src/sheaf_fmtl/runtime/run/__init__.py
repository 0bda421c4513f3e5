"""The run around the round engine: the round loop (:mod:`.loop`) and its preparation
(:mod:`.prepare`, :mod:`.disks`: the folders a process group's ranks write), in rooms below it
that import down only: the run folder (:mod:`.folder`), checkpoints and the final state
(:mod:`.checkpoints`), how a run stops early (:mod:`.stopping`), callbacks and loggers
(:mod:`.callbacks`), the summary and scores (:mod:`.scoring`); and above the loop, starting a run
(:mod:`.launching`: one launcher for every command, the ranks, resume)."""
