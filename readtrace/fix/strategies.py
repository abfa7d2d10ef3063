"""The fix strategies, by name (kept import-free: the command line reads them before loading torch)."""

STRATEGIES = ("none", "prefetch", "own-fd", "both", "auto")  # what the shim accepts; none = record only
FIX_STRATEGIES = STRATEGIES[1:]  # what `readtrace fix` applies
