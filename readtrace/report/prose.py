"""The English of a finding: one renderer per finding type, from its figures (readtrace/analyze/rules/types.py).

``render(finding) -> Prose`` gives the one-line message, the evidence lines and the recommendation;
every output (terminal, HTML, JSON's ``message``) uses it, so the wording lives here only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from readtrace.analyze.rules.types import (
    CacheEvictedReread,
    ColdCache,
    Finding,
    LoadSkew,
    LostEvents,
    MmapFaultStorm,
    RandomOnFuseHandle,
    ReplicatedReads,
    SharedFdInterleave,
    SmallFuseReadahead,
    SmallRequests,
)
from readtrace.analyze.storage.levers import AS_RECORDED
from readtrace.analyze.summary import Summary
from readtrace.analyze.views.attribution import SEP
from readtrace.measure.profile import MountProfile
from readtrace.pagecache.reclaim import DROPPED, NONE_SEEN, PRESSURE_CAUSE, PROACTIVE_CAUSE
from readtrace.report.units import fmt_bytes, fmt_count, fmt_pct, fmt_seconds, fmt_top

FIX_HINT = "`readtrace fix --compare` reruns it cold with sequential prefetch and an own-fd loader"
PREAD_LEVER = "safetensors load_file(..., backend=\"pread\")"
# the large-read switch of a mapped file's format, where its library has one (a GGUF or raw file has none)
PREAD_LEVERS = {".safetensors": PREAD_LEVER, ".pt": "torch.load(..., mmap=False)", ".pth": "torch.load(..., mmap=False)",
                ".bin": "torch.load(..., mmap=False)"}
OTHER_PREAD_LEVER = "large sequential reads into a buffer, e.g. readinto() of 16 MiB chunks"


def pread_lever(path: str | None) -> str:
    """How to read ``path`` with large reads instead of faulting its mapping, in its format's words."""
    suffix = os.path.splitext(path or "")[1].lower()
    return PREAD_LEVERS.get(suffix, OTHER_PREAD_LEVER if path else PREAD_LEVER)
FIXED_HOW = {"prefetch": "fix's prefetch: 4 own-fd streams in order, from start-up",
             "own-fd": "fix's own-fd loader: each file read once in order",
             "sequential": "fix's own fd per forked worker or populate: each file read once in order"}
MAX_CHAINS_NAMED = 3  # the headline names the innermost calls of this many of an entry point's chains


@dataclass(frozen=True)
class Prose:
    message: str
    evidence: list[str]
    recommendation: str


def _fs(f: Finding) -> str:
    return f.fstype or "an unknown file system"


def _generic(f: Finding) -> str:
    """The caveat of a judgement the knowledge table could not back (readtrace/fs/knowledge.py)."""
    if f.fs_known:
        return ""
    return (f" (generic judgement: readtrace's file-system table does not know {_fs(f)}; most FUSE clients of "
            "object stores keep read-ahead state per handle, so this assumes it does: compare one fd per worker "
            "to be sure)")


def _shared_mapping_sampled(f: SharedFdInterleave) -> Prose:
    msg = (f"{f.tasks} read fronts advanced at once through one mmap mapping of {f.file} on {_fs(f)}: every "
           f"front >= {fmt_pct(f.min_task_consecutive_fraction)} forward on its own, the sampled runs in time "
           f"order {fmt_pct(f.consecutive_fraction)} in order, score {f.score:.2f}" + _generic(f))
    if not f.per_handle:
        msg += f" (harmless here: {f.fs_family} keeps no per-handle read stream)"
    evidence = [f"front {r['front']}: {fmt_pct(r['sequential_fraction'])} forward over {r['samples']} samples, "
                f"{fmt_bytes(r['bytes'])} from offset {r['first_offset']} to {r['last_end']}" for r in f.task_rows]
    return Prose(msg, evidence, "load without faulting the mapping from several threads: read with large "
                                f"sequential reads ({pread_lever(f.file)}) or prefetch the file sequentially first; "
                                f"{FIX_HINT}" + (f"; {f.fs_levers}" if f.per_handle else ""))


