"""A job of several nodes: one trace per node, analysed each on its own, then joined.

Node traces given as paths (local, or object-store URLs: trace/location.py) are analysed by worker
processes, as many at once as there are CPUs and as the machine's available memory holds (each a whole
node's analysis: ``node_workers``), or by the workers of a Dask cluster (``scheduler``: analyze/job/cluster.py);
traces given loaded (or as loaders) are analysed here, one at a time. A node trace that cannot be
analysed (unreadable, its worker died) is a missing node of a partial job, named in ``missing``.

Time line: each trace's ``start_time`` (the node's wall clock, UTC) gives its offset from the
earliest node; the offsets are as good as the nodes' clock sync (NTP: milliseconds), and say so.
A file is the same on two nodes when it lives on the same kind of mount at the same path below the
mount point with the same size (each node mounts the shared storage itself, maybe elsewhere).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from readtrace.analyze.analysis import analyze
from readtrace.analyze.rules.thresholds import Thresholds
from readtrace.analyze.rules.types import Finding, LoadSkew, ReplicatedReads
from readtrace.analyze.summary import Summary
from readtrace.errors import ReadtraceError, TraceError
from readtrace.memory import reuse_freed_memory, small_pages
from readtrace.pagecache.pin import fits_in_memory
from readtrace.trace import Trace, load_trace
from readtrace.trace.format import META_FILE
from readtrace.trace.location import locate
from readtrace.validate import json_value

SKEW_RATIO = 1.25  # slowest / median load time that makes a straggler
SKEW_MIN_S = 1.0  # ... and by at least this much
# A node's analysis holds every access of its trace in memory: measured 1.97 GB peak RSS for a
# 10 M-event trace (benchmarks/bench_report.py), i.e. ~190 bytes per row plus the interpreter.
NODE_BYTES_PER_ROW = 200
NODE_BASE_BYTES = 300 << 20
NODE_MEMORY_SHARE = 0.5  # of MemAvailable, for all the workers together
# Below this many rows in all the traces together, analyse here: a spawned worker's imports (~1-3 s
# on the 2-vCPU VM) cost more than such a job's analyses (measured: 3 x 100 k events, 5.6 s in one
# process, 10.1 s with 2 workers; benchmarks/bench_job.py).
MIN_ROWS_FOR_WORKERS = 1_000_000
NODE_COLUMNS = ("trace", "host", "start_offset_s", "wall_s", "io_wait_s", "bytes_read", "remote_bytes_read",
                "files", "ranks", "findings")


@dataclass
class Node:
    """What the job keeps of one node's analysis (the whole Analysis is dropped: memory stays that of
    the largest node, not the sum of all)."""

    trace: str | None
    meta: dict
    summary: Summary  # the node's Analysis.summary
    files: pd.DataFrame  # the node's files table
    ranks: pd.DataFrame
    findings: list[Finding]


@dataclass
class NodeFailure:
    """A node trace that could not be analysed: the trace and why, in one line."""

    trace: str
    error: str


@dataclass
class JobAnalysis:
    """Result of ``analyze_job``: each node's summary plus what only the whole job shows."""

    nodes: list[Node]
    node_rows: pd.DataFrame  # NODE_COLUMNS, one row per analysed trace, in the order given
    ranks: pd.DataFrame  # every node's per-rank rows, with "node" (its row in node_rows)
    findings: list[Finding] = field(default_factory=list)
    clock: str = "offsets from each trace's start_time (the nodes' wall clocks)"
    missing: list[NodeFailure] = field(default_factory=list)  # a partial job: the nodes not analysed


TraceSource = Trace | Callable[[], Trace] | str | os.PathLike


