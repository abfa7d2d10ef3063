"""``analyze(trace) -> Analysis``: files, streams, findings and a summary from one trace."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from readtrace.analyze.job import ranks
from readtrace.analyze.rules import cost
from readtrace.analyze.rules.checks import find_all
from readtrace.analyze.rules.thresholds import Thresholds
from readtrace.analyze.rules.types import Finding
from readtrace.analyze.storage import levers as storage_levers
from readtrace.analyze.storage import measured as measured_mounts
from readtrace.analyze.storage import whatif
from readtrace.analyze.summary import MountPrediction, Summary
from readtrace.analyze.views import attribution, cachemisses, fronts, interleave, timesplit
from readtrace.analyze.views.accesses import (
    SOURCE_READ,
    Accesses,
    fault_accesses,
    fuse_accesses,
    read_accesses,
)
from readtrace.analyze.views.fileindex import FileIndex
from readtrace.analyze.views.grouping import dense_codes, same_partition
from readtrace.analyze.views.namespaces import container_view
from readtrace.analyze.views.roles import file_roles
from readtrace.analyze.views.streams import KINDS, BaseOrders, Runs, summarize
from readtrace.trace import FUSE_READ, Trace, views
from readtrace.trace.completeness import Completeness, completeness, lost_events
from readtrace.trace.runs import calls_per_row


@dataclass
class Analysis:
    """Result of ``analyze``. ``app``/``fuse`` keep the accesses for plots and evidence."""

    files: pd.DataFrame
    streams: pd.DataFrame
    findings: list[Finding]
    summary: Summary  # the totals, the time split, the fixed prediction (analyze/summary.py)
    meta: dict
    thresholds: Thresholds
    app: Accesses
    fuse: Accesses
    handles: pd.DataFrame  # FUSE handle code -> connection, nodeid, fh, file
    pages: pd.DataFrame  # page-cache rows with a file id (ts_ns, pid, tid, op, offset, size, file)
    stream_tasks: pd.DataFrame  # per (open file / FUSE handle, task): the task's own figures
    tasks: pd.DataFrame  # per task: where its time went (analyze/views/timesplit.py)
    trace_path: str | None = None
    residency: dict = field(default_factory=dict)  # file id -> fronts.Mapped (unprivileged page view)
    ranks: pd.DataFrame | None = None  # per rank of a distributed job (analyze/job/ranks.py); empty: no ranks
    rank_spans: dict = field(default_factory=dict)  # rank -> its merged byte spans [(file id, start, end)]
    completeness: Completeness = field(default_factory=lambda: Completeness(True))
    mount_profiles: dict = field(default_factory=dict)  # mountpoint -> its measured MountProfile (analyze/storage/measured.py)
    measured: object | None = None  # the MountProfile of the checkpoint's mount (None: the table's prior only)


_SHARED_ONLY_PREFIXES = ("task_", "min_task", "interleave", "gcsfuse_")


def _streams(app: Accesses, fuse: Accesses, handles: pd.DataFrame, th: Thresholds
             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every stream of every kind, one row each (see streams.py for the columns).

    A kind that groups the accesses exactly like one already summarized (single-threaded processes,
    one open file per file) reuses that summary instead of recomputing it.
    """
    orders = BaseOrders(app)
    file = orders.factor("file")
    task = dense_codes(orders.factor("tid"), file)
    ofd = dense_codes(app.handle, app.opened, file)
    plan = (("ofd", ofd, None), ("task", task, None), ("process", dense_codes(app.pid, file), task),
            ("file", dense_codes(file), task))
    # Open files shared by tasks: their (open file, task) pieces usually are the task streams, so the
    # task summary comes first and serves both (else the ofd summary serves the task kind below).
    early = {} if same_partition(*ofd, *task) else \
        {"task": summarize(app, *task, orders, th, "task", extents=True)}
    done: list[tuple[tuple[np.ndarray, int], pd.DataFrame]] = []
    for kind, (codes, n), sub in plan:
        twin = next((df for (c, m), df in done if same_partition(codes, n, c, m)), None)
        if kind in early:
            df = early[kind]
        elif twin is not None and kind != "ofd":
            df = _relabel(twin, kind, app, codes, n)
        elif kind == "ofd":
            df = _shared(app, codes, n, orders, th, kind, known=[(task, early["task"])] if early else [])
        else:
            df = summarize(app, codes, n, orders, th, kind, sub=sub)
        df["code"] = np.arange(n)
        done.append(((codes, n), df))
    del orders, task, ofd, plan, file, early
    frames = [df for _, df in done]
    frames.append(_shared(fuse, fuse.handle, len(handles), BaseOrders(fuse), th, "fuse_handle"))
    frames[-1]["code"] = np.arange(len(handles))
    stream_tasks = pd.concat([f.attrs["tasks"] for f in frames if "tasks" in f.attrs], ignore_index=True)
    for f in frames:
        f.attrs.clear()
    # frames[-1] (FUSE handles) has every column: it keeps the schema when all streams are empty.
    streams = pd.concat([f for f in frames if len(f)] or [frames[-1]], ignore_index=True)
    streams["interleaved"] = streams["interleaved"].astype(object).fillna(False).astype(bool)
    order = {k: i for i, k in enumerate(KINDS)}
    streams = streams.sort_values(["kind", "bytes"], key=lambda s: s.map(order) if s.name == "kind" else -s,
                                  kind="stable", ignore_index=True)
    return streams, stream_tasks


