"""Sheaf-FMTL's map modes: the paper's learned maps (:mod:`.learned`, Algorithm 1), maps that relate
coordinates (:mod:`.coordinates`: ``redrawn``, ``features``, ``aligned``), proxies between
architectures (:mod:`.proxy`), maps given by what the models compute (:mod:`.functional`), the
edge weights learned from the exchange (:mod:`.edge_weights`) and ``maps = auto``'s choice
(:mod:`.auto`)."""
