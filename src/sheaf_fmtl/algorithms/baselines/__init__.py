"""The baselines besides gossip: local training, the server's (FedAvg, Ditto, pFedMe, Per-FedAvg,
over :mod:`.server`), the fine-tuned ones (:mod:`.finetune`), partial personalisation, and the
graph-learning ones (pFedGraph, DPFL)."""