def _relabel(twin: pd.DataFrame, kind: str, acc: Accesses, codes: np.ndarray, n: int) -> pd.DataFrame:
    """A summary computed for another kind with the same groups, under this (unshared) kind's name."""
    first = np.zeros(n, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]  # the first row of each group
    df = twin.copy()
    df.attrs.clear()  # the twin's own per-task pieces stay with the twin (no duplicate rows)
    df["kind"] = kind
    for col, values in (("pid", acc.pid), ("tid", acc.tid), ("ofd", acc.handle), ("opened", acc.opened),
                        ("file_id", acc.file)):
        df[col] = values[first]
    return df.drop(columns=[c for c in df.columns if c.startswith(_SHARED_ONLY_PREFIXES) or c == "interleaved"])


def _shared(acc: Accesses, codes: np.ndarray, n: int, orders: BaseOrders, th: Thresholds, kind: str,
            known: list[tuple[tuple[np.ndarray, int], pd.DataFrame]] = ()) -> pd.DataFrame:
    """A kind whose streams several tasks can share (open files, FUSE handles): + replay + interleave.
    ``attrs["tasks"]``: the tasks' own figures inside each stream. ``known``: summaries (with
    ``attrs["extents"]``) whose groups may be the (stream, task) pieces: then no second pass."""
    sub = dense_codes(codes, orders.factor("tid"))
    # a known summary whose groups are the (stream, task) pieces: its runs and figures serve here
    match = next((((c, m), summary) for (c, m), summary in known if same_partition(*sub, c, m)), None)
    df = summarize(acc, codes, n, orders, th, kind, sub=sub, replay=True, extents=True,
                   runs=_known_runs(codes, *match) if match else None)
    pieces = None
    serving = ((codes, n), df) if same_partition(*sub, codes, n) else match  # each stream one task: itself
    if serving is not None:
        (c, _), summary = serving
        image = np.zeros(sub[1], dtype=np.int64)
        image[sub[0]] = c  # piece -> group of that summary
        pieces = interleave.summarized_pieces(summary, summary.attrs["extents"]).take(image)
    for _, summary in [((codes, n), df), *known]:
        summary.attrs.clear()
    if pieces is None:
        pieces = interleave.classify_pieces(acc, *sub, orders, th)
    columns, tasks = interleave.per_task(codes, n, sub, pieces, df, th)
    df = pd.concat([df, columns], axis=1)
    df.attrs["tasks"] = tasks.assign(kind=kind)
    return df


def _known_runs(codes: np.ndarray, known: tuple[np.ndarray, int], summary: pd.DataFrame) -> Runs | None:
    """The contiguous runs of a known summary whose groups are the (stream, task) pieces, under the
    streams' codes (a run lies inside one piece, so inside one stream); None when it kept none."""
    runs = summary.attrs.get("runs")
    if runs is None:
        return None
    c, m = known
    stream_of = np.zeros(m, dtype=np.int64)
    stream_of[c] = codes  # group of that summary -> stream
    return runs.relabel(stream_of)