def _shared_fd(f: SharedFdInterleave) -> Prose:
    if f.view == "residency":
        return _shared_mapping_sampled(f)
    what = "FUSE handle" if f.view == "fuse_handle" else "open file"
    what = f"mmap mapping ({what})" if f.mapping else what
    msg = (f"{f.tasks} tasks read {f.file} through one {what} on {_fs(f)}: every task >= "
           f"{fmt_pct(f.min_task_consecutive_fraction)} consecutive on its own, the merged stream "
           f"{fmt_pct(f.consecutive_fraction)} consecutive ({fmt_pct(f.out_of_order_fraction)} of bytes out of "
           f"order), score {f.score:.2f}")
    if f.per_handle:
        msg += (f"; gcsfuse replay: {f.predicted_requests} backend requests vs {f.sequential_requests} for one "
                "sequential reader" + _generic(f))
    else:
        msg += f" (harmless here: {f.fs_family} keeps no per-handle read stream)"
    evidence = [f"ReadFile (inode {r['inode']}, PID {r['tid']}, handle {r['handle']}, offset {r['offset']}, "
                f"{r['bytes']} bytes)" for r in f.evidence]
    evidence += [f"task {t['tid']}: {fmt_pct(t['consecutive_fraction'])} consecutive, "
                 f"{fmt_pct(t['sequential_fraction'])} sequential on its own, {fmt_bytes(t['bytes'])} from offset "
                 f"{t['first_offset']} to {t['last_end']}" for t in f.task_rows]
    lever = ("load without faulting the mapping from several threads: read with large sequential reads "
             f"({pread_lever(f.file)}) or prefetch the file sequentially first" if f.mapping else
             "open one fd per worker (open the file inside each worker, after fork) or read it with one "
             "sequential reader")
    return Prose(msg, evidence, f"{lever}; {FIX_HINT}" + (f"; {f.fs_levers}" if f.per_handle else ""))


def _random(f: RandomOnFuseHandle) -> Prose:
    turned = f"turns random at read #{f.random_after}" if f.random_after else "stays sequential"
    msg = (f"{f.stream} on {f.file} ({f.fstype}): {fmt_pct(f.seek_fraction)} of {fmt_bytes(f.bytes)} read after "
           f"a seek ({f.seeks} seeks); gcsfuse replay {turned}: {f.predicted_requests} backend requests vs "
           f"{f.sequential_requests} sequential" + _generic(f))
    if f.jumps:
        msg += (f"; {f.jumps} FUSE requests jumped away from where the handle's previous one ended and waited "
                f"{fmt_seconds(f.jump_wait_s)} more than its continuing ones (measured)")
    evidence = [f"top strides: {fmt_top(f.top_strides, fmt_bytes)}", f"top sizes: {fmt_top(f.top_sizes, fmt_bytes)}"]
    return Prose(msg, evidence, "prefetch the file sequentially into the page cache before the load, or read it "
                                f"in file order; {FIX_HINT}; {f.fs_levers}")


def _small(f: SmallRequests) -> Prose:
    msg = (f"{f.small} of {f.reads} reads of {f.file} ({fmt_pct(f.small / max(f.reads, 1))}) are smaller than "
           f"{fmt_bytes(f.small_bytes)} (median {fmt_bytes(f.median_bytes)}) on {_fs(f)}")
    hist = ", ".join(f"{k}: {v}" for k, v in f.size_hist.items()) or "-"
    return Prose(msg, [f"sizes: {hist}", f"top sizes: {fmt_top(f.top_sizes, fmt_bytes)}"],
                 "read in chunks of 1 MiB or more (whole tensors, a buffered reader) or prefetch the file "
                 f"sequentially; {FIX_HINT}" + (f"; {f.fs_levers}" if f.remote else ""))


def _fault_storm(f: MmapFaultStorm) -> Prose:
    msg = (f"{f.faults} page faults by {f.tasks} task(s) on the mapping of {f.file} ({fmt_bytes(f.mmap_bytes)} "
           f"mapped in, {fmt_pct(f.cache_miss_fraction)} missed the cache) on {_fs(f)}")
    return Prose(msg, [f"mmap bytes {f.mmap_bytes}, read() bytes {f.read_bytes}, "
                       f"readahead windows {f.readahead_windows}"],
                 f"read the file with large sequential reads instead of faulting it in ({pread_lever(f.file)}) or "
                 f"prefetch it sequentially into the page cache first; {FIX_HINT}")


