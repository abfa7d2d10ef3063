"""Each finding on a small synthetic trace with a hand-checked answer, and the seed case end to end."""

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import FUSE_CONN, FUSE_DEV, NODE, files_frame, load_case
from readtrace.analyze import Thresholds, analyze
from readtrace.fs.knowledge import fs_profile
from readtrace.trace import FUSE_READ, make_trace

MiB = 1 << 20
GCS = "/mnt/model/model.safetensors"


def codes(a):
    return [f.code for f in a.findings]


def only(a, code):
    found = [f for f in a.findings if f.code == code]
    assert len(found) == 1, a.findings
    return found[0]


@pytest.mark.parametrize("with_fuse", [True, False])
def test_seed_case_shared_fd_interleave(with_fuse):
    a = analyze(make_trace(**load_case("shared", with_fuse=with_fuse, read_ms=20)))  # 256 reads of 20 ms: 5.1 s
    f = only(a, "SHARED_FD_INTERLEAVE")
    assert f.severity == "high" and f.tasks == 4 and f.fstype == "fuse.gcsfuse" and f.per_handle
    assert f.view == ("fuse_handle" if with_fuse else "ofd") and not f.mapping
    assert f.min_task_consecutive_fraction == 1.0 and f.score == pytest.approx(1.0, abs=0.01)
    assert f.predicted_requests == 256 and f.sequential_requests == 1
    assert [t["tid"] for t in f.task_rows] == [101, 102, 103, 104]
    assert [t["first_offset"] for t in f.task_rows] == [0, 16 * MiB, 32 * MiB, 48 * MiB]
    kinds = ["ofd", "fuse_handle"] if with_fuse else ["ofd"]
    for kind in kinds:
        s = a.streams[a.streams["kind"] == kind].iloc[0]
        assert s["interleaved"] and s["tasks"] == 4
        assert s["min_task_consecutive_fraction"] >= 0.9
        assert s["consecutive_fraction"] <= 0.3
        assert s["interleave_score"] == pytest.approx(1.0, abs=0.01)  # the first access is in order
    tasks = a.streams[a.streams["kind"] == "task"]
    assert len(tasks) == 4 and (tasks["consecutive_fraction"] >= 0.9).all()
    # evidence: gcsfuse's log fields, starting where the tasks take turns
    assert [(r["inode"], r["tid"], r["offset"], r["bytes"]) for r in f.evidence[:2]] == \
        [(2, 101, 0, 256 * 1024), (2, 102, 16 * MiB, 256 * 1024)]
    if with_fuse:
        assert f.evidence[0]["handle"] == 1
        assert a.summary.handle_consecutive_fraction <= 0.3


@pytest.mark.parametrize("kind", ["own", "sequential"])
def test_own_fd_and_sequential_give_no_interleave(kind):
    a = analyze(make_trace(**load_case(kind)))
    assert "SHARED_FD_INTERLEAVE" not in codes(a) and "RANDOM_ON_FUSE_HANDLE" not in codes(a)
    assert a.summary.handle_consecutive_fraction == 1.0
    assert a.files["consecutive_fraction"].iloc[0] == 1.0


@pytest.mark.parametrize("fstype", ["fuse.sshfs", "ext4", "tmpfs"])
def test_interleave_is_reported_but_not_blamed_where_fs_keeps_no_handle_stream(fstype):
    a = analyze(make_trace(**load_case("shared", fstype=fstype, with_fuse=False)))
    f = only(a, "SHARED_FD_INTERLEAVE")
    assert f.severity == "info" and not f.per_handle and f.fstype == fstype and f.predicted_requests is None


def test_fs_table():
    assert fs_profile("fuse.gcsfuse").family == "gcsfuse"
    assert fs_profile("fuse.rclone").per_handle_stream
    assert fs_profile("fuse.readtrace-simfs").family == "fuse" and fs_profile("fuse").per_handle_stream
    assert not fs_profile("fuse.sshfs").per_handle_stream and fs_profile("fuse.sshfs").remote
    assert fs_profile("nfs4").family == "nfs" and fs_profile("lustre").per_handle_stream
    assert not fs_profile("ext4").per_handle_stream and not fs_profile("").remote
    # the lab mount says which cost model it runs
    assert fs_profile("fuse.simfs-gcsfuse").per_handle_stream
    assert not fs_profile("fuse.simfs-nfs").per_handle_stream and not fs_profile("fuse.simfs-local").remote


