"""Metrics: what a run folder's files hold (results), bits and FLOPs, memory."""
