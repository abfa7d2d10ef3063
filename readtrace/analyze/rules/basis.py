"""What each finding rests on: ``Finding.basis`` (the view and how it was obtained) and
``Finding.inferred`` (that view was inferred, not seen). Read from the trace's meta (trace/views.py)."""

from __future__ import annotations

from readtrace.analyze.rules.types import Finding
from readtrace.trace import views

_PAGE_CODES = ("COLD_CACHE", "CACHE_EVICTED_REREAD")
_FUSE_CODES = ("SMALL_FUSE_READAHEAD",)


def _recorder(meta: dict) -> str:
    return "strace" if views.backend(meta) == views.BACKEND_PTRACE else "eBPF"


def _fuse_source(meta: dict) -> str:
    log = meta.get("fuse_view")
    if not isinstance(log, dict):
        return "FUSE requests (eBPF)"
    timing = "" if log.get("timed") else "; the log has no times: line order taken as time order"
    return f"FUSE requests from the gcsfuse log ({log.get('read_lines', '?')} ReadFile lines{timing})"


def annotate(f: Finding, meta: dict) -> None:
    """Fill ``f.basis`` and ``f.inferred`` from what the trace saw."""
    how = views.inferred(meta)
    view = getattr(f, "view", None)
    if view == "residency":
        f.inferred = True
        f.basis = (f"fault order inferred from {how.get(views.PAGE_FAULTS, 'residency sampling')}: "
                   f"{getattr(f, 'tasks', '?')} read fronts advanced through one mapping at once; the threads "
                   "behind them were not seen")
    elif view == "fuse_handle" or f.code in _FUSE_CODES:
        f.basis = _fuse_source(meta)
    elif f.code in _PAGE_CODES:
        if views.PAGE_CACHE in how:
            f.inferred = True
            f.basis = (f"page-cache misses inferred from {how[views.PAGE_CACHE]}: pages that became resident "
                       "during the run; misses between two samples that were evicted again are not seen")
        else:
            f.basis = "page-cache misses (eBPF)"
    elif f.code == "MMAP_FAULT_STORM" or getattr(f, "mapping", False):
        f.basis = "page faults (eBPF)"
    elif f.code == "LOST_EVENTS":
        f.basis = "the recorder's own counters"
    else:
        f.basis = f"syscalls ({_recorder(meta)})"
