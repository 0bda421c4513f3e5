"""The run folder: which folders may be written and claiming one (:mod:`.rundir`), its marker and
lock (:mod:`.folderlock`), the ledger of what the library wrote there beyond a run's own files
(:mod:`.ledger`), clearing it (:mod:`.clearing`), and the writer of its files (:mod:`.recorder`)."""
