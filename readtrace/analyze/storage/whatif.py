"""What-if storage model: replay the recorded per-handle request streams through models of other
storage and predict the load's time, backend requests and bytes fetched, as recorded and fixed.

Streams: the FUSE view where recorded (one stream per FUSE handle, the requests the daemon saw), else
what the kernel would send from the app view (each open file's accesses cut into read-ahead windows,
repeats of the window in flight dropped). Profiles:

- ``gcsfuse``: gcsfuse's per-handle reader (the lab's readtrace/simfs/model.py HandleReader: seek
  rule, 200 MiB sequential ranges, 1-8 MiB random ranges); reads of one handle are served one at a
  time (gcsfuse holds the handle's lock across a read), each new backend range costs a first byte.
- ``prefetch``: a per-handle prefetcher like mountpoint-s3 / rclone / hf-mount: a window that doubles
  while the handle reads on (1 MiB up to 64 MiB) and falls back to 1 MiB at a seek; one request each.
- ``nfs`` (and ``lustre``): no handle state, one RPC per request (1 MiB rsize), each paying the
  latency; the tasks' streams run in parallel, a task's requests one after another, or, with costs
  measured from the trace, ``in_flight`` of them at once (the kernel's read-ahead window and the next).
- ``local-nvme``: ``nfs`` with 0.08 ms per request and 3 GB/s.

Time: per stream, requests cost latency (where they open a backend request) plus bytes over the
bandwidth. Streams active at the same time in the recording run in parallel: the predicted I/O time
is, per phase of overlapping streams, the slowest stream (at least the phase's bytes over the
bandwidth), summed over phases. ``predicted_s = wall - recorded wait + predicted io_wait`` (the
recorded wait on the data files the model replays, ``summary.time.data_wait_s``):
start-up and compute carry over. ``predicted_fixed_s`` adds the slowest task's own time that the
recorded waits covered where several tasks read (``summary.time.besides_hidden_s``,
analyze/views/criticalpath.py): with the waits gone it lies on the load's path. The fixed pattern is
what ``readtrace fix --compare`` runs (readtrace/fix/candidates.py), the faster of those it would try here:

- ``prefetch`` (any loader): the files taken as one byte stream, split into PREFETCH_STREAMS
  contiguous shares, each read in order on an fd (a handle) of its own, in parallel; it starts with
  the interpreter (the shim's start-up prefetch) and the load waits for it, so the part of it that
  fits in the start-up before the load's first read of a data file is hidden;
- ``own-fd`` (loads through safetensors or torch.load, seen in the python_calls view): one reader
  per file, in order, inside the load; where the mount was measured to drop the page cache on open, at
  interpreter start-up (the fixed run's early read, inject/early.py), so the start-up hides it too.

Each reader's requests: 1 MiB (up to 8 in flight where the storage keeps no handle state); per
handle the storage model's ranges (one first byte per 200 MiB on gcsfuse) and the mount's own cost
per kernel request (``request_ms``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from readtrace.analyze.storage.gcsfuse_replay import is_seek, new_requests
from readtrace.analyze.views.grouping import running_max_in_group, union_length
from readtrace.fs.knowledge import fs_profile
from readtrace.measure.profile import MountProfile

MiB = 1 << 20
KERNEL_READAHEAD = 128 * 1024  # the kernel's FUSE/NFS read-ahead window (default read_ahead_kb)
FIXED_REQUEST = 1 * MiB
FIXED_DEPTH = 8  # requests in flight for the fixed reader where the storage has no handle state
PREFETCH_FIRST, PREFETCH_MAX = 1 * MiB, 64 * MiB
PREFETCH_STREAMS = 4  # readtrace.pagecache.prefetch.DEFAULT_THREADS: the fix's start-up prefetch
ROUTED_LIBRARIES = ("safetensors.", "torch.load")  # entry points the own-fd loader takes over (fix/candidates.py)


@dataclass(frozen=True)
class Profile:
    name: str
    model: str  # "gcsfuse" | "prefetch" | "stateless"
    latency_ms: float  # first byte of a backend request
    bandwidth_mbps: float | None  # link, MB/s (10**6 bytes/s); None: unlimited
    rsize: int = 1 * MiB  # stateless: largest request
    request_ms: float = 0.0  # what serving any request costs besides the first byte (a FUSE daemon's own work)
    measured_at: str = ""  # latency and bandwidth from the mount's profile measured then (readtrace probe)
    in_flight: float = 1.0  # stateless: a stream's requests served at once (the kernel's read-ahead; measured)
    request_carries_bytes: bool = False  # request_ms was measured per request, its transfer included
    # (and the first byte is paid per stream or run opened, not per backend request)
    skips_reopen: bool = False  # prefetch: a short forward skip was measured to pay a first byte (rclone)
    latency_recorded: bool = False  # latency_ms measured from the load's own FUSE requests (not the probe's)


DEFAULTS = {
    "gcsfuse": Profile("gcsfuse", "gcsfuse", 20.0, None),
    "prefetch": Profile("prefetch", "prefetch", 20.0, None),
    "mountpoint-s3": Profile("mountpoint-s3", "prefetch", 20.0, None),
    "rclone": Profile("rclone", "prefetch", 20.0, None),
    "hf-mount": Profile("hf-mount", "prefetch", 20.0, None),
    "nfs": Profile("nfs", "stateless", 1.0, None),
    "lustre": Profile("lustre", "stateless", 0.5, None),
    "local-nvme": Profile("local-nvme", "stateless", 0.08, 3000.0),
}


@dataclass
class Prediction:
    profile: str
    latency_ms: float
    bandwidth_mbps: float | None
    predicted_s: float | None
    predicted_fixed_s: float | None
    predicted_io_s: float
    predicted_fixed_io_s: float
    recorded_io_wait_s: float
    backend_requests: int
    bytes_fetched: int
    fixed_backend_requests: int
    fixed_bytes_fetched: int
    streams: int
    source: str  # "fuse" (the daemon's requests) or "app" (the kernel's requests, from the app view)
    fixed_strategy: str = "prefetch"  # what fix --compare would run: "prefetch" or "own-fd"
    startup_s: float = 0.0  # recorded start-up before the load's first data-file access (hides a prefetch)

    def data(self) -> dict:
        return asdict(self)


def profile(name: str, latency_ms: float | None = None, bandwidth_mbps: float | None = None,
            request_ms: float = 0.0) -> Profile:
    """A profile by name with the user's latency / bandwidth (ValueError for an unknown name)."""
    if name not in DEFAULTS:
        raise ValueError(f"unknown storage profile {name!r} (choose from {', '.join(DEFAULTS)})")
    p = DEFAULTS[name]
    return replace(p, latency_ms=p.latency_ms if latency_ms is None else latency_ms,
                   bandwidth_mbps=p.bandwidth_mbps if bandwidth_mbps is None else bandwidth_mbps, request_ms=request_ms)


