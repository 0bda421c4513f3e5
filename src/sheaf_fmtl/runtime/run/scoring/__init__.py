"""What a run scores: ``summary.json``'s fields (:mod:`.summary`), and given models scored on
another split of their run's data (:mod:`.scoring`)."""
