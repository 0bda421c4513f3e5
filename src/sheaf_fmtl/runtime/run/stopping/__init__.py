"""How a run stops before its last round: on a signal (:mod:`.interrupt`), every rank after the same
round (:mod:`.agreement`), on a full disk or a failure of the user's code (:mod:`.full`)."""
