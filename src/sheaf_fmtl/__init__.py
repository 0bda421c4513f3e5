"""Sheaf-FMTL: decentralized federated multi-task learning with cellular sheaves."""
__version__ = "0.1.0"
