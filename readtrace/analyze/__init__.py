"""Pure analysis of a trace: streams, classification, interleave, findings (no drawing here)."""

from readtrace.analyze.analysis import Analysis, analyze
from readtrace.analyze.finding import Finding
from readtrace.analyze.thresholds import Thresholds

__all__ = ["Analysis", "Finding", "Thresholds", "analyze"]
