"""readtrace: why a model load is slow on FUSE and network file systems, and the proven fix."""

__version__ = "0.1.0"
