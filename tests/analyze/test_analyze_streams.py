"""Stream classification, counters and edge cases on tiny synthetic traces with hand-checked answers."""

import math

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import FUSE_CONN, files_frame
from readtrace.analyze import Thresholds, analyze
from readtrace.trace import FUSE_READ, load_trace, make_trace, write_trace

PATH = "/data/m.bin"
FILES = files_frame(PATH, 1 << 30, "ext4", dev=(8 << 20) | 1, ino=77)
MiB = 1 << 20


def reads(rows, *, pid=10, tid=None, fd=3, ofd=-1000, op="pread", path=PATH, t0=1000, lat=1000):
    """Read events from (offset, ret) pairs, one every microsecond."""
    n = len(rows)
    return pd.DataFrame({
        "ts_ns": t0 + 1000 * np.arange(n), "pid": pid, "tid": tid or pid, "op": op, "fd": fd, "ofd": ofd,
        "path": path, "offset": [r[0] for r in rows], "size": [r[1] for r in rows],
        "ret": [r[1] for r in rows], "latency_ns": lat})


def stream(a, kind):
    s = a.streams[a.streams["kind"] == kind]
    assert len(s) == 1, s
    return s.iloc[0]


def test_classification_rules_count_and_byte_weighted():
    # (0,100) first; (100,100) consecutive; (300,100) forward gap; (50,100) backward+overlap; (150,50) consecutive
    a = analyze(make_trace(events=reads([(0, 100), (100, 100), (300, 100), (50, 100), (150, 50)]), files=FILES))
    s = stream(a, "task")
    assert s["accesses"] == 5 and s["bytes"] == 450
    assert s["consecutive_count_fraction"] == pytest.approx(3 / 5)
    assert s["sequential_count_fraction"] == pytest.approx(4 / 5)
    assert s["random_count_fraction"] == pytest.approx(1 / 5)
    assert s["consecutive_fraction"] == pytest.approx(250 / 450)
    assert s["sequential_fraction"] == pytest.approx(350 / 450)
    assert s["random_fraction"] == pytest.approx(100 / 450)
    assert s["unique_bytes"] == 300  # [0,200) and [300,400)
    assert s["reread_amplification"] == pytest.approx(1.5)
    assert s["top_sizes"] == [[100, 4], [50, 1]]
    assert s["top_strides"] == [[0, 3], [-350, 1], [100, 1]]
    assert s["size_hist"]["0-100"] == 1 and s["size_hist"]["100-1K"] == 4
    assert sum(s["size_hist"].values()) == 5
    # every kind sees the same single stream here
    for kind in ("process", "ofd", "file"):
        assert stream(a, kind)["consecutive_fraction"] == pytest.approx(250 / 450)
    f = a.files.iloc[0]
    assert f["path"] == PATH and f["fstype"] == "ext4" and f["bytes_read"] == 450


def test_seek_rule_is_gcsfuse_window():
    # forward by exactly 8 MiB is not a seek, by 8 MiB + 1 it is; backward always is
    rows = [(0, 10), (10 + 8 * MiB, 10), (20 + 16 * MiB + 1, 10), (0, 10)]
    s = stream(analyze(make_trace(events=reads(rows), files=FILES)), "task")
    assert s["seek_count_fraction"] == pytest.approx(2 / 4)
    assert s["sequential_count_fraction"] == pytest.approx(3 / 4)


def test_edge_cases_zero_length_eof_short_failed_and_unknown_offset():
    ev = reads([(0, 4096), (4096, 1 * MiB), (4196, 0), (0, -1), (-1, 512)])
    ev.loc[1, "size"] = 1 * MiB
    ev.loc[1, "ret"] = 100  # EOF short read: requested 1 MiB, got 100 bytes
    ev.loc[2, "size"] = 1 * MiB  # at EOF: returns 0
    ev.loc[3, "size"] = 4096  # failed read: -1
    a = analyze(make_trace(events=ev, files=FILES))
    s = stream(a, "task")
    assert s["accesses"] == 2 and s["bytes"] == 4196  # only reads that moved bytes at a known offset
    assert s["consecutive_fraction"] == 1.0
    f = a.files.iloc[0]
    assert f["empty_reads"] == 1 and f["failed_reads"] == 1
    assert a.summary.bytes_read == 4196