def _mmap_case(threads=(100, 105), child=101, pages=4096, fstype="fuse.gcsfuse"):
    """pid 100 opens and maps the file; threads of pid 100 and a forked child fault their own part,
    taking turns: the mapping's merged fault stream jumps between parts."""
    parts = [*threads, child]
    n = len(parts) * pages
    who = np.tile(np.arange(len(parts)), pages)
    page = np.repeat(np.arange(pages), len(parts))
    tid = np.array(parts)[who]
    pid = np.where(tid == child, child, 100)
    faults = pd.DataFrame({"ts_ns": 10_000 + 100 * np.arange(n), "pid": pid, "tid": tid, "op": "fault",
                           "dev": FUSE_DEV, "ino": NODE, "offset": (who * pages + page) * 4096, "size": 4096})
    events = pd.DataFrame({
        "ts_ns": [1, 2, 3], "pid": [100, 100, 100], "tid": [100, 100, 100], "op": ["open", "mmap", "fork"],
        "fd": [3, 3, -1], "ofd": [-0x500, -0x500, 0], "path": [GCS, GCS, None], "offset": [-1, 0, -1],
        "size": [-1, n * 4096, -1], "arg": [0, 0x7F0000000000, child]})
    return make_trace(events=events, pages=faults, files=files_frame(GCS, n * 4096, fstype))


def test_mmap_mapping_faulted_by_several_tasks():
    a = analyze(_mmap_case())
    f = only(a, "SHARED_FD_INTERLEAVE")
    assert f.mapping and f.tasks == 3
    m = a.streams[a.streams["kind"] == "ofd"]
    assert len(m) == 1  # the forked child's faults belong to the parent's mapping
    assert m.iloc[0]["faults"] == 3 * 4096 and m.iloc[0]["min_task_consecutive_fraction"] == 1.0
    storm = only(a, "MMAP_FAULT_STORM")
    assert storm.faults == 12288 and storm.tasks == 3
    # one wait, one cause: the faults are how the interleave shows; no waits recorded, so no seconds
    # are known and nothing is HIGH
    assert (storm.cause, storm.role, storm.severity, storm.cost_s) == ("SHARED_FD_INTERLEAVE", "mechanism", "info", None)
    assert f.severity == "warn" and f.cost_s is None and f.role == "cause"
    assert storm.mmap_bytes == 12288 * 4096 and storm.read_bytes == 0
    assert a.summary.page_faults == 12288 and a.summary.mmap_bytes == 12288 * 4096


def test_parts_inside_gcsfuse_window_still_interleave_but_tiny_parts_do_not():
    # 8 MiB parts: gcsfuse's 8 MiB window only sees the wrap-arounds as seeks, yet every switch of task
    # leaves the stream: an interleave all the same (small files hide it from the seek count)
    a = analyze(_mmap_case(pages=2048))
    m = a.streams[a.streams["kind"] == "ofd"].iloc[0]
    assert m["seek_count_fraction"] == pytest.approx(2047 / 6144)
    assert m["in_order_count_fraction"] == pytest.approx(1 / 6144)  # only the first access
    assert "SHARED_FD_INTERLEAVE" in codes(a)
    # 512 KiB parts: a switch of task stays within the 1 MiB gap, a wrap-around steps back 1 MiB
    # (inside the reorder window): nothing leaves the order
    b = analyze(_mmap_case(pages=128))
    assert "SHARED_FD_INTERLEAVE" not in codes(b)
    m = b.streams[b.streams["kind"] == "ofd"].iloc[0]
    assert m["in_order_count_fraction"] == 1.0


def test_mmap_faults_below_threshold_and_local_fs():
    a = analyze(_mmap_case(pages=50, fstype="ext4"))
    assert "MMAP_FAULT_STORM" not in codes(a)
    b = analyze(_mmap_case(pages=100, fstype="ext4"))
    assert only(b, "MMAP_FAULT_STORM").severity == "info"


