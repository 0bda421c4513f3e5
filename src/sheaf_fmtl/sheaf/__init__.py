"""Cellular sheaves on client graphs: graph, stalks, stacked maps, operators, dense oracle."""
