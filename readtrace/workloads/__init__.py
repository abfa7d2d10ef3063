"""Example workloads: a deterministic checkpoint maker and loaders with the read patterns of real
model loaders (``python -m readtrace.workloads.checkpoint`` / ``python -m readtrace.workloads.load``).

    from readtrace.workloads import PATTERNS, load_checkpoint, make_checkpoint
    result, tensors = load_checkpoint([path], "fork-shared-fd", workers=4)   # LoadResult, {name: tensor}

(``load_checkpoint`` is ``readtrace.workloads.load.load``: the submodule ``load`` takes that name.)
"""

from readtrace.lazy import lazy_exports

_EXPORTS = {"make_checkpoint": ("checkpoint", "make_checkpoint"), "load_checkpoint": ("load", "load"),
            "digest": ("load", "digest"), "LoadResult": ("load", "LoadResult"), "PATTERNS": ("patterns", "PATTERNS")}
__all__ = sorted(_EXPORTS)
# Lazy, so that ``python -m readtrace.workloads.load`` does not import itself twice.
__getattr__ = lazy_exports(__name__, _EXPORTS)
