"""Findings, Drishti-style: code, severity, one line with numbers, evidence, a concrete lever.

Each rule is a function ``Analysis -> list[Finding]``; ``RULES`` lists them in report order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze import interleave
from readtrace.analyze.accesses import SOURCE_READ
from readtrace.analyze.analysis import Analysis, Finding, lost_events
from readtrace.analyze.filesystems import fs_profile
from readtrace.analyze.units import fmt_bytes, fmt_pct

SEVERITIES = ("high", "warn", "info")
FIX_HINT = "`readtrace fix --compare` reruns it cold with sequential prefetch and an own-fd loader"


def _hist_line(hist: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in hist.items() if v) or "-"


def _fs_note(fstype: str) -> str:
    return fstype or "an unknown file system"


def _task_lines(a: Analysis, kind: str, code: int, limit: int = 6) -> list[str]:
    """The tasks' own figures inside one shared stream, in offset order."""
    t = a.stream_tasks
    t = t[(t["kind"] == kind) & (t["code"] == code)].sort_values("first_offset").head(limit)
    return [f"task {r.tid}: {fmt_pct(r.consecutive_fraction)} consecutive, {fmt_pct(r.sequential_fraction)} "
            f"sequential on its own, {fmt_bytes(r.bytes)} from offset {r.first_offset} to {r.last_end}"
            for r in t.itertuples()]


def shared_fd_interleave(a: Analysis) -> list[Finding]:
    s = a.streams
    hits = s[s["kind"].isin(["fuse_handle", "ofd"]) & (s["interleaved"] == True)]  # noqa: E712
    out = []
    # One finding per file: the FUSE handle when the daemon's view was recorded, else the open file.
    for file_id, group in hits.groupby("file_id", sort=False):
        row = group.sort_values("kind", key=lambda k: k != "fuse_handle").iloc[0]
        prof = fs_profile(row["fstype"])
        # faults on one mapping: the "open file" is the mapping, whichever view (ofd or handle) we cite
        mapping = bool(((group["kind"] == "ofd") & (group["faults"] > group["accesses"] / 2)).any())
        what = "FUSE handle" if row["kind"] == "fuse_handle" else "open file"
        what = f"mmap mapping ({what})" if mapping else what
        inode = int(a.handles["nodeid"].iloc[int(row["code"])]) if row["kind"] == "fuse_handle" \
            else int(a.files.loc[file_id, "ino"]) if file_id in a.files.index else 0
        handle = int(row["fh"]) if row["kind"] == "fuse_handle" else int(row["code"])
        acc = a.fuse if row["kind"] == "fuse_handle" else a.app
        rows = interleave.stream_rows(acc, int(row["code"]) if row["kind"] == "fuse_handle" else int(row["ofd"]),
                                      int(row["opened"]), int(file_id))
        message = (f"{int(row['tasks'])} tasks read {row['path']} through one {what} on {_fs_note(row['fstype'])}: "
                   f"every task >= {fmt_pct(row['min_task_consecutive_fraction'])} consecutive on its own, "
                   "the merged "
                   f"stream {fmt_pct(row['consecutive_fraction'])} consecutive "
                   f"({fmt_pct(1 - row['in_order_fraction'])} of bytes out of order), "
                   f"score {row['interleave_score']:.2f}")
        if prof.per_handle_stream:
            message += (f"; gcsfuse replay: {int(row['gcsfuse_requests'])} backend requests vs "
                        f"{int(row['gcsfuse_sequential_requests'])} for one sequential reader")
            severity = "high"
        else:
            message += f" (harmless here: {prof.family} keeps no per-handle read stream)"
            severity = "info"
        lever = ("load without faulting the mapping from several threads: read with large sequential reads "
                 "(safetensors load_file(..., backend=\"pread\")) or prefetch the file sequentially first"
                 if mapping else
                 "open one fd per worker (open the file inside each worker, after fork) or read it with one "
                 "sequential reader")
        out.append(Finding(
            "SHARED_FD_INTERLEAVE", severity, message,
            evidence=interleave.evidence(acc, rows, inode, handle, a.thresholds.evidence_lines)
            + _task_lines(a, row["kind"], int(row["code"])),
            recommendation=f"{lever}; {FIX_HINT}" + (f"; {prof.levers}" if prof.per_handle_stream else ""),
            file=row["path"]))
    return out