def test_single_event_and_empty_trace():
    a = analyze(make_trace(events=reads([(0, 4096)]), files=FILES))
    s = stream(a, "ofd")
    assert s["consecutive_fraction"] == 1.0 and s["seek_fraction"] == 0.0 and s["tasks"] == 1
    assert a.findings == []
    empty = analyze(make_trace())
    assert len(empty.files) == 0 and len(empty.streams) == 0 and empty.findings == []
    assert empty.summary.bytes_read == 0 and empty.summary.handle_consecutive_fraction is None
    assert empty.summary.wall_s is None


def test_overlapping_reads_count_as_random_and_amplify():
    a = analyze(make_trace(events=reads([(0, 1000), (500, 1000), (0, 1500)]), files=FILES))
    s = stream(a, "task")
    assert s["random_count_fraction"] == pytest.approx(2 / 3)
    assert s["unique_bytes"] == 1500 and s["reread_amplification"] == pytest.approx(3500 / 1500)


def test_latency_percentiles_and_concurrency():
    a1 = reads([(0, 100), (100, 100)], tid=11, lat=10_000, t0=0)
    a2 = reads([(1000, 100), (1100, 100)], tid=12, lat=30_000, t0=500)
    a2.loc[1, "latency_ns"] = 40_000
    a1.loc[1, "latency_ns"] = 20_000
    a = analyze(make_trace(events=pd.concat([a1, a2]), files=FILES))
    ofd = stream(a, "ofd")
    assert ofd["latency_p50_us"] == pytest.approx(25.0)
    assert ofd["latency_p99_us"] == pytest.approx(np.percentile([10, 20, 30, 40], 99))
    assert ofd["tasks"] == 2 and ofd["concurrency"] == 2
    later = reads([(1000, 100)], tid=12, t0=10_000_000)
    b = analyze(make_trace(events=pd.concat([a1, later]), files=FILES))
    assert stream(b, "ofd")["concurrency"] == 1


def test_streams_split_by_task_process_ofd():
    t1 = reads([(0, 100), (100, 100)], pid=20, tid=21, ofd=-5)
    t2 = reads([(0, 100)], pid=20, tid=22, ofd=-5, t0=5000)
    t3 = reads([(500, 100)], pid=30, tid=30, ofd=-6, t0=9000)
    a = analyze(make_trace(events=pd.concat([t1, t2, t3]), files=FILES))
    kinds = a.streams["kind"].value_counts().to_dict()
    assert kinds == {"task": 3, "process": 2, "ofd": 2, "file": 1}
    proc20 = a.streams[(a.streams["kind"] == "process") & (a.streams["pid"] == 20)].iloc[0]
    assert proc20["accesses"] == 3 and proc20["tasks"] == 2


def test_file_resolved_through_open_ofd_and_pid_fd():
    op_ofd = pd.DataFrame({"ts_ns": [1], "pid": [10], "tid": [10], "op": ["open"], "fd": [3], "ofd": [-1000],
                           "path": [PATH], "ret": [3]})
    r = reads([(0, 100), (100, 100)], path=None)  # reads carry only fd + ofd, as the recorder writes them
    a = analyze(make_trace(events=pd.concat([op_ofd, r]), files=FILES))
    assert a.files["path"].tolist() == [PATH] and a.files["bytes_read"].iloc[0] == 200
    op_fd = op_ofd.assign(ofd=0)
    r0 = reads([(0, 100)], path=None, ofd=0)
    b = analyze(make_trace(events=pd.concat([op_fd, r0]), files=FILES))
    assert b.files["path"].tolist() == [PATH]
    assert stream(b, "ofd")["stream"].startswith("ofd ")


