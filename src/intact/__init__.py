"""InTAct: Interval-based Task Activation Consolidation - reference experiment pipeline."""

__version__ = "0.2.0"
