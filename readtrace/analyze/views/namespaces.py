"""Who and what a container sees: recorded tasks in another PID namespace with the ids they have there,
and files named in another mount namespace with the host's path of each (trace tables ``tasks`` and
``files.host_path``; empty for a trace of the recorder's own namespaces or from before them)."""

from __future__ import annotations

from readtrace.trace import Trace


def container_view(trace: Trace) -> dict:
    """``processes``: [{pid, ns_pid, threads: {tid: ns_tid}}] of processes whose ids differ in their
    namespace; ``files``: [{path, host_path}] where the host's path differs from the container's, the
    largest first."""
    tasks = trace.tasks
    moved = tasks[(tasks["pid"] != tasks["ns_pid"]) | (tasks["tid"] != tasks["ns_tid"])]
    processes = []
    for pid, rows in moved.groupby("pid", sort=True):
        processes.append({"pid": int(pid), "ns_pid": int(rows["ns_pid"].iloc[0]),
                          "threads": {int(t): int(n) for t, n in zip(rows["tid"], rows["ns_tid"], strict=True)}})
    files = trace.files
    named = files[files["host_path"].notna() & (files["host_path"] != files["path"])]
    named = named.sort_values("size", ascending=False, kind="stable")  # the checkpoints first
    return {"processes": processes,
            "files": [{"path": p, "host_path": h} for p, h in zip(named["path"], named["host_path"], strict=True)]}