def _cached_read(miss_ranges, total=4 * MiB, page_view=True):
    ev = pd.DataFrame({"ts_ns": [100], "pid": [7], "tid": [7], "op": ["read"], "fd": [3], "ofd": [-9],
                       "path": ["/d/f"], "offset": [0], "size": [total], "ret": [total]})
    rows = [{"ts_ns": 50 + i, "pid": 7, "tid": 7, "op": "miss", "dev": 8 << 20, "ino": 5, "offset": o,
             "size": s} for i, (o, s) in enumerate(miss_ranges)]
    if page_view:
        rows.append({"ts_ns": 40, "pid": 7, "tid": 7, "op": "get_pages", "dev": 8 << 20, "ino": 5, "offset": 0,
                     "size": total})
    return make_trace(events=ev, pages=rows, files=files_frame("/d/f", total, "ext4", dev=8 << 20, ino=5))


def test_cold_cache_and_warm_cache():
    cold = analyze(_cached_read([(0, 4 * MiB)]))
    f = only(cold, "COLD_CACHE")
    assert (f.miss_bytes, f.bytes_read, f.files, f.miss_fraction) == (4 * MiB, 4 * MiB, 1, 1.0)
    assert cold.summary.cache_miss_bytes == 4 * MiB
    warm = analyze(_cached_read([]))
    assert "COLD_CACHE" not in codes(warm) and warm.summary.cache_miss_bytes == 0
    half = analyze(_cached_read([(0, 1 * MiB)]))  # 25 % missed: not cold
    assert "COLD_CACHE" not in codes(half)
    none = analyze(_cached_read([], page_view=False))  # no page-cache view recorded: unknown, not zero
    assert none.summary.cache_miss_bytes is None


def test_cold_model_file_is_not_diluted_by_warm_libraries():
    cold = _cached_read([(0, 4 * MiB)])
    lib = pd.DataFrame({"ts_ns": [10], "pid": [7], "tid": [7], "op": ["read"], "fd": [4], "ofd": [-10],
                        "path": ["/usr/lib/libbig.so"], "offset": [0], "size": [64 * MiB], "ret": [64 * MiB]})
    trace = make_trace(events=pd.concat([cold.events, lib]), pages=cold.pages,
                       files=pd.concat([cold.files, files_frame("/usr/lib/libbig.so", 64 * MiB, "ext4",
                                                                dev=8 << 20, ino=6)]))
    a = analyze(trace)
    assert a.summary.cache_miss_bytes / a.summary.bytes_read < 0.1
    f = only(a, "COLD_CACHE")
    assert f.file == "/d/f" and f.evidence == [{"path": "/d/f", "miss_bytes": 4 * MiB, "bytes_read": 4 * MiB}]


def test_cache_evicted_reread():
    a = analyze(_cached_read([(0, 2 * MiB), (2 * MiB, 2 * MiB), (0, 2 * MiB)]))
    f = only(a, "CACHE_EVICTED_REREAD")
    assert f.file == "/d/f" and f.refetched_bytes == 2 * MiB and f.miss_bytes == 6 * MiB
    assert f.miss_unique_bytes == 4 * MiB and not f.fuse
    assert a.files["cache_refetched_bytes"].iloc[0] == 2 * MiB
    b = analyze(_cached_read([(0, 2 * MiB), (2 * MiB, 2 * MiB)]))
    assert "CACHE_EVICTED_REREAD" not in codes(b)
    # 1 MiB fetched twice out of 64 MiB: under 5 % of the file, not a finding
    small = analyze(_cached_read([(0, 64 * MiB), (0, 1 * MiB)], total=64 * MiB))
    assert "CACHE_EVICTED_REREAD" not in codes(small)


def _fuse_reads(size, count, fstype="fuse.readtrace-simfs"):
    fuse = pd.DataFrame({"ts_ns": 1000 * np.arange(count), "pid": 9, "tid": 9, "connection": FUSE_CONN,
                         "unique": np.arange(count), "opcode": FUSE_READ, "nodeid": NODE, "fh": 3,
                         "offset": size * np.arange(count), "size": size, "reply_bytes": size})
    return make_trace(fuse=fuse, files=files_frame("/mnt/sim/m", size * count, fstype))


def test_small_fuse_readahead():
    f = only(analyze(_fuse_reads(128 * 1024, 32)), "SMALL_FUSE_READAHEAD")
    assert (f.requests, f.median_bytes, f.connection, f.recommended_kb) == (32, 128 * 1024, 40, 1024)
    assert f.bytes == 32 * 128 * 1024 and f.file == "/mnt/sim/m"
    assert "SMALL_FUSE_READAHEAD" not in codes(analyze(_fuse_reads(1 * MiB, 32)))
    assert "SMALL_FUSE_READAHEAD" not in codes(analyze(_fuse_reads(128 * 1024, 8)))


