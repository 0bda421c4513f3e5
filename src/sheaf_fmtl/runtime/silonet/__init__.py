"""The authenticated silo transport (``transport = tls``): silos that serve and dial only their graph
neighbours over gRPC with mutual TLS, each identified by a certificate of the federation's own
authority (:mod:`.certs`), exchanging raw tensor bytes behind a small typed header (:mod:`.wire`).
The links and their checks: :mod:`.links`; the reductions and gathers over them: :mod:`.group`; the
edge exchange: :mod:`sheaf_fmtl.runtime.engine.silo_transport`; three attacks the servers refuse:
:mod:`.attacks`."""
