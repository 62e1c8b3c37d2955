"""Regularizers: hypercubes, interval-arithmetic drift bounds and the InTAct terms."""
