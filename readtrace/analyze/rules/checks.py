"""Findings, Drishti-style: each rule is a function ``Analysis -> list[Finding]`` returning typed
figures (readtrace/analyze/rules/types.py); readtrace/report/ renders their prose. ``RULES`` lists the rules
in report order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from readtrace.analyze.rules import basis
from readtrace.analyze.rules.types import (
    SEVERITIES,
    CacheEvictedReread,
    ColdCache,
    Finding,
    LostEvents,
    MmapFaultStorm,
    RandomOnFuseHandle,
    SharedFdInterleave,
    SmallFuseReadahead,
    SmallRequests,
)
from readtrace.analyze.storage.measured import judged
from readtrace.analyze.views import interleave
from readtrace.analyze.views.accesses import SOURCE_READ
from readtrace.analyze.views.jumps import handle_jumps
from readtrace.fs.knowledge import FsProfile
from readtrace.pagecache.reclaim import explain
from readtrace.trace.completeness import lost_events

if TYPE_CHECKING:
    from readtrace.analyze.analysis import Analysis


def _judge(a: Analysis, fstype: str, path: str | None) -> FsProfile:
    """What the file system of ``path`` does: the knowledge table's prior, or its mount's measured
    profile where there is one (readtrace/analyze/storage/measured.py)."""
    profile = None
    if a.mount_profiles and path is not None:
        point = a.files.loc[a.files["path"] == path, "mountpoint"]
        profile = a.mount_profiles.get(point.iloc[0]) if len(point) else None
    return judged(fstype, profile)


def _fs(fstype: str, prof: FsProfile) -> dict:
    """The common file-system fields of a finding."""
    return {"fstype": fstype or "", "fs_family": prof.family, "fs_levers": prof.levers, "fs_known": prof.known}


def _handle_severity(prof, severity: str = "high") -> str:
    """A pattern that costs on a per-handle file system: ``severity`` where the table knows the file
    system punishes it, "warn" where that is only the generic judgement, "info" where it does not."""
    if not prof.per_handle_stream:
        return "info"
    return severity if prof.known else "warn"


def _task_rows(a: Analysis, kind: str, code: int, limit: int = 6) -> list[dict]:
    """The tasks' own figures inside one shared stream, in offset order."""
    t = a.stream_tasks
    t = t[(t["kind"] == kind) & (t["code"] == code)].sort_values("first_offset").head(limit)
    return [{"tid": int(r.tid), "consecutive_fraction": float(r.consecutive_fraction),
             "sequential_fraction": float(r.sequential_fraction), "bytes": int(r.bytes),
             "first_offset": int(r.first_offset), "last_end": int(r.last_end)} for r in t.itertuples()]


def _num(x) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


def _pairs(top) -> list:
    """``top_sizes``/``top_strides`` as plain ``[[value, count], ...]``."""
    return [[int(v), int(c)] for v, c in top] if isinstance(top, list | tuple | np.ndarray) else []


