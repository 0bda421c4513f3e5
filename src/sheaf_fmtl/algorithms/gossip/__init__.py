"""Whole models gossiped along half-edges: D-PSGD (:mod:`.dpsgd`), dFedU (:mod:`.dfedu`), the
payload layout they share (:mod:`.payload`), and their compressed gossip (CHOCO-SGD's
:mod:`.compressed`, :mod:`.powergossip`)."""
