"""Synthetic traces with known answers (tests, benchmark, docs): the seed case and its fixes.

Every table is built with numpy in one go; ``make_trace(**frames)`` / ``write_trace(path, **frames)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.trace import FUSE_READ

KiB, MiB = 1 << 10, 1 << 20
FUSE_CONN = 40  # the mount's device minor (st_dev 0:40)
FUSE_DEV = FUSE_CONN  # kernel dev encoding major << 20 | minor with major 0
NODE = 2
PARENT = 100


def files_frame(path: str, size: int, fstype: str, dev: int = FUSE_DEV, ino: int = NODE,
                mountpoint: str = "/mnt/model") -> pd.DataFrame:
    return pd.DataFrame({"path": [path], "dev": [dev], "ino": [ino], "size": [size], "fstype": [fstype],
                         "mountpoint": [mountpoint]})


def worker_reads(workers: int, chunks: int, chunk: int, shared: bool, *, op: str = "pread",
                 ts0: int = 1_000_000, step_ns: int = 10_000, latency_ns: int = 50_000, path: str | None = None
                 ) -> pd.DataFrame:
    """``workers`` forked tasks, each reading its own contiguous part of the file in ``chunk`` pieces,
    taking turns in time (round robin). ``shared``: one fd inherited from the parent (one open file
    description); else each worker opened its own."""
    w = np.tile(np.arange(workers), chunks)
    i = np.repeat(np.arange(chunks), workers)
    n = len(w)
    pid = PARENT + 1 + w
    return pd.DataFrame({
        "ts_ns": ts0 + step_ns * np.arange(n), "pid": pid, "tid": pid, "comm": "python", "op": op,
        "fd": 3 if shared else 4 + w, "ofd": np.where(shared, -0x77770000, -0x77770000 - 0x100 * (w + 1)),
        "path": path, "offset": (w * chunks + i) * chunk, "size": chunk, "ret": chunk,
        "latency_ns": latency_ns,
    })


def opens(reads: pd.DataFrame, path: str, dev: int = FUSE_DEV, ino: int = NODE) -> pd.DataFrame:
    """The open events behind the reads' open file descriptions, just before the first read."""
    first = reads.groupby("ofd", sort=False).first().reset_index()
    return pd.DataFrame({
        "ts_ns": reads["ts_ns"].min() - 1000, "pid": first["pid"], "tid": first["tid"], "comm": "python",
        "op": "open", "fd": first["fd"], "ofd": first["ofd"], "path": path, "dev": dev, "ino": ino,
        "ret": first["fd"],
    })