def shared_fd_interleave(a: Analysis) -> list[Finding]:
    s = a.streams
    hits = s[s["kind"].isin(["fuse_handle", "ofd"]) & (s["interleaved"] == True)]  # noqa: E712
    out = []
    # One finding per file: the FUSE handle when the daemon's view was recorded, else the open file.
    for file_id, group in hits.groupby("file_id", sort=False):
        row = group.sort_values("kind", key=lambda k: k != "fuse_handle").iloc[0]
        prof = _judge(a, row["fstype"], row["path"])
        # faults on one mapping: the "open file" is the mapping, whichever view (ofd or handle) we cite
        mapping = bool(((group["kind"] == "ofd") & (group["faults"] > group["accesses"] / 2)).any())
        inode = int(a.handles["nodeid"].iloc[int(row["code"])]) if row["kind"] == "fuse_handle" \
            else int(a.files.loc[file_id, "ino"]) if file_id in a.files.index else 0
        handle = int(row["fh"]) if row["kind"] == "fuse_handle" else int(row["code"])
        acc = a.fuse if row["kind"] == "fuse_handle" else a.app
        rows = interleave.stream_rows(acc, int(row["code"]) if row["kind"] == "fuse_handle" else int(row["ofd"]),
                                      int(row["opened"]), int(file_id))
        per_handle = prof.per_handle_stream
        out.append(SharedFdInterleave(
            _handle_severity(prof), file=row["path"], **_fs(row["fstype"], prof),
            view=row["kind"], mapping=mapping, per_handle=per_handle, tasks=int(row["tasks"]),
            min_task_consecutive_fraction=float(row["min_task_consecutive_fraction"]),
            consecutive_fraction=float(row["consecutive_fraction"]),
            out_of_order_fraction=float(1 - row["in_order_fraction"]), score=float(row["interleave_score"]),
            inode=inode, handle=handle,
            predicted_requests=int(row["gcsfuse_requests"]) if per_handle else None,
            sequential_requests=int(row["gcsfuse_sequential_requests"]) if per_handle else None,
            evidence=interleave.evidence(acc, rows, inode, handle, a.thresholds.evidence_lines),
            task_rows=_task_rows(a, row["kind"], int(row["code"]))))
    return out


def random_on_fuse_handle(a: Analysis) -> list[Finding]:
    th, s = a.thresholds, a.streams
    # Not a mapped file's streams: the order of its faults is how MMAP_FAULT_STORM (or the threads'
    # interleave) shows; nor a stream interleave explains.
    whole = s[s["kind"] == "file"]
    mapped = whole.loc[whole["faults"] > whole["accesses"] / 2, "file_id"]
    def jumping(streams: pd.DataFrame, measured: pd.Series | bool = False) -> pd.DataFrame:
        return streams[(streams["interleaved"] != True)  # noqa: E712  (interleave explains its own randomness)
                       & ~streams["file_id"].isin(s.loc[s["interleaved"] == True, "file_id"])  # noqa: E712
                       & ~streams["file_id"].isin(mapped)
                       & (((streams["seek_fraction"] >= th.random_handle_fraction)
                           & (streams["gcsfuse_requests"] >= th.random_handle_min_requests)) | measured)]

    fuse = s[s["kind"] == "fuse_handle"]
    # A handle read mostly in order can still lose seconds to a few jumps (each a new backend range):
    # it qualifies on the seconds its jumps measurably waited, whatever share of its bytes they moved.
    jumps, jump_wait = handle_jumps(a.fuse, len(a.handles))
    codes = fuse["code"].to_numpy(dtype=np.int64)
    handles = jumping(fuse, pd.Series(jump_wait[codes] >= th.warn_min_s, index=fuse.index))
    # The open file (the program's own order) where no FUSE handle of its file jumps: there is no FUSE
    # view, or the kernel's read-ahead merged the jumps into long requests that still start new backend
    # ranges (per-tensor preads out of file order on the lab mount: 46 % of the program's bytes after a
    # seek, 0.6 % of the handle's, and 3.6 s of waiting over a 1.6 s floor).
    ofd = jumping(s[s["kind"] == "ofd"])
    cand = pd.concat([handles, ofd[~ofd["file_id"].isin(handles["file_id"])]])
    out = []
    for _, row in cand.iterrows():
        prof = _judge(a, row["fstype"], row["path"])
        if not prof.per_handle_stream:
            continue
        is_handle = row["kind"] == "fuse_handle"
        jumped, waited = (int(jumps[row["code"]]), float(jump_wait[row["code"]])) if is_handle else (0, 0.0)
        costly = row["gcsfuse_read_type"] == "random" or waited >= th.high_min_s
        out.append(RandomOnFuseHandle(
            _handle_severity(prof, "high" if costly else "warn"), file=row["path"], **_fs(row["fstype"], prof),
            view=row["kind"], stream=row["stream"], handle=int(row["fh"]) if is_handle else None,
            jumps=jumped, jump_wait_s=waited,
            seek_fraction=float(row["seek_fraction"]), bytes=int(row["bytes"]), seeks=int(row["gcsfuse_seeks"]),
            random_after=int(row["gcsfuse_random_after"]), read_type=str(row["gcsfuse_read_type"]),
            predicted_requests=int(row["gcsfuse_requests"]),
            sequential_requests=int(row["gcsfuse_sequential_requests"]),
            top_strides=_pairs(row["top_strides"]), top_sizes=_pairs(row["top_sizes"])))
    return out


