"""Metrics: recorder, bits, memory."""