def fuse_from_reads(reads: pd.DataFrame, fh_of_ofd: dict[int, int] | None = None, nodeid: int = NODE,
                    connection: int = FUSE_CONN, request: int | None = None) -> pd.DataFrame:
    """The FUSE READ requests a per-handle daemon receives for these reads (one per ``request`` bytes)."""
    request = request or int(reads["size"].max())
    per = np.maximum(1, reads["ret"].to_numpy() // request)
    idx = np.repeat(np.arange(len(reads)), per)
    part = np.arange(len(idx)) - np.repeat(np.cumsum(per) - per, per)
    ofd = reads["ofd"].to_numpy()[idx]
    if fh_of_ofd:  # handles are u64: map through the distinct ofds, never through float
        keys, inverse = np.unique(ofd, return_inverse=True)
        fh = np.array([fh_of_ofd[k] for k in keys.tolist()], dtype=np.uint64)[inverse]
    else:
        fh = (pd.factorize(ofd)[0] + 1).astype(np.uint64)
    return pd.DataFrame({
        "ts_ns": reads["ts_ns"].to_numpy()[idx] + 1 + part, "pid": reads["pid"].to_numpy()[idx],
        "tid": reads["tid"].to_numpy()[idx], "connection": connection, "unique": np.arange(len(idx)) * 2 + 2,
        "opcode": FUSE_READ, "nodeid": np.uint64(nodeid), "fh": fh,
        "offset": reads["offset"].to_numpy()[idx] + part * request, "size": request, "reply_bytes": request,
        "latency_ns": 40_000, "daemon_tid": 999,
    })


def misses_from_reads(reads: pd.DataFrame, dev: int = FUSE_DEV, ino: int = NODE) -> pd.DataFrame:
    """A cold page cache: every byte read was first fetched (one miss row per read)."""
    return pd.DataFrame({"ts_ns": reads["ts_ns"].to_numpy() - 1, "pid": reads["pid"], "tid": reads["tid"],
                         "op": "miss", "dev": dev, "ino": ino, "offset": reads["offset"], "size": reads["ret"]})


def load_case(kind: str = "shared", *, workers: int = 4, chunks: int = 64, chunk: int = 256 * KiB,
              fstype: str = "fuse.gcsfuse", with_fuse: bool = True, cold: bool = False,
              path: str = "/mnt/model/model.safetensors", read_ms: float | None = None) -> dict:
    """Frames for ``make_trace``/``write_trace``: ``shared`` (the seed case: forked workers interleaved on
    one inherited fd), ``own`` (one fd per worker) or ``sequential`` (one reader, whole file).
    ``cold``: add the page-cache misses of a cold cache. ``read_ms``: each read waits that long, one
    after another (the default, 50 us every 10 us, costs the load milliseconds)."""
    timing = {} if read_ms is None else {"step_ns": int(read_ms * 1e6), "latency_ns": int(read_ms * 1e6)}
    if kind == "sequential":
        reads = worker_reads(1, workers * chunks, chunk, True, op="read", **timing)
    else:
        reads = worker_reads(workers, chunks, chunk, kind == "shared", **timing)
    size = workers * chunks * chunk
    events = pd.concat([opens(reads, path), reads], ignore_index=True)
    frames = {"events": events, "files": files_frame(path, size, fstype),
              "meta": {"command": ["python", "load.py"], "exit_code": 0, "lost_events": 0}}
    if with_fuse:
        frames["fuse"] = fuse_from_reads(reads)
    if cold:
        frames["pages"] = misses_from_reads(reads)
    return frames


def small_files(n: int, offsets=(50, 0)) -> dict:
    """Frames of ``n`` 100-byte files on a gcsfuse mount, each opened once and read 50 bytes at each of
    ``offsets`` (default: back then forth, so no stream only moves forward)."""
    k = 1 + len(offsets)
    ino = np.repeat(np.arange(n) + 10, k)
    paths = np.array([f"/m/d{i // 1000}/f{i}" for i in range(n)], dtype=object)
    events = pd.DataFrame({
        "ts_ns": np.arange(k * n) * 10, "pid": 100, "tid": 100, "comm": "python",
        "op": np.tile(["open", *["pread"] * len(offsets)], n), "fd": 3, "ofd": np.repeat(np.arange(n) + 1, k),
        "path": np.repeat(paths, k), "dev": 40, "ino": ino, "offset": np.tile([-1, *offsets], n),
        "size": np.tile([-1, *[50] * len(offsets)], n), "ret": np.tile([3, *[50] * len(offsets)], n)})
    files = pd.DataFrame({"path": paths, "dev": 40, "ino": np.arange(n) + 10, "size": 100, "fstype": "fuse.gcsfuse",
                          "mountpoint": "/m"})
    return {"events": events, "files": files, "meta": {"command": ["load"], "exit_code": 0}}


def job_node(host: str, start: str, pids_ranks: dict[int, int], wall_s: float, path: str, size: int) -> dict:
    """Frames of one node's trace in a job: each ranked pid reads the whole file through the FUSE mount
    in 1 MiB preads (``meta.ranks`` labels the pids, ``start_time`` places the node)."""
    offsets = np.arange(0, size, MiB)
    pids = np.repeat(np.array(list(pids_ranks), dtype=np.int64), len(offsets))
    off = np.tile(offsets, len(pids_ranks))
    events = pd.DataFrame({"ts_ns": 10**9 + off, "pid": pids, "tid": pids, "op": "pread", "fd": 3, "ofd": pids,
                           "path": path, "dev": 45 << 20, "ino": 2, "offset": off, "size": MiB, "ret": MiB,
                           "latency_ns": 10**6})
    files = files_frame(path, size, "fuse.gcsfuse", dev=45 << 20, ino=2, mountpoint=path.rsplit("/", 1)[0] or "/")
    meta = {"hostname": host, "start_time": start, "t0_ns": 10**9, "wall_s": wall_s,
            "ranks": {str(p): {"rank": r, "local_rank": r % 2, "world_size": 4} for p, r in pids_ranks.items()}}
    return {"events": events, "files": files, "meta": meta}