def small_requests(a: Analysis) -> list[Finding]:
    """Many reads under 1 MiB on a file big enough to be read in large ones (a 300 KiB .py file read in
    8 KiB pieces is not a finding)."""
    th = a.thresholds
    reads = a.app.source == SOURCE_READ
    reads &= a.app.file >= 0  # -1: a file the trace could not name
    file, nbytes = (a.app.file, a.app.nbytes) if reads.all() else (a.app.file[reads], a.app.nbytes[reads])
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
        prof = _judge(a, row["fstype"], row["path"])
        out.append(SmallRequests(
            "warn" if prof.remote else "info", file=row["path"], **_fs(row["fstype"], prof), remote=prof.remote,
            small=small, reads=count, small_bytes=th.small_request_size, median_bytes=float(np.median(sizes)),
            size_hist={k: int(v) for k, v in row["size_hist"].items() if v}, top_sizes=_pairs(row["top_sizes"])))
    return out


def mmap_fault_storm(a: Analysis) -> list[Finding]:
    th = a.thresholds
    out = []
    for _, row in a.files[a.files["page_faults"] >= th.mmap_fault_min_count].iterrows():
        prof = _judge(a, row["fstype"], row["path"])
        tasks = a.pages[(a.pages["op"] == "fault") & (a.pages["file"] == row.name)]["tid"].nunique()
        out.append(MmapFaultStorm(
            "high" if prof.remote else "info", file=row["path"], **_fs(row["fstype"], prof), remote=prof.remote,
            faults=int(row["page_faults"]), tasks=int(tasks), mmap_bytes=int(row["mmap_bytes"]),
            read_bytes=int(row["read_bytes"]), cache_miss_fraction=_num(row["cache_miss_fraction"]),
            readahead_windows=int(row["readahead_windows"])))
    return out


def cold_cache(a: Analysis) -> list[Finding]:
    """Per file: most of what the file gave the load came from storage, not the page cache. Warm
    libraries read in the same run do not dilute it."""
    th = a.thresholds
    if a.summary.cache_miss_bytes is None:
        return []
    f = a.files
    cold = f[(f["cache_miss_bytes"] >= th.cold_cache_min_bytes)
             & (f["cache_miss_fraction"] >= th.cold_cache_miss_fraction)]
    if cold.empty:
        return []
    miss, total = int(cold["cache_miss_bytes"].sum()), int(cold["bytes_read"].sum())
    first = cold["path"].iloc[0]
    return [ColdCache(
        "warn", file=first, **_fs(cold["fstype"].iloc[0], _judge(a, cold["fstype"].iloc[0], first)), files=len(cold), miss_bytes=miss,
        bytes_read=total, miss_fraction=min(1.0, miss / max(total, 1)),
        evidence=[{"path": r["path"], "miss_bytes": int(r["cache_miss_bytes"]), "bytes_read": int(r["bytes_read"])}
                  for _, r in cold.head(5).iterrows()])]


def cache_evicted_reread(a: Analysis) -> list[Finding]:
    th = a.thresholds
    out = []
    f = a.files
    again = f[(f["cache_refetched_bytes"] >= th.reread_min_bytes)
              & (f["cache_refetched_bytes"] >= th.reread_min_fraction * f["cache_miss_unique_bytes"])]
    evicted_by, eviction = explain(a.meta.get("reclaim"))
    for _, row in again.iterrows():
        prof = _judge(a, row["fstype"], row["path"])
        out.append(CacheEvictedReread(
            "warn", file=row["path"], **_fs(row["fstype"], prof), refetched_bytes=int(row["cache_refetched_bytes"]),
            miss_bytes=int(row["cache_miss_bytes"]), miss_unique_bytes=int(row["cache_miss_unique_bytes"]),
            reread_amplification=_num(row["reread_amplification"]),
            fuse=str(row["fstype"]).startswith("fuse"), evicted_by=evicted_by, eviction=eviction))
    return out


