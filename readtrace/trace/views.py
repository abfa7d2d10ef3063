"""What a trace saw and what it could not: ``meta.backend``, ``meta.missing_views`` and ``meta.inferred``.

A trace holds up to four views. The eBPF recorder sees all of them; the unprivileged ptrace backend
(strace) sees the syscalls only, plus what the residency sampler infers of the page cache; a gcsfuse
log import sees the FUSE requests only. Findings and every report output read this module to say
what could not be seen and what that means (one place for the wording).
"""

from __future__ import annotations

SYSCALLS = "syscalls"  # events: open/read/pread/mmap/... with pid, tid, fd, offsets
PAGE_FAULTS = "page_faults"  # pages: which thread faulted which page of a mapping, in order
PAGE_CACHE = "page_cache"  # pages: cache misses, readahead windows (what came from storage)
FUSE = "fuse"  # fuse: every FUSE request (handle, thread, offset, size)
ALL_VIEWS = (SYSCALLS, PAGE_FAULTS, PAGE_CACHE, FUSE)

BACKEND_EBPF = "ebpf"
BACKEND_PTRACE = "ptrace"
BACKEND_GCSFUSE_LOG = "gcsfuse-log"

# What a report says when a view is missing.
CONSEQUENCE = {
    SYSCALLS: "no syscall view: no per-process open files, fds or read() calls; findings rest on the FUSE "
              "daemon's requests",
    PAGE_FAULTS: "no page-fault view: which thread touched which page of an mmap mapping is not known",
    PAGE_CACHE: "no page-cache view: cache misses and readahead are not known (COLD_CACHE and re-reads "
                "cannot be judged)",
    FUSE: "no FUSE view: the daemon's requests are not known; handle-level figures come from the open files",
}


# ... and when it was inferred instead ("{how}": meta.inferred's text, e.g. "residency sampling every 5 ms").
INFERRED = {
    PAGE_FAULTS: "page-fault order not seen: read fronts inferred from {how} (how many advanced at once and "
                 "whether each moved forward; the threads behind them are not known)",
    PAGE_CACHE: "page-cache misses not seen: pages that became resident, from {how} (a page that came and went "
                "between two samples is missed)",
}


def backend(meta: dict) -> str:
    """The backend that wrote the trace (traces from before the field: eBPF)."""
    return str(meta.get("backend") or BACKEND_EBPF)


def missing_views(meta: dict) -> list[str]:
    return [str(v) for v in meta.get("missing_views") or []]


def inferred(meta: dict) -> dict[str, str]:
    """view -> how it was inferred instead of seen (e.g. page_faults: residency sampling every 5 ms)."""
    got = meta.get("inferred") or {}
    return {str(k): str(v) for k, v in got.items()} if isinstance(got, dict) else {}


def limitations(meta: dict) -> list[str]:
    """One line per missing or inferred view, for every report output."""
    lines = []
    guessed = inferred(meta)
    for view in missing_views(meta):
        if view in guessed:
            lines.append(INFERRED.get(view, view + " not seen, inferred from {how}").format(how=guessed[view]))
        else:
            lines.append(CONSEQUENCE.get(view, f"no {view} view"))
    hidden = (meta.get("sampler") or {}).get("unmeasurable", 0)
    if hidden:
        lines.append(f"page-cache residency of {hidden} file(s) not measurable: the kernel shows it only to the "
                     "file's owner or writer (mincore/cachestat), so nothing is inferred for them")
    attached = meta.get("attached")
    if isinstance(attached, dict) and attached.get("not_known"):  # record -p: started mid-way
        got = attached.get("recovered") or {}
        lines.append(f"attached to running processes at {attached.get('start_time')}: {attached['not_known']} "
                     f"(recovered from /proc: {got.get('open_files', 0)} open file(s), "
                     f"{got.get('mappings', 0)} mapping(s))")
    return lines