def _label_streams(streams: pd.DataFrame, files: pd.DataFrame, handles: pd.DataFrame) -> None:
    path = files["path"].reindex(streams["file_id"]).fillna("<unknown file>").to_numpy()
    streams["path"] = path
    streams["fstype"] = files["fstype"].reindex(streams["file_id"]).fillna("").to_numpy()
    is_handle = (streams["kind"] == "fuse_handle").to_numpy()
    fh = np.zeros(len(streams), dtype=np.uint64)  # the daemon's u64 handle; only for kind fuse_handle
    fh[is_handle] = handles["fh"].to_numpy(np.uint64)[streams["code"].to_numpy()[is_handle]] if is_handle.any() else []
    streams["fh"] = fh
    kind = streams["kind"].to_numpy()
    streams.loc[kind != "ofd", "ofd"] = 0  # the open file description of kind "ofd" streams only
    ofd_hex = [f"{o & 0xFFFFFFFFFFFFFFFF:#x}" for o in streams["ofd"].tolist()]
    labels = np.select(
        [kind == "task", kind == "process", kind == "ofd", kind == "fuse_handle"],
        ["tid " + streams["tid"].astype(str) + " (pid " + streams["pid"].astype(str) + ")",
         "pid " + streams["pid"].astype(str),
         pd.Series(["ofd " + h for h in ofd_hex]),
         "handle " + streams["fh"].astype(str)],
        default="file")
    streams["stream"] = labels


def _files_table(files: pd.DataFrame, streams: pd.DataFrame, page_stats: pd.DataFrame, idle: pd.DataFrame,
                 app: Accesses, page_view: bool, sampled: bool = False) -> pd.DataFrame:
    """Per file: the file stream's figures plus the fractions as each open file saw them."""
    n = len(files)
    out = files.copy()
    by_file = streams[streams["kind"] == "file"].set_index("file_id")
    known_reads = (app.source == SOURCE_READ) & (app.file >= 0)  # unresolved files count for no file
    read_bytes = np.bincount(app.file[known_reads], weights=app.nbytes[known_reads], minlength=n)
    out["read_bytes"] = read_bytes.astype(np.int64)
    out["reads"] = np.bincount(app.file[known_reads], minlength=n)
    if not page_view:  # no page-cache view recorded: unknown, not zero
        for col in [c for c in page_stats.columns if c.startswith("cache_")]:
            page_stats[col] = np.nan
    out = out.join(page_stats)
    out["bytes_read"] = (out["read_bytes"] + out["mmap_bytes"]).astype(np.int64)
    if sampled:  # no fault view: what a mapping gave the load is at least what came into the cache
        out["bytes_read"] = np.maximum(out["bytes_read"], out["cache_miss_unique_bytes"].fillna(0)).astype(np.int64)
    for col in ("accesses", "unique_bytes", "reread_amplification", "tasks", "concurrency",
                "latency_p50_us", "latency_p99_us", "size_hist", "top_sizes", "top_strides",
                "first_ts_ns", "last_ts_ns"):
        out[col] = by_file[col].reindex(out.index)
    # Fractions as each open file description (or mapping) saw them: what a per-handle daemon sees.
    ofd = streams[streams["kind"] == "ofd"]
    w = ofd["bytes"]
    for name in ("consecutive", "sequential", "seek"):
        num = (ofd[f"{name}_fraction"] * w).groupby(ofd["file_id"]).sum()
        out[f"{name}_fraction"] = (num / w.groupby(ofd["file_id"]).sum()).reindex(out.index)
    out["random_fraction"] = 1 - out["sequential_fraction"]
    out["merged_sequential_fraction"] = by_file["sequential_fraction"].reindex(out.index)
    out["open_files"] = ofd.groupby("file_id").size().reindex(out.index).fillna(0).astype(np.int64)
    handles = streams[streams["kind"] == "fuse_handle"]
    out["fuse_handles"] = handles.groupby("file_id").size().reindex(out.index).fillna(0).astype(np.int64)
    out["fuse_read_bytes"] = handles.groupby("file_id")["bytes"].sum().reindex(out.index).fillna(0).astype(np.int64)
    out["fuse_read_requests"] = handles.groupby("file_id")["accesses"].sum().reindex(out.index).fillna(0) \
        .astype(np.int64)
    out["empty_reads"] = idle[idle["ret"] == 0].groupby("file").size().reindex(out.index).fillna(0).astype(np.int64)
    out["failed_reads"] = idle[idle["ret"] < 0].groupby("file").size().reindex(out.index).fillna(0).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["cache_miss_fraction"] = (out["cache_miss_bytes"] / out["bytes_read"]).clip(upper=1.0)
    used = (out["bytes_read"] > 0) | (out["fuse_read_bytes"] > 0) | (out["cache_miss_bytes"].fillna(0) > 0)
    out = out[used].copy()
    out["role"] = file_roles(out["path"])
    own = out["role"] == "own"  # readtrace's own files (its calls log, hook dir, state): never reported
    out = out[~own].copy()
    # rows the report's tables leave out (--json keeps them, with this reason)
    named = out["path"].fillna("").str.startswith("/")
    out["hidden"] = np.where(~named, "no path: the trace could not name this file",
                             np.where(out["bytes_read"] <= 0, "no bytes read by the program (page-cache or FUSE "
                                      "activity only)", None))
    out.attrs["own_files"] = int(own.sum())
    # data files before code and libraries; remote files (FUSE, network) first: that is where a read
    # pattern costs; then the most read
    return out.assign(_data=out["role"] == "data").sort_values(
        ["_data", "remote", "bytes_read"], ascending=False, kind="stable").drop(columns="_data")