def small_fuse_readahead(a: Analysis) -> list[Finding]:
    th = a.thresholds
    out = []
    if len(a.fuse) == 0:
        return out
    conn = a.handles["connection"].to_numpy()[a.fuse.handle]
    for file_id in np.unique(a.fuse.file):
        mask = a.fuse.file == file_id
        sizes = a.fuse.nbytes[mask]
        median = float(np.median(sizes))
        if len(sizes) < th.fuse_readahead_min_requests or median > th.fuse_readahead_small:
            continue
        known = file_id in a.files.index
        c = int(np.bincount(conn[mask]).argmax())
        path, fstype = (a.files.loc[file_id, "path"], a.files.loc[file_id, "fstype"]) if known else (None, "fuse")
        out.append(SmallFuseReadahead(
            "warn", file=path, **_fs(fstype, _judge(a, fstype, path)), requests=len(sizes), median_bytes=median,
            bytes=int(sizes.sum()), connection=c, recommended_kb=th.fuse_readahead_recommended_kb))
    return out


def lost(a: Analysis) -> list[Finding]:
    n = lost_events(a.meta)
    if n <= 0:
        return []
    detail = a.meta.get("lost_detail", a.meta.get("lost_events"))
    return [LostEvents("high", lost=n, detail=detail if isinstance(detail, dict) else None)]


def residency_interleave(a: Analysis) -> list[Finding]:
    """No fault view (ptrace backend): several read fronts advancing at once, each forward, through a
    file one process mapped, and not explained by its read() calls: the shared-mapping interleave,
    inferred from residency samples."""
    th = a.thresholds
    out = []
    for file_id, m in a.residency.items():
        fronts = m.sampled.fronts
        if m.sampled.concurrent < th.interleave_min_tasks or m.tasks < 2 or file_id not in a.files.index:
            continue
        row = a.files.loc[file_id]
        if row["read_bytes"] >= 0.5 * m.sampled.sampled_bytes:  # the syscall view explains these bytes
            continue
        seq = min(f.sequential_fraction for f in fronts)
        score = float(np.mean([f.sequential_fraction for f in fronts])) - m.runs_in_order_fraction
        if seq < th.interleave_task_in_order_min or m.runs_in_order_fraction > th.interleave_merged_in_order_max \
                or score < th.interleave_min_score:
            continue
        prof = _judge(a, row["fstype"], row["path"])
        out.append(SharedFdInterleave(
            _handle_severity(prof), file=row["path"], **_fs(row["fstype"], prof),
            view="residency", mapping=True, per_handle=prof.per_handle_stream, tasks=m.sampled.concurrent,
            min_task_consecutive_fraction=seq, consecutive_fraction=m.runs_in_order_fraction,
            out_of_order_fraction=1 - m.runs_in_order_fraction, score=score, inode=int(row["ino"]),
            task_rows=[{"front": i, "first_offset": f.first_offset, "last_end": f.end, "bytes": f.bytes,
                        "sequential_fraction": f.sequential_fraction, "samples": f.steps}
                       for i, f in enumerate(fronts[:8])]))
    return out


RULES = (lost, shared_fd_interleave, residency_interleave, random_on_fuse_handle, mmap_fault_storm, small_fuse_readahead,
         small_requests, cold_cache, cache_evicted_reread)


def find_all(a: Analysis) -> list[Finding]:
    """Every rule's findings, most severe first (stable within a severity)."""
    found = [f for rule in RULES for f in rule(a)]
    for f in found:
        basis.annotate(f, a.meta)
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))