def analyze_job(traces: Iterable[TraceSource], thresholds: Thresholds | None = None,
                workers: int | None = None, scheduler: str | None = None) -> JobAnalysis:
    """Analyse each node's trace, then the job: node table, rank table, cross-node findings.

    A node is a Trace, a callable that loads one (then one node at a time is in memory), or a trace's
    path or URL: paths are analysed by up to ``workers`` processes at once (None: ``node_workers``), or
    on the Dask cluster whose scheduler is at ``scheduler`` (only the nodes' summaries come back here).
    A path whose analysis fails is a missing node (``JobAnalysis.missing``); TraceError when none is left."""
    traces = list(traces)
    paths = [i for i, t in enumerate(traces) if isinstance(t, str | os.PathLike)]
    done: list[Node | NodeFailure | None] = [None] * len(traces)
    if scheduler:
        from readtrace.analyze.job.cluster import analyze_on_cluster

        results = analyze_on_cluster([traces[i] for i in paths], thresholds, scheduler)
    else:
        if workers is None:
            workers = node_workers([traces[i] for i in paths])
        results = _analyze_in_workers([traces[i] for i in paths], thresholds, workers) \
            if len(paths) > 1 and workers > 1 else []
    for i, result in zip(paths, results, strict=False):
        done[i] = result
    for i, t in enumerate(traces):
        if done[i] is None:
            done[i] = _analyze_path(t, thresholds) if i in paths else _analyze_node(t, thresholds)
    nodes = [n for n in done if isinstance(n, Node)]
    missing = [n for n in done if isinstance(n, NodeFailure)]
    if not nodes:
        raise TraceError(f"no node trace of the job could be analysed: {missing[0].trace}: {missing[0].error}"
                         if missing else "no node traces given")
    starts = [_start(n.meta) for n in nodes]
    known = [s for s in starts if s is not None]
    first = min(known) if known else None
    rows = []
    for n, start in zip(nodes, starts, strict=True):
        remote = n.files[n.files["remote"].fillna(False).astype(bool)] if "remote" in n.files else n.files[:0]
        rows.append({
            "trace": n.trace,
            "host": n.meta.get("hostname") or "?",
            "start_offset_s": (start - first).total_seconds() if start is not None and first is not None else None,
            "wall_s": n.summary.wall_s,
            "io_wait_s": n.summary.time.io_wait_s,
            "bytes_read": int(n.summary.bytes_read),
            "remote_bytes_read": int(remote["bytes_read"].sum()),
            "files": int(n.summary.files),
            "ranks": int(len(n.ranks)) if n.ranks is not None else 0,
            "findings": sorted({f.code for f in n.findings}),
        })
    node_rows = pd.DataFrame(rows, columns=list(NODE_COLUMNS))
    ranks = pd.concat([n.ranks.assign(node=i) for i, n in enumerate(nodes) if n.ranks is not None and len(n.ranks)]
                      or [pd.DataFrame(columns=["node"])], ignore_index=True)
    job = JobAnalysis(nodes=nodes, node_rows=node_rows, ranks=ranks, missing=missing)
    job.findings = replicated_reads(job) + stragglers(job)
    return job


def _analyze_node(source: TraceSource, thresholds: Thresholds | None) -> Node:
    """One node's analysis, of which the job keeps the Node (the rest is dropped here)."""
    if isinstance(source, str | os.PathLike):
        trace = load_trace(source, lean=True)
    else:
        trace = source() if callable(source) else source
    a = analyze(trace, thresholds)
    return Node(trace=a.trace_path, meta=trace.meta, summary=a.summary, files=a.files, ranks=a.ranks,
                findings=a.findings)


def _analyze_path(path: str | os.PathLike, thresholds: Thresholds | None) -> Node | NodeFailure:
    """A node trace's Node, or why it could not be analysed."""
    try:
        return _analyze_node(path, thresholds)
    except ReadtraceError as e:
        return node_failure(path, e)


def node_failure(path: str | os.PathLike, e: BaseException) -> NodeFailure:
    """The missing node of ``path``: why, in one line (its own path left out of the message)."""
    where = str(locate(path))
    message = " ".join(str(e).split()) or type(e).__name__
    message = message.removeprefix(f"{where}: ")
    if not isinstance(e, ReadtraceError):
        message = f"{type(e).__name__}: {message}"
    return NodeFailure(trace=where, error=message)


def analyze_in_worker(path: str | os.PathLike, thresholds: Thresholds | None) -> Node | NodeFailure:
    """``_analyze_path`` in a worker (a process of the pool, or of a Dask cluster), with the memory
    settings of ``readtrace report``'s own process (a worker is a fresh interpreter: without them 10
    nodes of 10 M events took 24 s of system time in page faults)."""
    small_pages()
    with reuse_freed_memory():
        return _analyze_path(path, thresholds)