# --- the recorded streams, per model -----------------------------------------------------------
def _groups(a, data_ids: np.ndarray, p: Profile) -> pd.DataFrame:
    """One row per timed group (a handle for per-handle models, a task's stream of a file for
    stateless ones): first/last ns, backend requests, bytes over the link, requests served."""
    st = a.streams
    fused = st.loc[(st["kind"] == "fuse_handle") & st["file_id"].isin(data_ids), "file_id"].unique()
    if p.model == "stateless":
        rows = st[(st["kind"] == "task") & st["file_id"].isin(data_ids) & ~st["file_id"].isin(fused)]
        served = np.ceil(rows["bytes"] / np.maximum(rows["bytes"] / rows["accesses"].clip(lower=1),
                                                    KERNEL_READAHEAD)).to_numpy()
        groups = pd.DataFrame({"first": rows["first_ts_ns"], "last": rows["last_ts_ns"], "served": served,
                               "bytes": rows["bytes"]})
        if len(fused):  # the daemon's requests per (task, file)
            f = a.fuse
            on = np.isin(f.file, fused)
            key = pd.MultiIndex.from_arrays([f.tid[on], f.file[on]])
            codes, _ = pd.factorize(key)
            order = np.lexsort((f.ts[on], codes))
            c, off, n = codes[order], f.offset[on][order], f.nbytes[on][order]
            opened = _not_continuing(np.r_[True, c[1:] != c[:-1]], off, n)
            df = pd.DataFrame({"c": c, "ts": f.ts[on][order], "end": (f.ts[on] + f.latency[on])[order], "bytes": n,
                               "opened": opened})
            g = df.groupby("c").agg(first=("ts", "min"), last=("end", "max"), served=("ts", "size"),
                                    bytes=("bytes", "sum"), runs=("opened", "sum"))
            groups = pd.concat([groups, g], ignore_index=True)
        groups["requests"] = np.maximum(groups["served"], np.ceil(groups["bytes"] / p.rsize))
        groups["runs"] = groups["runs"].fillna(groups["requests"]) if "runs" in groups else groups["requests"]
        groups["transfer"] = groups["bytes"]
        return groups
    by_handle = p.model != "gcsfuse" and len(fused)  # a prefetcher's runs, from the daemon's requests
    rows = st[((st["kind"] == "fuse_handle") & st["file_id"].isin(fused) & (not by_handle))
              | ((st["kind"] == "ofd") & st["file_id"].isin(data_ids) & ~st["file_id"].isin(fused))]
    app_view = (rows["kind"] == "ofd").to_numpy()
    mean = rows["bytes"].to_numpy() / rows["accesses"].clip(lower=1).to_numpy()
    served = np.where(app_view, np.ceil(rows["bytes"] / np.maximum(mean, KERNEL_READAHEAD)), rows["accesses"])
    runs = rows["gcsfuse_seeks"].fillna(0).to_numpy() + 1
    if p.model == "gcsfuse":  # analyze/storage/gcsfuse_replay.py's replay of gcsfuse's reader
        requests, transfer = rows["gcsfuse_requests"].fillna(1).to_numpy(), rows["bytes"].to_numpy()
    else:  # windows doubling within each run between seeks (runs of equal length)
        per_run = rows["bytes"].to_numpy() / runs
        windows, covered = _prefetch_windows(per_run)
        requests, transfer = runs * windows, runs * covered
    groups = pd.DataFrame({"first": rows["first_ts_ns"].to_numpy(), "last": rows["last_ts_ns"].to_numpy(),
                           "served": served, "requests": requests, "transfer": transfer,
                           "bytes": rows["bytes"].to_numpy()})
    return pd.concat([groups, _prefetcher_runs(a, fused, p)], ignore_index=True) if by_handle else groups