def test_random_on_fuse_handle():
    k = 256 * 1024
    offsets = (np.random.default_rng(1).permutation(64) * 16 * MiB)
    fuse = pd.DataFrame({"ts_ns": 20_000_000 * np.arange(64), "pid": 9, "tid": 9, "connection": FUSE_CONN,
                         "unique": np.arange(64), "opcode": FUSE_READ, "nodeid": NODE, "fh": 3,
                         "offset": offsets, "size": k, "reply_bytes": k, "latency_ns": 20_000_000})  # 1.28 s
    a = analyze(make_trace(fuse=fuse, files=files_frame("/mnt/g/m", 1 << 34, "fuse.gcsfuse")))
    f = only(a, "RANDOM_ON_FUSE_HANDLE")
    assert f.severity == "high" and f.handle == 3 and f.stream == "handle 3" and f.predicted_requests == 64
    assert f.read_type == "random" and f.top_sizes == [[k, 64]]
    assert "SHARED_FD_INTERLEAVE" not in codes(a)
    assert "RANDOM_ON_FUSE_HANDLE" not in codes(analyze(make_trace(**load_case("sequential"))))


def _jumping_dcp_handle(jump_latency_ns: int) -> pd.DataFrame:
    """A torch.distributed.checkpoint load seen by the daemon: 16 items of 4 MiB read in file order in
    128 KiB requests of 1 ms, but before each item 8 KiB at its end (its zip directory), then back."""
    k, item, rows = 128 * 1024, 4 * MiB, []
    for i in range(16):
        rows.append((i * item + item - 8192, 8192, jump_latency_ns))
        rows += [(i * item + j * k, k, jump_latency_ns if j == 0 else 1_000_000) for j in range(item // k)]
    offset, size, latency = np.array(rows).T
    n = len(rows)
    start = np.concatenate([[0], np.cumsum(latency)[:-1]])  # one request at a time
    return pd.DataFrame({"ts_ns": start, "pid": 9, "tid": 9, "connection": FUSE_CONN,
                         "unique": np.arange(n), "opcode": FUSE_READ, "nodeid": NODE, "fh": 3, "offset": offset,
                         "size": size, "reply_bytes": size, "latency_ns": latency})


def test_a_few_costly_jumps_on_a_handle_read_in_order_are_random():
    """Under 1 % of the bytes after a jump, yet 31 jumps of 40 ms (the first read is no jump): judged
    on the seconds the jumps measurably waited, not on their share of the bytes."""
    path = "/mnt/g/__0_0.distcp"
    a = analyze(make_trace(fuse=_jumping_dcp_handle(40_000_000), files=files_frame(path, 64 * MiB, "fuse.gcsfuse")))
    handle = a.streams[a.streams["kind"] == "fuse_handle"].iloc[0]
    assert handle["seek_fraction"] < Thresholds().random_handle_fraction
    f = only(a, "RANDOM_ON_FUSE_HANDLE")
    assert f.view == "fuse_handle" and f.jumps == 31 and f.jump_wait_s == pytest.approx(31 * 0.039)
    assert f.severity == "high" and f.role == "cause" and f.cost_s >= 1  # of a 1.8 s wall
    # the same jumps served from the daemon's buffer (1 ms, like its continuing requests): they cost nothing
    cheap = analyze(make_trace(fuse=_jumping_dcp_handle(1_000_000), files=files_frame(path, 64 * MiB, "fuse.gcsfuse")))
    assert "RANDOM_ON_FUSE_HANDLE" not in codes(cheap)


def test_random_order_the_handle_hides_is_judged_on_the_open_file():
    """Whole-tensor preads out of file order: the FUSE handle sees long in-order runs (a jump every 32
    requests, under the seek rule), the open file sees a jump at nearly every read: the program's order
    is named, on the open file."""
    from lab.synthetic import fuse_from_reads, opens, worker_reads

    tensor, path = 4 * MiB, "/mnt/model/model.safetensors"
    order = np.random.default_rng(2).permutation(16)
    reads = worker_reads(1, 16, tensor, True, step_ns=100_000_000, latency_ns=100_000_000)
    reads["offset"] = order * tensor
    frames = {"events": pd.concat([opens(reads, path), reads], ignore_index=True),
              "files": files_frame(path, 16 * tensor, "fuse.gcsfuse"), "fuse": fuse_from_reads(reads, request=128 * 1024),
              "meta": {"command": ["python", "load.py"], "exit_code": 0, "lost_events": 0}}
    a = analyze(make_trace(**frames))
    handle = a.streams[a.streams["kind"] == "fuse_handle"].iloc[0]
    assert handle["seek_fraction"] < Thresholds().random_handle_fraction
    f = only(a, "RANDOM_ON_FUSE_HANDLE")
    assert f.view == "ofd" and f.seek_fraction >= 0.5 and f.role == "cause"
    reads["offset"] = np.arange(16) * tensor  # the same reads in file order: nothing random
    frames["events"] = pd.concat([opens(reads, path), reads], ignore_index=True)
    frames["fuse"] = fuse_from_reads(reads, request=128 * 1024)
    assert "RANDOM_ON_FUSE_HANDLE" not in codes(analyze(make_trace(**frames)))


def test_small_requests():
    def trace(size, n=20, fstype="nfs4", file_size=1 << 30):  # the first reads of a 1 GiB checkpoint
        ev = pd.DataFrame({"ts_ns": np.arange(n), "pid": 1, "tid": 1, "op": "read", "fd": 3, "ofd": -1,
                           "path": "/n/f", "offset": size * np.arange(n), "size": size, "ret": size})
        return make_trace(events=ev, files=files_frame("/n/f", file_size, fstype, dev=50, ino=9))
    f = only(analyze(trace(4096)), "SMALL_REQUESTS")
    assert f.severity == "warn" and (f.small, f.reads, f.median_bytes) == (20, 20, 4096)
    assert f.top_sizes == [[4096, 20]] and f.size_hist == {"1K-10K": 20}
    assert only(analyze(trace(4096, fstype="ext4")), "SMALL_REQUESTS").severity == "info"
    assert "SMALL_REQUESTS" not in codes(analyze(trace(2 * MiB)))
    assert "SMALL_REQUESTS" not in codes(analyze(trace(4096, n=10)))
    th = Thresholds().override(["small_request_min_count=5"])
    assert "SMALL_REQUESTS" in codes(analyze(trace(4096, n=10), th))
    # a file too small to be read in large requests (a .py module read in 4 KiB pieces) is no finding
    assert "SMALL_REQUESTS" not in codes(analyze(trace(4096, file_size=20 * 4096)))


def test_lost_events():
    a = analyze(make_trace(**{**load_case("sequential"), "meta": {"lost_events": {"events": 3, "pages": 2}}}))
    f = a.findings[0]
    assert f.code == "LOST_EVENTS" and f.severity == "high" and f.lost == 5
    assert a.summary.lost_events == 5
    # the recorder's shape: a total plus the detail per source
    b = analyze(make_trace(**{**load_case("sequential"), "meta": {"lost_events": 7, "lost_detail": {"app": 7}}}))
    assert b.findings[0].lost == 7 and b.findings[0].detail == {"app": 7}
    assert "LOST_EVENTS" not in codes(analyze(make_trace(**load_case("sequential"))))


def test_findings_sorted_by_severity():
    a = analyze(make_trace(**load_case("shared")))
    order = [f.severity for f in a.findings]
    assert order == sorted(order, key=["high", "warn", "info"].index)


def test_misses_and_readahead_attributed_to_tasks_and_open_files():
    frames = load_case("own", cold=True)
    pages = frames["pages"]
    ra = pages[(pages["offset"] // (256 * 1024)) % 8 == 0].assign(op="async_ra", size=1 * MiB)  # 8 per task
    frames["pages"] = pd.concat([frames["pages"], ra], ignore_index=True)
    a = analyze(make_trace(**frames))
    s = a.streams
    quarter = 16 * MiB
    for kind in ("task", "process", "ofd"):
        part = s[s["kind"] == kind]
        assert len(part) == 4 and (part["cache_miss_bytes"] == quarter).all(), part
        assert (part["readahead_windows"] == 8).all() and (part["readahead_bytes"] == 8 * MiB).all()
    assert s[s["kind"] == "file"]["cache_miss_bytes"].iloc[0] == 4 * quarter
    assert s[s["kind"] == "fuse_handle"]["cache_miss_bytes"].isna().all()
    # without a page-cache view the figures are unknown, not zero
    b = analyze(make_trace(**load_case("own")))
    assert b.streams["cache_miss_bytes"].isna().all()