def random_on_fuse_handle(a: Analysis) -> list[Finding]:
    th, s = a.thresholds, a.streams
    handles = s[s["kind"] == "fuse_handle"]
    # Files on a per-handle fs without a recorded FUSE view: judge the open file instead.
    ofd = s[(s["kind"] == "ofd") & ~s["file_id"].isin(handles["file_id"])]
    cand = pd.concat([handles, ofd])
    cand = cand[(cand["interleaved"] != True)  # noqa: E712  (interleave explains its own randomness)
                & ~cand["file_id"].isin(s.loc[s["interleaved"] == True, "file_id"])  # noqa: E712
                & (cand["seek_fraction"] >= th.random_handle_fraction)
                & (cand["gcsfuse_requests"] >= th.random_handle_min_requests)]
    out = []
    for _, row in cand.iterrows():
        prof = fs_profile(row["fstype"])
        if not prof.per_handle_stream:
            continue
        name = f"handle {int(row['fh'])}" if row["kind"] == "fuse_handle" else row["stream"]
        after = int(row["gcsfuse_random_after"])
        turned = f"turns random at read #{after}" if after else "stays sequential"
        out.append(Finding(
            "RANDOM_ON_FUSE_HANDLE", "high" if row["gcsfuse_read_type"] == "random" else "warn",
            f"{name} on {row['path']} ({row['fstype']}): {fmt_pct(row['seek_fraction'])} of "
            f"{fmt_bytes(row['bytes'])} read after a seek ({int(row['gcsfuse_seeks'])} seeks); gcsfuse replay "
            f"{turned}: {int(row['gcsfuse_requests'])} backend requests vs "
            f"{int(row['gcsfuse_sequential_requests'])} sequential",
            evidence=[f"top strides (gap, count): {row['top_strides']}", f"top sizes: {row['top_sizes']}"],
            recommendation="prefetch the file sequentially into the page cache before the load, or read it in "
                           f"file order; {FIX_HINT}; {prof.levers}",
            file=row["path"]))
    return out


def small_requests(a: Analysis) -> list[Finding]:
    """Many reads under 1 MiB on a file big enough to be read in large ones (a 300 KiB .py file read in
    8 KiB pieces is not a finding)."""
    th = a.thresholds
    reads = a.app.source == SOURCE_READ
    reads &= a.app.file >= 0  # -1: a file the trace could not name
    file, nbytes = a.app.file[reads], a.app.nbytes[reads]
    ids = a.files.index.to_numpy()  # file ids (the table is filtered and sorted)
    n_ids = int(max(ids.max(initial=-1), file.max(initial=-1))) + 1
    total = np.bincount(file, minlength=n_ids)[ids]
    small_count = np.bincount(file[nbytes < th.small_request_size], minlength=n_ids)[ids]
    big_enough = np.maximum(a.files["size"].to_numpy(), a.files["bytes_read"].to_numpy()) >= \
        th.small_request_min_file_bytes
    flagged = (total >= th.small_request_min_count) & big_enough & \
        (small_count > th.small_request_fraction * np.maximum(total, 1))
    out = []
    for pos in np.flatnonzero(flagged):
        row, file_id = a.files.iloc[pos], ids[pos]
        sizes = nbytes[file == file_id]
        small, count = int(small_count[pos]), int(total[pos])
        prof = fs_profile(row["fstype"])
        out.append(Finding(
            "SMALL_REQUESTS", "warn" if prof.remote else "info",
            f"{small} of {count} reads of {row['path']} ({fmt_pct(small / count)}) are smaller than "
            f"{fmt_bytes(th.small_request_size)} (median {fmt_bytes(np.median(sizes))}) on "
            f"{_fs_note(row['fstype'])}",
            evidence=[f"sizes: {_hist_line(row['size_hist'])}", f"top sizes (bytes, count): {row['top_sizes']}"],
            recommendation="read in chunks of 1 MiB or more (whole tensors, a buffered reader) or prefetch the "
                           f"file sequentially; {FIX_HINT}" + (f"; {prof.levers}" if prof.remote else ""),
            file=row["path"]))
    return out


def mmap_fault_storm(a: Analysis) -> list[Finding]:
    th = a.thresholds
    out = []
    for _, row in a.files[a.files["page_faults"] >= th.mmap_fault_min_count].iterrows():
        prof = fs_profile(row["fstype"])
        tasks = a.pages[(a.pages["op"] == "fault") & (a.pages["file"] == row.name)]["tid"].nunique()
        out.append(Finding(
            "MMAP_FAULT_STORM", "high" if prof.remote else "info",
            f"{int(row['page_faults'])} page faults by {tasks} task(s) on the mapping of {row['path']} "
            f"({fmt_bytes(row['mmap_bytes'])} mapped in, {fmt_pct(row['cache_miss_fraction'])} missed the "
            f"cache) on {_fs_note(row['fstype'])}",
            evidence=[f"mmap bytes {int(row['mmap_bytes'])}, read() bytes {int(row['read_bytes'])}, "
                      f"readahead windows {int(row['readahead_windows'])}"],
            recommendation="read the file with large sequential reads instead of faulting it in "
                           "(safetensors load_file(..., backend=\"pread\")) or prefetch it sequentially into the "
                           f"page cache first; {FIX_HINT}",
            file=row["path"]))
    return out


