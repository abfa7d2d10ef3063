"""Which recorder runs: eBPF where the kernel lets us, else ptrace (strace + residency sampler).

``auto`` takes eBPF when the prerequisite check (the one ``readtrace doctor`` prints) passes and ptrace
otherwise, with one notice saying why and what the trace will lack.
"""

from __future__ import annotations

from readtrace.errors import ReadtraceError, UsageError
from readtrace.trace import views

CHOICES = ("auto", views.BACKEND_EBPF, views.BACKEND_PTRACE)


def first_missing_prerequisite() -> str | None:
    """The doctor's line for the first missing eBPF requirement, or None when eBPF can record."""
    from readtrace.record.prereq import require_prerequisites

    try:
        require_prerequisites()
    except ReadtraceError as e:
        return str(e)
    except OSError as e:  # a check that could not even look (permissions): not usable either
        return f"cannot check the eBPF prerequisites: {e}"
    return None


def choose_backend(requested: str) -> tuple[str, str | None]:
    """(backend, notice or None)."""
    if requested not in CHOICES:
        raise UsageError(f"{{option}} {requested!r}: expected one of {', '.join(CHOICES)}", option="backend")
    if requested != "auto":
        return requested, None
    missing = first_missing_prerequisite()
    if missing is None:
        return views.BACKEND_EBPF, None
    reason = missing.split("; fix:")[0]
    return views.BACKEND_PTRACE, (
        f"readtrace: eBPF not available ({reason}): recording with strace (--backend ptrace). The trace "
        "has no page-fault order and no FUSE requests; page-cache residency is sampled instead. "
        "For the full view: sudo readtrace record ... (see: readtrace doctor)")