def _cold(f: ColdCache) -> Prose:
    """Two quantities, said apart: what the program read, and what the kernel fetched from storage
    into the page cache meanwhile (read-ahead can fetch more than was read)."""
    msg = (f"the load read {fmt_bytes(f.bytes_read)} from {f.files} file(s); the kernel fetched "
           f"{fmt_bytes(f.miss_bytes)} from storage into the page cache for them"
           f"{_fetched_share(f.miss_bytes, f.bytes_read)}: the load ran "
           + ("cold" if f.miss_bytes >= 0.95 * f.bytes_read else "mostly cold"))
    return Prose(msg, [f"{r['path']}: read {fmt_bytes(r['bytes_read'])}, fetched {fmt_bytes(r['miss_bytes'])} "
                       "into the page cache" for r in f.evidence],
                 "a cold load pays for every byte from storage: prefetch the files sequentially with large reads "
                 f"before loading, or keep them cached between runs; {FIX_HINT}")


def _fetched_share(fetched: int, read: int) -> str:
    if read <= 0:
        return ""
    if fetched > 1.05 * read:
        return f" ({fetched / read:.3g}x what was read: read-ahead fetched pages the program did not use)"
    return f" ({fmt_pct(fetched / read)} of what was read)"


ONCE_IN_ORDER = "read each byte once, in file order (one sequential pass)"
EVICTION_ADVICE = {  # by what reclaimed page cache during the run (pagecache/reclaim.py)
    PRESSURE_CAUSE: f"{ONCE_IN_ORDER}, and give the load more page cache (lower memory pressure, raise the cgroup "
                    "memory limit)",
    PROACTIVE_CAUSE: f"{ONCE_IN_ORDER}, right before it is used: proactive reclaim takes page cache that sits idle, "
                     "so more memory does not help; a prefetch ahead of the load keeps its pages only pinned "
                     "(readtrace.pagecache.prefetch.prefetch(files, pin=True), as `readtrace fix --strategy prefetch` does)",
    DROPPED: f"{ONCE_IN_ORDER}, and find what writes to /proc/sys/vm/drop_caches (it empties every cache here)",
    NONE_SEEN: f"{ONCE_IN_ORDER}; no reclaim was seen taking them: look for what drops this file's pages "
               "(posix_fadvise(DONTNEED), vmtouch -e, a FUSE daemon's invalidation)",
    "": f"{ONCE_IN_ORDER}; where memory pressure evicted them, give the load more page cache",
}


def _reread(f: CacheEvictedReread) -> Prose:
    dropped = " or dropped by the FUSE daemon when the file was opened again" if f.fuse else ""
    msg = (f"{fmt_bytes(f.refetched_bytes)} of {f.file} entered the page cache more than once "
           f"({fmt_bytes(f.miss_bytes)} fetched, {fmt_bytes(f.miss_unique_bytes)} distinct): pages were "
           f"evicted{dropped} before they were used again")
    amp = "-" if f.reread_amplification is None else f"{f.reread_amplification:.2f}"
    evidence = [f"re-read amplification of the file stream: {amp}"] + ([f"eviction: {f.eviction}"] if f.eviction else [])
    return Prose(msg, evidence, EVICTION_ADVICE.get(f.evicted_by, EVICTION_ADVICE[""]))


def _fuse_readahead(f: SmallFuseReadahead) -> Prose:
    msg = (f"{f.requests} FUSE READ requests for {f.file or '<unknown file>'} with median size "
           f"{fmt_bytes(f.median_bytes)}: the kernel's FUSE read-ahead is at its 128 KiB default")
    return Prose(msg, [f"FUSE connection {f.connection}: {fmt_bytes(f.bytes)} in {f.requests} requests"],
                 f"raise it (root): echo {f.recommended_kb} > /sys/class/bdi/0:{f.connection}/read_ahead_kb, "
                 "and mount with max_read of 1 MiB or more")


def _lost(f: LostEvents) -> Prose:
    return Prose(f"{f.lost} events were lost while recording: every figure in this report is incomplete "
                 "(a lower bound)", [f"lost per source: {f.detail}"] if f.detail else [],
                 "record again with a larger ring buffer (readtrace record --ring-mib 256 -- CMD; the default is "
                 "64) or fewer probes, and keep the machine less busy")