def test_gcsfuse_replay_sequential_and_random():
    seq = _fuse_only([(i * MiB, MiB) for i in range(300)])
    h = stream(analyze(seq), "fuse_handle")
    assert h["gcsfuse_seeks"] == 0 and h["gcsfuse_requests"] == 2  # 300 MiB in 200 MiB requests
    assert h["gcsfuse_read_type"] == "sequential" and h["gcsfuse_random_after"] == 0
    k = 256 * 1024
    rnd = _fuse_only([(0, k), (100 * MiB, k), (10 * MiB, k), (200 * MiB, k), (50 * MiB, k)])
    h = stream(analyze(rnd), "fuse_handle")
    # seeks at reads 2..5; random from read 3 (2 seeks, 512 KiB read / 2 < 8 MiB); one request per run
    assert h["gcsfuse_seeks"] == 4 and h["gcsfuse_random_after"] == 3
    assert h["gcsfuse_requests"] == 5 and h["gcsfuse_read_type"] == "random"
    assert h["gcsfuse_sequential_requests"] == 1


@pytest.mark.parametrize("exact_rows", [None, 0], ids=["read-by-read", "vectorized"])
def test_the_replay_follows_the_gcsfuse_thresholds_the_user_set(exact_rows, monkeypatch):
    """--threshold gcsfuse_sequential_read (a mount's --sequential-read-size-mb) sizes the sequential
    requests in both replays: 300 MiB in order is 2 requests of 200 MiB, 3 of 100 MiB."""
    from dataclasses import replace

    from readtrace.analyze.storage import gcsfuse_replay

    if exact_rows is not None:
        monkeypatch.setattr(gcsfuse_replay, "EXACT_ROWS", exact_rows)
    seq = _fuse_only([(i * MiB, MiB) for i in range(300)])
    assert stream(analyze(seq), "fuse_handle")["gcsfuse_requests"] == 2
    smaller = replace(Thresholds(), gcsfuse_sequential_read=100 * MiB)
    assert stream(analyze(seq, smaller), "fuse_handle")["gcsfuse_requests"] == 3


def test_a_step_back_is_a_seek_for_gcsfuse_however_small():
    """gcsfuse closes its reader at any read but the expected offset (a forward skip under 8 MiB is read
    through): readahead requests that overtook each other are seeks, as the lab mount's reader counts."""
    from readtrace.simfs.model import HandleReader

    k = 128 * 1024
    swapped = [(0, k), (2 * k, k), (k, k), (3 * k, k), (5 * k, k), (4 * k, k)] + [(i * k, k) for i in range(6, 40)]
    h = stream(analyze(_fuse_only(swapped)), "fuse_handle")
    reader = HandleReader(1 << 62)
    plans = [reader.plan(o, n) for o, n in swapped]
    assert h["gcsfuse_seeks"] == sum(p.seek for p in plans) == 2
    assert h["gcsfuse_requests"] == sum(p.new_request for p in plans)
    assert h["consecutive_count_fraction"] < 1
    back = [(0, k), (4 * MiB, k), (2 * MiB, k)]  # a step back of 2 MiB + 128 KiB is a seek
    assert stream(analyze(_fuse_only(back)), "fuse_handle")["gcsfuse_seeks"] == 1


@pytest.mark.parametrize("exact_rows", [None, 0], ids=["read-by-read", "vectorized"])
def test_a_long_run_after_a_few_seeks_grows_its_requests_as_gcsfuse_does(exact_rows, monkeypatch):
    """After 3 small seeks a 120 MiB run in order opens random (1 MiB requests), and each next request
    is sized from the average read per seek at its start, up to 8 MiB, then sequential: the lab
    mount's reader makes the same number of requests (one per 1 MiB would be 120), and so does the
    vectorized replay of large traces."""
    from readtrace.analyze.storage import gcsfuse_replay
    from readtrace.simfs.model import HandleReader

    if exact_rows is not None:
        monkeypatch.setattr(gcsfuse_replay, "EXACT_ROWS", exact_rows)

    k = 256 * 1024
    rows = [(300 * MiB, k), (200 * MiB, k), (400 * MiB, k), (100 * MiB, k)]
    rows += [(100 * MiB + k + i * k, k) for i in range(480)]
    reader = HandleReader(1 << 62)
    logged = sum(reader.plan(o, n).new_request for o, n in rows)
    h = stream(analyze(_fuse_only(rows)), "fuse_handle")
    assert h["gcsfuse_requests"] == pytest.approx(logged, abs=1) and logged < 40


