"""Pure analysis of a trace: streams, classification, interleave, findings (no drawing here)."""

from readtrace.lazy import lazy_exports

# Lazy: `readtrace --help` reads the threshold names without importing pandas.
_EXPORTS = {"Analysis": ("analysis", "Analysis"), "analyze": ("analysis", "analyze"),
            "Finding": ("rules.types", "Finding"), "Thresholds": ("rules.thresholds", "Thresholds")}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