def _replicated(f: ReplicatedReads) -> Prose:
    msg = (f"{f.nodes} nodes each fetched {f.file} ({fmt_bytes(f.file_bytes)}) from {_fs(f)}: "
           f"{fmt_bytes(f.aggregate_bytes)} in all, {f.replication:.1f}x the file")
    return Prose(msg, [f"{r['host']} ({r['trace']}): {fmt_bytes(r['bytes'])}" for r in f.evidence],
                 "fetch each byte from the shared storage once for the job: split the prefetch over the nodes' "
                 "ranks (each rank reads its own byte spans) or stage the checkpoint on node-local disk once; "
                 f"up to {fmt_bytes(f.saved_bytes)} less from the storage")


def _skew(f: LoadSkew) -> Prose:
    msg = (f"{f.slowest} took {fmt_seconds(f.slowest_s)} to load, {f.skew:.1f}x the median {f.scope} "
           f"({fmt_seconds(f.median_s)}): the job waits for its slowest {f.scope}")
    return Prose(msg, [f"{r['name']}: {fmt_seconds(r['load_s'])}" for r in f.evidence[:8]],
                 f"compare the slowest {f.scope}'s report with the others' (its mount, its cache, its read pattern)")


RENDERERS: dict[type[Finding], Callable] = {
    SharedFdInterleave: _shared_fd, RandomOnFuseHandle: _random, SmallRequests: _small,
    MmapFaultStorm: _fault_storm, ColdCache: _cold, CacheEvictedReread: _reread,
    SmallFuseReadahead: _fuse_readahead, LostEvents: _lost, ReplicatedReads: _replicated, LoadSkew: _skew,
}


def cost_text(f: Finding) -> str:
    """What the finding cost (analyze/rules/cost.py): the seconds for a cause, the cause for how it shows."""
    if f.cause:
        return f"how {f.cause} shows ({f.role}): its seconds are counted there"
    if f.cost_s is None:
        return "" if f.wait_s is None else f"the load waited {fmt_seconds(f.wait_s)} on this file"
    text = f"costs {fmt_seconds(f.cost_s)}"
    if f.cost_fraction is not None:
        text += f" ({fmt_pct(f.cost_fraction)} of the wall)"
    text += f": the load waited {fmt_seconds(f.wait_s)} on this file"
    if f.floor_s is None:
        return text + f" (no storage model knows {_fs(f)}: its floor is unknown, all of that wait is counted)"
    return text + f", reading the same bytes in order takes ~{fmt_seconds(f.floor_s)} there ({f.floor_model})"


def _timing(f: Finding) -> str:
    """What the model and the time split add to any finding: its cost, and the fixed time."""
    parts = [cost_text(f)]
    if f.predicted_fixed_s is not None and not f.cause:
        parts.append(f"fixed: ~{fmt_seconds(f.predicted_fixed_s)} predicted on this mount")
    return "; ".join(p for p in parts if p)


def render(f: Finding) -> Prose:
    p = RENDERERS[type(f)](f)
    timing = _timing(f)
    message = f"{p.message}; {timing}" if timing else p.message
    if f.inferred:
        message += f" [inferred: {f.basis}]"
    recommendation = without_levers(p.recommendation, f.not_expected)
    if f.lever_predictions:
        recommendation += "; " + predicted_levers(f.lever_predictions)
    if f.library_levers:
        recommendation += ("; in this program: " + " or ".join(_lever(lv) for lv in f.library_levers)
                           + " (not predicted: the model does not replay it; `readtrace fix --compare` measures it)")
    return Prose(message, p.evidence, recommendation)


def _named(prediction: dict) -> str:
    """A predicted lever's name, with how to apply it where it says ("own-fd loader (readtrace fix ...)")."""
    apply = prediction.get("apply")
    return f"{prediction['lever']} ({apply})" if apply else prediction["lever"]


def predicted_levers(predictions: list[dict]) -> str:
    """"predicted on this mount: own fd ~3.1 s, prefetch ~4.0 s (the load took 12.3 s)": the whole load
    with each lever (analyze/storage/levers.py; each prediction's ``basis`` says from what)."""
    each = ", ".join(f"{_named(p)} ~{fmt_seconds(p['predicted_s'])}" for p in predictions)
    return f"predicted on this mount: {each} (the load took {fmt_seconds(predictions[0]['load_s'])})"