def _fuse_only(rows, fh=1, tid=50):
    n = len(rows)
    fuse = pd.DataFrame({"ts_ns": 1000 * np.arange(n), "pid": tid, "tid": tid, "connection": FUSE_CONN,
                         "unique": np.arange(n), "opcode": FUSE_READ, "nodeid": 2, "fh": fh,
                         "offset": [r[0] for r in rows], "size": [r[1] for r in rows],
                         "reply_bytes": [r[1] for r in rows], "latency_ns": 1000})
    return make_trace(fuse=fuse, files=files_frame("/mnt/g/m", 1 << 34, "fuse.gcsfuse"))


def test_fuse_requests_map_to_the_only_file_on_their_connection():
    a = analyze(_fuse_only([(0, MiB)]))
    assert a.files["path"].tolist() == ["/mnt/g/m"]
    assert a.files["fuse_read_requests"].iloc[0] == 1
    assert a.summary.fuse_read_requests == 1 and a.summary.handle_consecutive_fraction == 1.0


def test_thresholds_override_and_errors():
    th = Thresholds().override(["small_request_fraction=0.5", "evidence_lines=3"])
    assert th.small_request_fraction == 0.5 and th.evidence_lines == 3
    from readtrace.errors import UsageError
    from readtrace.exits import error_line
    for bad in (["nope=1"], ["evidence_lines"], ["evidence_lines=x"]):
        with pytest.raises(UsageError, match="^threshold ") as e:  # the parameter, not the flag
            Thresholds().override(bad)
        assert error_line(e.value).startswith("--threshold ")  # the command line's wording


def test_round_trip_through_disk(tmp_path):
    path = write_trace(tmp_path / "t.rtrace", events=reads([(0, 100), (100, 100)]), files=FILES,
                       meta={"lost_events": 0})
    a = analyze(load_trace(path))
    assert a.summary.bytes_read == 200 and not math.isnan(a.files["consecutive_fraction"].iloc[0])


def test_recycled_open_file_ids_are_different_open_files():
    """The kernel reuses a freed struct file's address (and fd numbers): a new open of the same key is
    a new open file, so the parent's header read and a worker's later reads are not one stream."""
    def open_ev(ts, pid):
        return {"ts_ns": ts, "pid": pid, "tid": pid, "op": "open", "fd": 3, "ofd": -777, "path": PATH, "ret": 3}
    header = reads([(0, 100)], pid=10, ofd=-777, t0=2000)
    worker = reads([(50 * MiB + i * MiB, MiB) for i in range(8)], pid=11, ofd=-777, t0=10_000)
    a = analyze(make_trace(events=pd.concat([pd.DataFrame([open_ev(1000, 10), open_ev(9000, 11)]), header,
                                             worker]), files=FILES))
    ofd = a.streams[a.streams["kind"] == "ofd"]
    assert len(ofd) == 2 and (ofd["tasks"] == 1).all() and not ofd["interleaved"].any()
    assert sorted(ofd["accesses"]) == [1, 8]
    # without the reopen the same rows are one open file read by two tasks
    b = analyze(make_trace(events=pd.concat([pd.DataFrame([open_ev(1000, 10)]), header, worker]), files=FILES))
    assert stream(b, "ofd")["tasks"] == 2


def test_reads_of_an_unresolvable_file_are_not_booked_to_another_file():
    known = reads([(0, 100)])
    lost = reads([(0, 5000)], pid=20, fd=9, ofd=-999, path=None, t0=50_000)  # no open, no path: unknown
    a = analyze(make_trace(events=pd.concat([known, lost]), files=FILES))
    assert a.files["read_bytes"].tolist() == [100]
    unknown = a.streams[(a.streams["kind"] == "file") & (a.streams["file_id"] == -1)]
    assert unknown["bytes"].tolist() == [5000] and unknown["path"].tolist() == ["<unknown file>"]