def _wall_s(trace: Trace, app: Accesses, fuse: Accesses) -> float | None:
    if trace.meta.get("wall_s") is not None:
        return float(trace.meta["wall_s"])
    if (trace.meta.get("fuse_view") or {}).get("timed") is False and len(app) == 0:
        return None  # a log without times: its "times" are line numbers
    tables = (trace.pages, trace.others, trace.reads)
    stamps = [s for s in (app.ts, fuse.ts, *(t["ts_ns"].to_numpy() for t in tables)) if len(s)]
    if not stamps:
        return None
    ends = [s for s in (app.ts + app.latency, fuse.ts + np.maximum(fuse.latency, 0)) if len(s)]
    return (max(int(s.max()) for s in stamps + ends) - min(int(s.min()) for s in stamps)) / 1e9


def _summary(trace: Trace, files: pd.DataFrame, streams: pd.DataFrame, app: Accesses, done: Completeness,
             wall: float | None, **parts) -> Summary:
    """The load's totals; ``parts``: the Summary's fields the other views compute (reads_from, time,
    measured_mount, replicated_rank_bytes)."""
    handles = streams[streams["kind"] == "fuse_handle"]
    hb = handles["bytes"].sum()
    page_view = len(trace.pages) > 0
    return Summary(
        complete=done.complete,
        incomplete_reasons=list(done.reasons),
        bytes_read=int(files["bytes_read"].sum()),
        read_bytes=int(files["read_bytes"].sum()),
        mmap_bytes=int(files["mmap_bytes"].sum()),
        reads=int((app.source == SOURCE_READ).sum()),
        page_faults=int(files["page_faults"].sum()),
        files=len(files),
        readtrace_files_dropped=int(files.attrs.get("own_files", 0)),
        tasks=len(pd.unique(app.tid)),  # hashing: no sort of every access
        processes=len(pd.unique(app.pid)),
        cache_miss_bytes=int(files["cache_miss_bytes"].sum()) if page_view else None,
        cache_refetched_bytes=int(files["cache_refetched_bytes"].sum()) if page_view else None,
        cache_miss_fraction=(min(1.0, files["cache_miss_bytes"].sum() / files["bytes_read"].sum())
                             if page_view and files["bytes_read"].sum() > 0 else None),
        fuse_requests=len(trace.fuse),
        fuse_read_requests=int((trace.fuse["opcode"] == FUSE_READ).sum()),
        fuse_read_bytes=int(hb),
        handle_consecutive_fraction=(float((handles["consecutive_fraction"] * handles["bytes"]).sum() / hb)
                                     if hb > 0 else None),
        handle_sequential_fraction=(float((handles["sequential_fraction"] * handles["bytes"]).sum() / hb)
                                    if hb > 0 else None),
        gcsfuse_predicted_requests=int(handles["gcsfuse_requests"].sum()) if hb > 0 else None,
        lost_events=lost_events(trace.meta),
        wall_s=wall,
        command=trace.meta.get("command"),
        exit_code=trace.meta.get("exit_code"),
        backend=views.backend(trace.meta),
        missing_views=views.missing_views(trace.meta),
        not_seen=views.limitations(trace.meta),
        container=container_view(trace),
        **parts,
    )