# How each lever a measured profile can rule out (analyze/storage/measured.py) starts in a recommendation's
# clauses ("; "-separated, alternatives " or "-separated).
LEVER_WORDS = {"prefetch": ("prefetch",), "own fd": ("open one fd", "give each worker", "one fd per"),
               "read_ahead_kb": ("raise it (root)", "raise the mount's read_ahead_kb")}


def without_levers(text: str, ruled_out: list[dict]) -> str:
    """``text`` without the alternatives that name a ruled-out lever, then each of those as "not expected
    to help here, because ..." (from the mount's measured profile)."""
    if not ruled_out:
        return text
    starts = tuple(w for r in ruled_out for w in LEVER_WORDS.get(r["lever"], ()))
    clauses = []
    for clause in text.split("; "):
        kept = [alt for alt in clause.split(" or ") if not alt.strip().lower().startswith(starts)]
        if kept:
            clauses.append(" or ".join(kept))
    said = "; ".join(f"{r['lever']}: not expected to help here, because {r['because']}" for r in ruled_out)
    return "; ".join([*clauses, said])


def _lever(lever: dict) -> str:
    return f"{lever['change']} ({lever['library']} {lever['version']} accepts {lever['keyword']})"


def findings_line(findings: list[Finding], wall_s: float | None, th) -> str:
    """The findings' heading: how much of the wall their causes explain (the seconds add up)."""
    causes = [f for f in findings if not f.cause and f.cost_s is not None]
    if not causes or not wall_s:
        return "Findings"
    total = sum(f.cost_s for f in causes)
    return (f"Findings: {len(causes)} cause(s) cost {fmt_seconds(total)} of the {fmt_seconds(wall_s)} wall "
            f"({fmt_pct(total / wall_s)}) over their floor; HIGH needs >= {fmt_seconds(th.high_min_s)} and "
            f">= {fmt_pct(th.high_min_wall_fraction)} of the wall")


def time_lines(summary: Summary) -> list[str]:
    """The report's first line: "44.9 s wall; 41.8 s (93 %) waiting on FUSE reads of model.safetensors
    by 4 threads", and a second with CPU and run-queue time where the scheduler view was recorded."""
    wall, t = summary.wall_s, summary.time
    io = t.io_wait_s
    head = f"{fmt_seconds(wall)} wall" if wall else "wall time unknown"
    if not io or not t.wait_file:
        line = f"{head}; no wait on file reads recorded"
    else:
        what = "page faults" if t.wait_file_faults else "reads"
        fuse = "FUSE " if t.wait_file_fuse else ""
        share = f" ({fmt_pct(io / wall)})" if wall else ""
        name = t.wait_file.rsplit("/", 1)[-1]
        others = "" if t.wait_file_s >= io * 0.99 else " and other files"
        n = t.wait_tasks
        line = (f"{head}; {fmt_seconds(io)}{share} waiting on {fuse}{what} of {name}{others} by {n} "
                f"thread{'s' if n != 1 else ''}")
    if t.cpu_s is not None:
        return [line, f"on CPU {fmt_seconds(t.cpu_s)}, waiting for a CPU {fmt_seconds(t.runq_s)} "
                "(thread-seconds, all tasks)"]
    if t.time_split_source == "syscalls":
        line += " (from syscall and FUSE latency: no scheduler view recorded)"
    return [line]


def fixed_line(summary: Summary) -> str | None:
    """The third line for a slow load: what the model predicts for it fixed, on this mount."""
    wall, p = summary.wall_s, summary.prediction
    if not wall or p is None or p.predicted_fixed_s is None or p.predicted_fixed_s > 0.8 * wall:
        return None
    how = FIXED_HOW.get(p.fixed_strategy, FIXED_HOW["prefetch"])
    if summary.measured_mount:
        probed = MountProfile.from_data(summary.measured_mount)
        if p.fixed_strategy == "own-fd" and probed.reader_streams > 1:
            how = f"fix's own-fd loader: each file read once in order by {probed.reader_streams} own-fd streams"
        source = f"the rates readtrace probe measured {probed.date}; {p.mount_latency_ms:.3g} ms first byte"
    else:
        source = f"{p.mount_profile} model, {p.mount_latency_ms:.3g} ms first byte"
    if p.mount_latency_recorded:
        source += f" {AS_RECORDED}"
    return f"fixed: ~{fmt_seconds(p.predicted_fixed_s)} predicted on this mount ({source}; {how})"