def _not_continuing(first: np.ndarray, offset: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Per request (rows by stream, then time; ``first``: each stream's first row): whether it opened a
    range, a stream's first or one that does not continue the request before it. The first byte of the
    recorded costs is measured on these, and the stateless replay charges it on these."""
    return first | (offset != np.r_[0, (offset + nbytes)[:-1]])


def _run_starts(first: np.ndarray, offset: np.ndarray, nbytes: np.ndarray, th, skips_reopen: bool) -> np.ndarray:
    """Per request of a per-handle prefetcher (rows by handle, then time): whether it starts a run, a
    handle's first or a seek (the gcsfuse replay's rule), or, where short skips were measured to reopen
    (``skips_reopen``), any request not continuing the last."""
    if skips_reopen:
        return _not_continuing(first, offset, nbytes)
    return first | is_seek(offset - np.r_[0, (offset + nbytes)[:-1]], th)


def _prefetcher_runs(a, fused: np.ndarray, p: Profile) -> pd.DataFrame:
    """Per FUSE handle of the files ``fused``: its requests' first start and last end, how many, their
    bytes, and the windows a per-handle prefetcher opens: one doubling from PREFETCH_FIRST per run
    between seeks (the gcsfuse replay's seek rule; ``p.skips_reopen``: any request not continuing the last),
    never past the file's end. Runs of equal length had charged a sequential JuiceFS load_file, a header
    read and 3 jumps then 256 MiB in order, 4 runs of 64 MiB: twice its bytes (+40-45 % on its wall)."""
    f, th = a.fuse, a.thresholds
    on = np.isin(f.file, fused)
    order = np.lexsort((f.ts[on], f.handle[on]))
    h, ts, off, n = f.handle[on][order], f.ts[on][order], f.offset[on][order], f.nbytes[on][order]
    end = ts + f.latency[on][order]
    first = np.r_[True, h[1:] != h[:-1]]
    opens = _run_starts(first, off, n, th, p.skips_reopen)
    run_bytes = np.bincount(np.cumsum(opens) - 1, n)
    windows, covered = _prefetch_windows(run_bytes)
    size = a.files["size"].reindex(f.file[on][order][opens]).fillna(0).to_numpy()
    covered = np.minimum(covered, np.maximum(size - off[opens], run_bytes))  # no window past the end
    codes, handles = pd.factorize(h)
    run_handle = codes[opens]
    count = len(handles)
    return pd.DataFrame({"first": np.minimum.reduceat(ts, np.flatnonzero(first)),
                         "last": np.maximum.reduceat(end, np.flatnonzero(first)),
                         "served": np.bincount(codes, minlength=count).astype(float),
                         "requests": np.bincount(run_handle, windows, minlength=count),
                         "runs": np.bincount(run_handle, minlength=count).astype(float),
                         "transfer": np.bincount(run_handle, covered, minlength=count),
                         "bytes": np.bincount(codes, n, minlength=count)})


def _prefetch_windows(nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Requests and bytes a window doubling from PREFETCH_FIRST to PREFETCH_MAX needs to cover each run."""
    ramp = np.cumsum(np.minimum(PREFETCH_FIRST * 2.0 ** np.arange(32), PREFETCH_MAX))
    n = np.searchsorted(ramp, np.maximum(nbytes, 1)) + 1
    return n.astype(np.float64), ramp[n - 1]


def _phase_time(g: pd.DataFrame, busy: np.ndarray, p: Profile) -> float:
    """Groups active at the same time run in parallel: per phase of overlapping groups the slowest
    (at least the phase's bytes over the bandwidth), summed over the phases."""
    if len(g) == 0:
        return 0.0
    order = np.argsort(g["first"].to_numpy(), kind="stable")
    f, last = g["first"].to_numpy()[order], np.maximum.accumulate(g["last"].to_numpy()[order])
    phase = np.cumsum(np.r_[True, f[1:] > last[:-1]]) - 1
    slowest = pd.Series(busy[order]).groupby(phase).max().to_numpy()
    link = (pd.Series(g["transfer"].to_numpy()[order]).groupby(phase).sum().to_numpy() / (p.bandwidth_mbps * 1e6)
            if p.bandwidth_mbps else 0.0)
    return float(np.maximum(slowest, link).sum())


def _predict_io(a, data_ids: np.ndarray, p: Profile) -> tuple[float, int, int, int]:
    g = _groups(a, data_ids, p)
    per_bw = 1 / (p.bandwidth_mbps * 1e6) if p.bandwidth_mbps and not p.request_carries_bytes else 0.0
    # a first byte per backend request; where a stateless mount's costs were measured from its recorded
    # requests (request_carries_bytes) it is the extra of a request that did not continue its stream's
    # last, so only those pay it (s3fs at 256 MiB: 5 workers' first requests waited 714 ms on its
    # download, the 2,048 after them 0.05 ms; charged on every request the load was predicted at 356 s, not 6.9);
    # a per-handle prefetcher measured so pays it once per run, its windows streamed ahead (JuiceFS 64 MiB
    # safe_open_threads: 45 seeks at 27 ms were the load's wait; charged per window on a first byte the
    # ~100 cheap short skips had put at ~0 ms, -30..-33 %; now +9..+12 %)
    runs = g["runs"].fillna(g["requests"]) if "runs" in g else g["requests"]
    first_bytes = runs if p.request_carries_bytes else g["requests"]
    busy = ((first_bytes * p.latency_ms + g["served"] * p.request_ms) / 1000.0 / p.in_flight
            + g["transfer"] * per_bw)
    return _phase_time(g, busy.to_numpy(), p), int(g["requests"].sum()), int(g["transfer"].sum()), len(g)


def _predict_fixed(file_bytes: list[int], p: Profile, streams: int = 1) -> tuple[float, int, int]:
    """Each file read once, in order, split into ``streams`` contiguous shares read in parallel (each
    on a handle of its own); files one after another."""
    lat, total, requests = p.latency_ms / 1000.0, 0.0, 0
    link = p.bandwidth_mbps * 1e6 if p.bandwidth_mbps and not p.request_carries_bytes else math.inf
    for nbytes in file_bytes:
        share = -(-nbytes // streams)
        if p.model == "gcsfuse":
            n = max(1, -(-share // (200 * MiB)))
            t = n * lat
        elif p.model == "prefetch":
            n, covered, window = 0, 0, PREFETCH_FIRST
            while covered < share:
                covered += window
                window = min(2 * window, PREFETCH_MAX)
                n += 1
            t = n * lat
        else:
            n = max(1, -(-share // FIXED_REQUEST))
            t = n * lat / FIXED_DEPTH
        total += t + nbytes / link + -(-share // KERNEL_READAHEAD) * p.request_ms / 1000.0 / p.in_flight
        requests += n * streams
    return total, requests, int(sum(file_bytes))


def sequential_read_s(nbytes: int, p: Profile) -> float:
    """What one reader taking ``nbytes`` of a file in order (1 MiB requests) costs on ``p``: the
    floor a read pattern is measured against (analyze/rules/cost.py)."""
    return _predict_fixed([int(nbytes)], p, 1)[0]


def needed_bytes(row) -> int:
    """What the load needed of one file (a files-table row): see ``_needed_bytes``."""
    return max(_needed_bytes(pd.DataFrame([row])) or [0])


STARTUP_FILE_BYTES = 1 * MiB  # smaller data files (locale, ssl config) are read by the start-up itself
STARTUP_READ_BYTES = 1 * MiB  # a checkpoint's first MiB: its header, read at open before the bulk is needed


def _startup_s(a, data: pd.DataFrame) -> float:
    """Seconds from the recording's start to the load's first access past the first STARTUP_READ_BYTES of
    a data file of at least STARTUP_FILE_BYTES (its checkpoints; 0: unknown): what a read started with
    the interpreter (the prefetch, the own-fd loader's early read) has before the load needs the bytes. A
    header read at open does not end it: safetensors' safe_open reads its header before torch is
    imported, the tensors after (sshfs 20 ms, 256 MiB, 4 threads: the header 0.16 s in, the tensors 2 s
    later)."""
    t0 = (a.meta or {}).get("t0_ns")
    big = data.index[(data["size"] >= STARTUP_FILE_BYTES).to_numpy()]
    app = a.app
    on = np.isin(app.file, (big if len(big) else data.index).to_numpy())
    if not t0 or not on.any():
        return 0.0
    bulk = on & (app.offset + app.nbytes > STARTUP_READ_BYTES)
    first = app.ts[bulk if bulk.any() else on].min()
    return max(float(first - int(t0)) / 1e9, 0.0)


def routed(a) -> bool:
    """Whether the load read through an entry point fix's own-fd loader takes over."""
    r = a.summary.reads_from or {}
    return any(call.startswith(ROUTED_LIBRARIES) for c in r.get("chains") or [] for call in c["chain"].split(" -> "))


def _fixed_plan(a, data: pd.DataFrame, need: list[int], p: Profile) -> tuple[str, float, int, int, float]:
    """(strategy, I/O seconds the load still waits, backend requests, bytes, start-up s) of the fix
    ``fix --compare`` would choose here: the start-up prefetch, or the own-fd loader where it applies;
    where the mount was measured to drop the page cache on open, never the prefetch when something else
    applies: the own-fd loader, else one in-order reader per file ("sequential": fix's own fd per
    forked worker or populate; sshfs 64 MiB fork pool: a prefetch predicted at 1.40 s, fix measured its
    own fd per worker at 3.73 s)."""
    startup = _startup_s(a, data)
    t, requests, nbytes = _predict_fixed(need, p, PREFETCH_STREAMS)
    measured = getattr(a, "measured", None)
    plans = [("prefetch", max(_measured_s(need, p, measured, PREFETCH_STREAMS, t) - startup, 0.0), requests, nbytes)]
    if routed(a):
        t, requests, nbytes = _predict_fixed(need, p, 1)
        plans.append(("own-fd", _own_fd_s(need, p, measured, t, startup), requests, nbytes))
    if measured is not None and not measured.cache_survives_open:  # a prefetch cannot gain there
        if len(plans) > 1:
            plans = plans[1:]
        elif _mapped(data) or _forked(a, data):  # fix's own fd per forked worker, or a populate of the mapping
            plans = [("sequential", *_in_order_s(a, data, need, p, measured))]
    return (*min(plans, key=lambda plan: plan[1]), startup)


def _in_order_s(a, data: pd.DataFrame, need: list[int], p: Profile, measured) -> tuple[float, int, int]:
    """(I/O seconds, backend requests, bytes) of one in-order reader per file: fix's populate of a
    mapping, its own fd per forked worker. Where the model is stateless and forked workers read, their
    own fds change nothing the model sees (each task's stream of a file is its own there already,
    costed from its recorded requests): the recorded replay. sshfs at 20 ms, 64 MiB fork pool: one
    in-order reader predicted 2.24 s, fix measured the workers' own fds at 3.73 s (3.92 s shared)."""
    if p.model == "stateless" and _forked(a, data) and not _mapped(data):
        t, requests, nbytes, _ = _predict_io(a, data.index.to_numpy(), p)
        return t, requests, nbytes
    t, requests, nbytes = _predict_fixed(need, p, 1)
    return _measured_s(need, p, measured, 1, t), requests, nbytes


def _mapped(data: pd.DataFrame) -> bool:
    """The load mapped a data file (page faults on it): what fix's populate acts on."""
    return bool((data["page_faults"].fillna(0) > 0).any())


def _forked(a, data: pd.DataFrame) -> bool:
    """Several processes (forked workers) read a data file: what fix's own fd per forked worker acts on."""
    on = np.isin(a.app.file, data.index.to_numpy())
    return len(np.unique(a.app.pid[on])) > 1


def fixed_io_s(a, p: Profile) -> dict[str, float]:
    """What the fixes ``readtrace fix --compare`` tries would leave the load waiting on ``p``, in seconds:
    "prefetch" (the start-up prefetch, PREFETCH_STREAMS readers, less what the start-up hides),
    "sequential" (one reader per file, in order: an own fd per worker, a populate), "own-fd" (readtrace's
    own-fd loader: those reads, early where the mount drops the cache, ``_own_fd_s``), "recorded":
    the recorded wait on the data files they replace, and "hidden": the own time those waits covered,
    which each fixed load still pays (``summary.time.besides_hidden_s``). fix/predict.py ranks the
    candidates by these."""
    data = _data_files(a)
    need = _needed_bytes(data)
    measured = getattr(a, "measured", None)
    prefetch = _measured_s(need, p, measured, PREFETCH_STREAMS, _predict_fixed(need, p, PREFETCH_STREAMS)[0])
    recorded = a.summary.time.data_wait_s or 0.0
    sequential, startup = _predict_fixed(need, p, 1)[0], _startup_s(a, data)
    return {"recorded": float(recorded), "hidden": float(a.summary.time.besides_hidden_s),
            "prefetch": max(prefetch - startup, 0.0),
            "sequential": _in_order_s(a, data, need, p, measured)[0],
            "own-fd": _own_fd_s(need, p, measured, sequential, startup)}


def _own_fd_s(need: list[int], p: Profile, m: MountProfile | None, modelled_s: float, startup_s: float) -> float:
    """What readtrace's own-fd loader leaves the load waiting: its reads (``_measured_s``), less what the
    start-up hides where the mount was measured to drop the page cache on open, as there a fixed run
    reads the files at interpreter start-up, during the imports (inject/early.py). sshfs at 20 ms,
    64 MiB: predicted 2.8 s without, measured 2.0 s (the 0.9 s read inside a 1.9 s start-up)."""
    read = _measured_s(need, p, m, 1, modelled_s)
    return max(read - startup_s, 0.0) if m is not None and not m.cache_survives_open else read


def _measured_s(need: list[int], p: Profile, m: MountProfile | None, streams: int, modelled_s: float) -> float:
    """What reading ``need`` (bytes per file, files one after another) in order costs where the mount was
    probed: ``streams`` readers at the measured rate (1: readtrace's own-fd loader, which reads with the
    probe's N streams where those measured faster, ``MountProfile.reader_streams``; a populate reads
    with one and is predicted alike: the predictions order fix's trials, each is measured), one first
    byte per file (``p``'s: the load's own where recorded); ``modelled_s`` (the storage model's) where
    it was not. sshfs at 20 ms, 64 MiB: the model charged its 128 KiB requests one after another
    (14.6 s); 4 own-fd readers took 0.95 s."""
    if m is None or m.sequential_mbps <= 0 or m.parallel_mbps <= 0:
        return modelled_s
    readers = m.reader_streams if streams == 1 else streams
    return sum(p.latency_ms / 1000.0 + m.read_s(n, readers) for n in need)


def _data_files(a) -> pd.DataFrame:
    return a.files[(a.files["role"] == "data") & a.files["path"].str.startswith("/")]


def _needed_bytes(data: pd.DataFrame) -> list[int]:
    """What the load needed of each file: its distinct bytes (the FUSE view's where larger: faults
    read whole pages around what they touched), at most the file."""
    need = np.maximum(data["unique_bytes"].fillna(0), data["fuse_read_bytes"].fillna(0))
    need = np.where(data["size"] > 0, np.minimum(need, data["size"]), need)
    return [int(b) for b in need if b > 0]


def what_if(a, profiles: list[Profile], recorded: bool = True) -> list[Prediction]:
    """Predictions for each profile from an Analysis (``readtrace.analyze.analyze``); ``recorded``
    False: the fixed pattern only (cheap)."""
    data = _data_files(a)
    ids = data.index.to_numpy()
    need = _needed_bytes(data)
    # the waits the model replaces: those on the data files it replays (libraries stay as they were)
    wall, io = a.summary.wall_s, a.summary.time.data_wait_s or 0.0
    hidden = a.summary.time.besides_hidden_s  # the slowest task's own time under the waits: fixed, it is not
    source = "fuse" if len(a.fuse) else "app"
    out = []
    for p in profiles:
        t, requests, fetched, streams = _predict_io(a, ids, p) if recorded else (float("nan"), 0, 0, 0)
        strategy, ft, frequests, ffetched, startup = _fixed_plan(a, data, need, p)
        out.append(Prediction(
            p.name, p.latency_ms, p.bandwidth_mbps,
            predicted_s=wall - io + t if wall is not None and recorded else None,
            predicted_fixed_s=wall - io + hidden + ft if wall is not None else None,
            predicted_io_s=t, predicted_fixed_io_s=ft, recorded_io_wait_s=io, backend_requests=requests,
            bytes_fetched=fetched, fixed_backend_requests=frequests, fixed_bytes_fetched=ffetched,
            streams=streams, source=source, fixed_strategy=strategy, startup_s=startup))
    return out


MAX_ESTIMATE_REQUESTS = 200_000  # FUSE requests looked at to measure the mount's own costs


def mount_profile(a, request_quantile: float | None = None) -> Profile | None:
    """The profile of the main data file's own mount, with its costs measured from the recorded FUSE
    requests of its handles: a handle serves one read at a time, so each request's service time is
    counted from when the handle was free; ``request_ms`` = the median service of the requests that
    continued a backend range (the daemon's own work; a per-handle prefetcher's: their mean, as some
    wait on its next window and the load waits their sum, unless its short skips were measured to
    reopen, ``_skips_reopen``: then those are runs of their own), ``latency_ms`` = the median of those that
    started one (a gap or a jump back on the handle; a prefetcher's: a seek, the gcsfuse rule), minus that. None: no profile for that fs.
    ``request_quantile``: that quantile instead (a lower one leaves out the continuing requests that
    still paid for a new backend range: on a handle read at random most of them do)."""
    data = _data_files(a)
    if data.empty:
        return None
    measured = getattr(a, "measured", None)
    name = fs_profile(str(data["fstype"].iloc[0])).storage_model or measured_model(measured)
    if name is None:
        return None
    recorded, latency_measured = _recorded_costs(a, data, name, request_quantile)
    return with_measured(replace(recorded, latency_recorded=latency_measured), measured, keep_latency=latency_measured)


def measured_model(m: MountProfile | None) -> str | None:
    """The model of a mount the table has none for, from its measured profile: a per-handle prefetcher
    where a shared handle measurably costs, else stateless requests."""
    if m is None:
        return None
    return "prefetch" if m.punishes_shared_handle else "nfs"


def with_measured(p: Profile, m: MountProfile | None, keep_latency: bool = False) -> Profile:
    """``p`` with the first byte and link bandwidth the mount's profile measured (the better of the
    N-stream and the one-stream rate, the link carries at least that, net of one first byte per stream,
    which the model charges on its own: httpdirfs 1.2.5, which serves a request per ~100 ms tick,
    measured 0.98 MB/s by 4 streams, 1.22 by one; its one-stream load_file waited 55.6 s on 64 MiB). ``keep_latency``: ``p``'s
    first byte was measured from the load's own FUSE requests and stays: the probe's small reads on
    fresh opens are not what a daemon with its own read-ahead charges a load (s3fs: 909 ms probed,
    0.1 ms recorded; its own trace predicted at 29x its wall with the probe's, within 11 % with its own)."""
    if m is None:
        return p
    bandwidth = max(_net_rate(m.parallel_sample, m.parallel_mbps, m.first_byte_ms),
                    _net_rate(m.sample_bytes, m.sequential_mbps, m.first_byte_ms))
    latency = p.latency_ms if keep_latency else m.first_byte_ms
    return replace(p, latency_ms=latency, bandwidth_mbps=round(bandwidth, 2), measured_at=m.measured_at)


def _net_rate(nbytes: int, mbps: float, first_byte_ms: float) -> float:
    """A probed rate in MB/s net of one first byte (at most doubled by taking it out)."""
    seconds = nbytes / (mbps * 1e6) if mbps > 0 else 0.0
    net = seconds - first_byte_ms / 1000.0
    return nbytes / net / 1e6 if net > seconds / 2 else mbps * 2


def _recorded_costs(a, data: pd.DataFrame, name: str, request_quantile: float | None) -> tuple[Profile, bool]:
    """The profile ``name`` with the costs measured from the recorded FUSE requests, and whether its
    first byte was among them (requests that started a backend range were recorded).

    Per-handle models: a handle serves one read at a time, so each request's service time is counted
    from when the handle was free. Stateless models: each task's stream of a handle is its own (forked
    workers on one fd are four streams), a request costs its latency, and ``in_flight`` is how many of
    a stream's requests the kernel had out at once (the sum of their latencies over the time some was
    out): sshfs at 20 ms, 1.7-1.9 (a read-ahead window and the next), charged one after another the
    replay had predicted its loads at 1.4-1.9x their wall."""
    f = a.fuse
    on = np.isin(f.file, data.index.to_numpy())
    if not on.any() or on.sum() > MAX_ESTIMATE_REQUESTS:
        return profile(name), False
    stateless = DEFAULTS[name].model == "stateless"
    stream = pd.factorize(pd.MultiIndex.from_arrays([f.handle[on], f.tid[on]]))[0] if stateless else f.handle[on]
    order = np.lexsort((f.ts[on], stream))
    h, ts, end = stream[order], f.ts[on][order], (f.ts[on] + f.latency[on])[order]
    off, size = f.offset[on][order], f.nbytes[on][order]
    first = np.r_[True, h[1:] != h[:-1]]
    if stateless:
        service_ms = (end - ts) / 1e6
        codes = pd.factorize(h)[0]
        busy = union_length(codes, int(codes.max()) + 1, ts, end).sum()
        in_flight = max(float(service_ms.sum() * 1e6 / busy), 1.0) if busy > 0 else 1.0
    else:
        free_at = np.r_[0, running_max_in_group(h, end)[:-1]]  # when the handle's previous request ended
        # >= 0: a daemon that serves one handle's requests at once can end one before an earlier one
        # ended (4 threads on one shared fd, recorded mid-load: the median of the few continuing ones was -67 ms)
        service_ms = np.maximum(end - np.where(first, ts, np.maximum(ts, free_at)), 0) / 1e6
        in_flight = 1.0
    # the requests gcsfuse's reader opened a backend request for, else those not continuing the one before
    opened = new_requests(np.flatnonzero(first), off, size, a.thresholds) if DEFAULTS[name].model == "gcsfuse" \
        else None
    if opened is None:
        opened = _not_continuing(first, off, size)
    skips = False
    if DEFAULTS[name].model == "prefetch":
        seeks = _run_starts(first, off, size, a.thresholds, skips_reopen=False)
        forward = off > np.r_[0, (off + size)[:-1]]
        skips = _skips_reopen(forward & ~seeks, seeks, ~opened, service_ms)
        opened = _run_starts(first, off, size, a.thresholds, skips)  # the requests that start a run
    continuing = service_ms[~opened]
    if not len(continuing):
        request = 0.0
    elif request_quantile is None and DEFAULTS[name].model == "prefetch" and not skips:
        # some of a prefetcher's continuing requests wait on its next window: their mean (where its short
        # skips reopen, those are runs of their own, and the median is what a continuing request costs)
        request = float(np.mean(continuing))
    else:
        request = float(np.quantile(continuing, 0.5 if request_quantile is None else request_quantile))
    latency = float(np.median(service_ms[opened])) - request if opened.any() else DEFAULTS[name].latency_ms
    measured = replace(profile(name, max(latency, 0.0), request_ms=request), in_flight=round(in_flight, 2),
                       request_carries_bytes=stateless or DEFAULTS[name].model == "prefetch", skips_reopen=skips)
    return measured, bool(opened.any())


MIN_SKIPS = 8  # short forward skips needed to judge what one costs


def _skips_reopen(skip: np.ndarray, seek: np.ndarray, continuing: np.ndarray, service_ms: np.ndarray) -> bool:
    """Whether the handles' short forward skips (inside the seek window) were served like a seek: their
    median service at least half way from a continuing request's to a seek's. rclone waits
    ``--vfs-read-wait`` (20 ms) for the gap to fill, then reopens its reader: a 64 MiB mmap load_file
    skipped 256 KiB ~100 times at ~20.5 ms each (the seeks 22 ms, continuing 0.06 ms) and was predicted
    28-32 % under its wall with those charged as continuing; at 256 MiB the same skips took 0.27 ms."""
    if skip.sum() < MIN_SKIPS or not seek.any() or not continuing.any():
        return False
    base = float(np.median(service_ms[continuing]))
    return bool(np.median(service_ms[skip]) - base >= (np.median(service_ms[seek]) - base) / 2)


def own_mount_predictions(a) -> list[Prediction]:
    """The what-if model of the trace's own mount, as recorded and fixed ([] where no model knows it)."""
    mount = mount_profile(a)
    return what_if(a, [mount]) if mount and a.summary.wall_s is not None else []