def cold_cache(a: Analysis) -> list[Finding]:
    """Per file: most of what the file gave the load came from storage, not the page cache. Warm
    libraries read in the same run do not dilute it."""
    th = a.thresholds
    if a.summary["cache_miss_bytes"] is None:
        return []
    f = a.files
    cold = f[(f["cache_miss_bytes"] >= th.cold_cache_min_bytes)
             & (f["cache_miss_fraction"] >= th.cold_cache_miss_fraction)]
    if cold.empty:
        return []
    miss, total = int(cold["cache_miss_bytes"].sum()), int(cold["bytes_read"].sum())
    return [Finding(
        "COLD_CACHE", "warn",
        f"{fmt_bytes(miss)} of {fmt_bytes(total)} read from {len(cold)} file(s) "
        f"({fmt_pct(min(1.0, miss / max(total, 1)))}) missed the page cache: the load ran cold",
        evidence=[f"{r['path']}: {fmt_bytes(r['cache_miss_bytes'])} fetched of {fmt_bytes(r['bytes_read'])} read"
                  for _, r in cold.head(5).iterrows()],
        recommendation="a cold load pays for every byte from storage: prefetch the files sequentially with "
                       f"large reads before loading, or keep them cached between runs; {FIX_HINT}",
        file=cold["path"].iloc[0])]


def cache_evicted_reread(a: Analysis) -> list[Finding]:
    th = a.thresholds
    out = []
    f = a.files
    again = f[(f["cache_refetched_bytes"] >= th.reread_min_bytes)
              & (f["cache_refetched_bytes"] >= th.reread_min_fraction * f["cache_miss_unique_bytes"])]
    for _, row in again.iterrows():
        dropped = " or dropped by the FUSE daemon when the file was opened again" \
            if str(row["fstype"]).startswith("fuse") else ""
        out.append(Finding(
            "CACHE_EVICTED_REREAD", "warn",
            f"{fmt_bytes(row['cache_refetched_bytes'])} of {row['path']} entered the page cache more than once "
            f"({fmt_bytes(row['cache_miss_bytes'])} fetched, {fmt_bytes(row['cache_miss_unique_bytes'])} "
            f"distinct): pages were evicted{dropped} before they were used again",
            evidence=[f"re-read amplification of the file stream: {row['reread_amplification']:.2f}"],
            recommendation="read each byte once, in file order (one sequential pass), and give the load more "
                           "page cache (lower memory pressure, raise the cgroup memory limit)",
            file=row["path"]))
    return out


def small_fuse_readahead(a: Analysis) -> list[Finding]:
    th = a.thresholds
    out = []
    if len(a.fuse) == 0:
        return out
    conn = a.handles["connection"].to_numpy()[a.fuse.ofd]
    for file_id in np.unique(a.fuse.file):
        mask = a.fuse.file == file_id
        sizes = a.fuse.nbytes[mask]
        median = float(np.median(sizes))
        if len(sizes) < th.fuse_readahead_min_requests or median > th.fuse_readahead_small:
            continue
        path = a.files.loc[file_id, "path"] if file_id in a.files.index else "<unknown file>"
        c = int(np.bincount(conn[mask]).argmax())
        out.append(Finding(
            "SMALL_FUSE_READAHEAD", "warn",
            f"{len(sizes)} FUSE READ requests for {path} with median size {fmt_bytes(median)}: the kernel's FUSE "
            "read-ahead is at its 128 KiB default",
            evidence=[f"FUSE connection {c}: {fmt_bytes(int(sizes.sum()))} in {len(sizes)} requests"],
            recommendation=f"raise it (root): echo {th.fuse_readahead_recommended_kb} > "
                           f"/sys/class/bdi/0:{c}/read_ahead_kb, and mount with max_read of 1 MiB or more",
            file=path))
    return out


def lost(a: Analysis) -> list[Finding]:
    n = lost_events(a.meta)
    if n <= 0:
        return []
    detail = a.meta.get("lost_detail", a.meta.get("lost_events"))
    return [Finding(
        "LOST_EVENTS", "high",
        f"{n} events were lost while recording: every figure in this report is incomplete (a lower bound)",
        evidence=[f"lost per source: {detail}"] if isinstance(detail, dict) else [],
        recommendation="record again with a larger ring buffer or fewer probes, and keep the machine less busy")]


RULES = (lost, shared_fd_interleave, random_on_fuse_handle, mmap_fault_storm, small_fuse_readahead,
         small_requests, cold_cache, cache_evicted_reread)


def find_all(a: Analysis) -> list[Finding]:
    """Every rule's findings, most severe first (stable within a severity)."""
    found = [f for rule in RULES for f in rule(a)]
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))