def what_if_lines(predictions: list) -> list[str]:
    """One line per storage profile of ``readtrace report --what-if``."""
    return [f"{p.profile:<13} {p.latency_ms:>6.3g} ms  load ~{fmt_seconds(p.predicted_s):>8}  fixed "
            f"~{fmt_seconds(p.predicted_fixed_s):>8}  {fmt_count(p.backend_requests):>9} backend requests "
            f"({fmt_count(p.fixed_backend_requests)} fixed), {fmt_bytes(p.bytes_fetched)} fetched"
            for p in predictions]


def reads_from_lines(r: dict | None) -> list[str]:
    """Which Python loader calls issued the reads, and their library's own lever (python_calls view):
    "reads came from diffusers... -> safetensors.torch.load_file, 4 threads: 64 MiB (98% of data-file reads)";
    an entry point that read through several chains: "reads came from transformers.AutoModel.from_pretrained
    (3 chains, through safetensors.safe_open, ...), 5 threads: ..." (the innermost call of each).
    ``r``: ``Summary.reads_from``."""
    if not r:
        return []
    if not r["chain"]:
        return [f"no data-file read inside a recorded Python loader call ({fmt_count(r['calls'])} calls recorded)"]
    n = r["threads"]
    chains = r.get("entry_chains") or [r["chain"]]
    where = r["chain"] if len(chains) == 1 else (
        f"{r['entry']} ({len(chains)} chains, through "
        + ", ".join(dict.fromkeys(c.rsplit(SEP, 1)[-1] for c in chains[:MAX_CHAINS_NAMED]))
        + (", ..." if len(chains) > MAX_CHAINS_NAMED else "") + ")")
    line = (f"reads came from {where}, {n} thread{'s' if n != 1 else ''}: {fmt_bytes(r['bytes'])} "
            f"({fmt_pct(r['fraction'])} of data-file reads")
    if r["chain_after_return_bytes"]:
        line += f", {fmt_bytes(r['chain_after_return_bytes'])} of it when its lazy tensors were used after it returned"
    if r["attributed_fraction"] is not None and r["attributed_fraction"] > r["fraction"] + 0.005:
        line += f"; {fmt_pct(r['attributed_fraction'])} attributed to loader calls in all"
    lines = [line + ")"]
    lines += [f"library lever: {_lever(lever)}" for lever in r["levers"][:2]]
    return lines


MAX_CONTAINER_LINES = 4  # processes / files named per kind; the rest counted


def container_lines(summary: Summary) -> list[str]:
    """Recorded processes of another PID namespace and files named in another mount namespace, as the
    container sees them next to the host's: "pid 4242 (host) is pid 1 in its PID namespace, threads
    4243 -> 7"; "/ckpt/model.safetensors in the container is /srv/models/model.safetensors on the host"."""
    c = summary.container or {}
    lines = []
    procs, files = c.get("processes") or [], c.get("files") or []
    for p in procs[:MAX_CONTAINER_LINES]:
        others = [f"{t} -> {n}" for t, n in p["threads"].items() if int(t) != p["pid"]]
        lines.append(f"pid {p['pid']} (host) is pid {p['ns_pid']} in its PID namespace"
                     + (f", threads {', '.join(others[:MAX_CONTAINER_LINES])}" if others else "")
                     + (", ..." if len(others) > MAX_CONTAINER_LINES else ""))
    if len(procs) > MAX_CONTAINER_LINES:
        lines.append(f"... and {len(procs) - MAX_CONTAINER_LINES} more process(es) in other PID namespaces")
    for f in files[:MAX_CONTAINER_LINES]:
        lines.append(f"{f['path']} in the container is {f['host_path']} on the host")
    if len(files) > MAX_CONTAINER_LINES:
        lines.append(f"... and {len(files) - MAX_CONTAINER_LINES} more file(s) with another path on the host")
    return lines