def analyze(trace: Trace, thresholds: Thresholds | None = None) -> Analysis:
    """Analyze a loaded trace (``readtrace.trace.load_trace``/``make_trace``)."""
    th = thresholds or Thresholds()
    index = FileIndex(trace.files)
    per_row = calls_per_row(trace.reads)  # > 1: calls() had to merge calls (completeness says so)
    events = trace.others
    reads, idle = read_accesses(events, index, trace.calls())
    faults = fault_accesses(events, trace.pages, index)
    app = Accesses.concat([reads, faults])
    fuse, handles = fuse_accesses(trace.fuse, events, app, index)
    pages = cachemisses.page_rows(trace.pages, index)
    files = index.finish()
    profiles = measured_mounts.mount_profiles(trace.meta, files)
    main = measured_mounts.main_profile(profiles, files)
    th = measured_mounts.thresholds(th, main)
    streams, stream_tasks = _streams(app, fuse, handles, th)
    # after the streams: the waits of a read trace are a row per read, not held through their passes
    waits = timesplit.sched_waits(trace.others, index) or timesplit.syscall_waits(app, fuse)
    _label_streams(streams, files, handles)
    cachemisses.add_to_streams(streams, cachemisses.attribute(pages, app), page_view=len(trace.pages) > 0)
    sampled = views.PAGE_CACHE in views.inferred(trace.meta)
    file_table = _files_table(files, streams, cachemisses.per_file(pages, len(files)), idle, app,
                              page_view=len(trace.pages) > 0, sampled=sampled)
    done = completeness(trace.meta, per_row)
    wall = _wall_s(trace, app, fuse)
    split, tasks, file_wait, file_share = timesplit.time_split(trace.others, waits, files, wall,
                                                               trace.meta.get("sched"))
    job_ranks = ranks.process_ranks(trace.meta, trace.others)  # forks are among the others
    data_files = file_table.index[file_table["role"] == "data"].to_numpy()
    touches = ranks.Touches.of(app, pages) if job_ranks else None
    rank_table = ranks.per_rank(touches, job_ranks, int(trace.meta.get("t0_ns") or (app.ts.min() if len(app) else 0)),
                                data_files, waits) if job_ranks else ranks.per_rank(None, {}, 0, data_files)
    summary = _summary(
        trace, file_table, streams, app, done, wall,
        reads_from=attribution.reads_from(trace.python_calls, app, pages, file_table, trace.meta), time=split,
        measured_mount=main.data() if main is not None else None,
        replicated_rank_bytes=ranks.replicated_bytes(touches, job_ranks, rank_table, data_files) if job_ranks else 0)
    a = Analysis(files=file_table, streams=streams, findings=[], summary=summary, meta=trace.meta,
                 thresholds=th, app=app, fuse=fuse, handles=handles, pages=pages, stream_tasks=stream_tasks,
                 tasks=tasks, trace_path=str(trace.path) if trace.path else None, completeness=done,
                 residency=fronts.mapped_files(events, pages, index) if sampled else {},
                 mount_profiles=profiles, measured=main, ranks=rank_table)
    a.rank_spans = ranks.byte_spans(touches, job_ranks, data_files)
    a.findings = find_all(a)
    measured_mounts.rule_out_levers(a.findings, profiles, files)
    paths = files["path"]
    cost.assign(a, *(pd.Series(s.to_numpy(), index=paths.reindex(s.index).to_numpy()) for s in (file_wait, file_share)))
    file_levers = (summary.reads_from or {}).get("file_levers", {})
    for f in a.findings:
        f.library_levers = file_levers.get(f.file, []) if f.severity != "info" else []
    _predict_fixed_here(a)
    return a


def _predict_fixed_here(a: Analysis) -> None:
    """The what-if model for this mount, fixed pattern only (cheap): summary and remote findings."""
    mount = whatif.mount_profile(a)
    if mount is None or a.summary.wall_s is None:
        return
    fixed = whatif.what_if(a, [mount], recorded=False)[0]
    a.summary.prediction = MountPrediction(mount.name, mount.latency_ms, mount.request_ms, fixed.predicted_fixed_s,
                                           fixed.fixed_strategy, mount.latency_recorded)
    remote = set(a.files.loc[a.files["remote"], "path"])
    for f in a.findings:
        if f.file in remote:
            f.predicted_fixed_s = fixed.predicted_fixed_s
    storage_levers.advise(a.findings, a.summary.wall_s, storage_levers.io_model(a, mount), remote, whatif.routed(a))