def _analyze_in_workers(paths: list, thresholds: Thresholds | None, workers: int) -> list[Node | NodeFailure]:
    """Each path's Node (or failure), in order, from ``workers`` fresh processes (spawned: no state
    forked from this one's threads). A worker that dies takes the nodes not yet done with it."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(analyze_in_worker, p, thresholds) for p in paths]
        out = []
        for path, future in zip(paths, futures, strict=True):
            try:
                out.append(future.result())
            except BrokenProcessPool:
                out.append(NodeFailure(str(locate(path)), f"a worker process died (out of memory?): run again "
                                       f"with fewer traces at once than {workers}"))
            except Exception as e:  # noqa: BLE001 - one node's failure is that node's line in the report
                out.append(node_failure(path, e))
        return out


def trace_rows(path: str | os.PathLike) -> int:
    """Rows of every table of a trace, from its meta.json (0 when unreadable: the worker says why)."""
    try:
        rows = json_value(locate(path).read_bytes(META_FILE)).get("rows") or {}
        return sum(int(v) for v in rows.values() if isinstance(v, int))
    except (OSError, ValueError, AttributeError, ReadtraceError):
        return 0


def node_workers(paths: list) -> int:
    """How many node traces to analyse at once: one per CPU, as long as the largest ones' analyses
    fit together in ``NODE_MEMORY_SHARE`` of the available memory; 1 for a small job."""
    rows = [trace_rows(p) for p in paths]
    if len(paths) < 2 or sum(rows) < MIN_ROWS_FOR_WORKERS:
        return 1
    need = sorted((NODE_BASE_BYTES + NODE_BYTES_PER_ROW * n for n in rows), reverse=True)
    workers = 1
    while workers < min(len(paths), os.cpu_count() or 1) and \
            fits_in_memory(sum(need[:workers + 1]), NODE_MEMORY_SHARE):
        workers += 1
    return workers


def _start(meta: dict) -> datetime | None:
    try:
        return datetime.fromisoformat(str(meta["start_time"]))
    except (KeyError, ValueError, TypeError):
        return None


def _shared_files(job: JobAnalysis) -> pd.DataFrame:
    """Remote files of every node with a cross-node key (fstype, path below the mount, size)."""
    frames = []
    for i, node in enumerate(job.nodes):
        f = node.files
        if not len(f) or "remote" not in f:
            continue
        f = f[f["remote"].fillna(False).astype(bool) & (f["bytes_read"] > 0)]
        rel = [_below(p, m) for p, m in zip(f["path"].fillna(""), f["mountpoint"].fillna(""), strict=True)]
        fetched = f["fuse_read_bytes"].where(f["fuse_read_bytes"] > 0, f["bytes_read"])
        frames.append(pd.DataFrame({"node": i, "path": f["path"].to_numpy(), "key_path": rel,
                                    "fstype": f["fstype"].to_numpy(), "size": f["size"].to_numpy(),
                                    "fetched": fetched.to_numpy(dtype=np.int64)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["node", "path", "key_path", "fstype", "size", "fetched"])


def _below(path: str, mountpoint: str) -> str:
    try:
        return str(Path(path).relative_to(mountpoint)) if mountpoint else path
    except ValueError:
        return path


def replicated_reads(job: JobAnalysis) -> list[Finding]:
    """REPLICATED_READS: one finding per file that two or more nodes fetched from remote storage."""
    shared = _shared_files(job)
    out: list[Finding] = []
    if shared.empty:
        return out
    for (fstype, _path, size), g in shared.groupby(["fstype", "key_path", "size"], sort=False):
        if g["node"].nunique() < 2:
            continue
        per_node = g.groupby("node", sort=True)["fetched"].sum()
        file_bytes = int(size) if size and size > 0 else int(per_node.max())
        aggregate = int(per_node.sum())
        rows = [{"trace": job.node_rows.at[n, "trace"], "host": job.node_rows.at[n, "host"], "bytes": int(b)}
                for n, b in per_node.items()]
        out.append(ReplicatedReads(
            severity="warn", file=str(g["path"].iloc[0]), fstype=str(fstype), evidence=rows,
            nodes=int(len(per_node)), file_bytes=file_bytes, aggregate_bytes=aggregate,
            replication=aggregate / file_bytes if file_bytes else 0.0,
            saved_bytes=max(0, aggregate - file_bytes)))
    return sorted(out, key=lambda f: -f.aggregate_bytes)


def stragglers(job: JobAnalysis) -> list[Finding]:
    """LOAD_SKEW for nodes (wall time) and for ranks (first to last access), where one lags."""
    out = []
    walls = job.node_rows.dropna(subset=["wall_s"])
    names = [f"{h} ({Path(t).name if t else i})" for i, (h, t) in enumerate(zip(walls["host"], walls["trace"],
                                                                                  strict=True))]
    out += _skew("node", names, walls["wall_s"].to_numpy(dtype=float))
    if "load_s" in job.ranks:  # else no node labelled its ranks (not a torchrun job): an empty table
        ranks = job.ranks.dropna(subset=["load_s"])
        out += _skew("rank", [f"rank {r} (node {n})" for r, n in zip(ranks["rank"], ranks["node"], strict=True)],
                     ranks["load_s"].to_numpy(dtype=float))
    return out


def _skew(scope: str, names: list[str], seconds: np.ndarray) -> list[Finding]:
    if len(seconds) < 2:
        return []
    median = float(np.median(seconds))
    slowest = int(np.argmax(seconds))
    worst = float(seconds[slowest])
    if median <= 0 or worst < SKEW_RATIO * median or worst - median < SKEW_MIN_S:
        return []
    order = np.argsort(-seconds, kind="stable")
    return [LoadSkew(severity="warn", scope=scope, slowest=names[slowest], slowest_s=worst, median_s=median,
                     skew=worst / median,
                     evidence=[{"name": names[i], "load_s": float(seconds[i])} for i in order])]
