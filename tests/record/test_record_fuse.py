"""The FUSE view on a real FUSE mount (bindfs over a tmp dir, direct_io so every pread becomes one
FUSE READ with the caller's offset and size): fh, requesting thread, offset, size, joined requests."""

import json
import shutil
import subprocess
import time

import pytest
from conftest import require
from workloads import ebpf_ready, make_data_file, workload_cmd

from readtrace.trace import FUSE_READ, load_trace

pytestmark = [pytest.mark.ebpf, pytest.mark.fuse]
MIB = 1 << 20


@pytest.fixture(scope="module")
def bindfs_mount(tmp_path_factory):
    ok, why = ebpf_ready()
    require(ok, why)
    require(shutil.which("bindfs") is not None, "bindfs missing (apt-get install -y bindfs)")
    require(shutil.which("fusermount") or shutil.which("fusermount3"), "fusermount missing (fuse3)")
    tmp = tmp_path_factory.mktemp("fuse")
    src, mnt = tmp / "src", tmp / "mnt"
    src.mkdir()
    mnt.mkdir()
    make_data_file(src / "data.bin", 4 * MIB)
    subprocess.run(["bindfs", "-o", "direct_io", str(src), str(mnt)], check=True)
    try:
        deadline = time.monotonic() + 10
        while not (mnt / "data.bin").exists():
            assert time.monotonic() < deadline, "bindfs mount did not come up"
            time.sleep(0.05)
        yield tmp, mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.fixture(scope="module")
def recorded(bindfs_mount):
    from readtrace.record import record_command

    tmp, mnt = bindfs_mount
    data = mnt / "data.bin"
    result = record_command(workload_cmd("pread_threads", data, tmp / "truth.json"), tmp / "t.rtrace",
                            quiet=True, coalesce=False)  # one row per call: joins 1:1 with FUSE READs
    return result, load_trace(result.trace_path), json.loads((tmp / "truth.json").read_text()), data


def test_fuse_mount_is_recognised(recorded):
    result, trace, _truth, data = recorded
    assert result.exit_code == 0 and result.lost_events == 0
    row = trace.files.set_index("path").loc[str(data)]
    assert row.fstype == "fuse.bindfs" and row.mountpoint == str(data.parent)  # named after its daemon
    assert (row.dev & 0xFFFFF) in trace.meta["fuse_connections"]


def test_fuse_reads_carry_handle_thread_offset_size(recorded):
    _result, trace, t, data = recorded
    conn = int(trace.files.set_index("path").loc[str(data)].dev) & 0xFFFFF
    reads = trace.fuse[(trace.fuse.opcode == FUSE_READ) & (trace.fuse.connection == conn)]
    got = sorted(zip(reads.tid, reads.offset, reads["size"], strict=True))
    main, thread = t["main_tid"], t["thread_tid"]
    expected = sorted([(main, o, s) for o, s in t["main_reads"] + t["run"] + t["fd2_reads"]]
                      + [(thread, o, s) for o, s in t["thread_reads"]])
    assert got == expected
    assert set(reads.pid) == {t["pid"]}
    shared = reads[~reads.offset.isin([o for o, _ in t["fd2_reads"]])]
    own = reads[reads.offset.isin([o for o, _ in t["fd2_reads"]])]
    assert shared.fh.nunique() == 1 and own.fh.nunique() == 1
    assert shared.fh.iloc[0] != own.fh.iloc[0]            # two opens -> two FUSE handles
    assert set(shared.tid) == {main, thread}              # one handle, two threads: the founding case
    assert reads.nodeid.nunique() == 1 and reads.nodeid.iloc[0] > 0
    assert (reads.reply_bytes == reads["size"]).all()
    assert (reads.latency_ns > 0).all() and (reads.daemon_tid > 0).all()
    assert not set(reads.daemon_tid) & {main, thread}


def test_fuse_requests_join_app_view(recorded):
    """Every pread on the FUSE file (not merged: coalesce=False) has exactly one FUSE READ with the
    same thread, offset and size, sent while the pread was in flight."""
    _result, trace, _t, data = recorded
    e = trace.events
    preads = e[(e.path == str(data)) & (e.op == "pread")]
    assert (preads["count"] == 1).all() and len(preads) == 9
    conn = int(trace.files.set_index("path").loc[str(data)].dev) & 0xFFFFF
    reads = trace.fuse[(trace.fuse.opcode == FUSE_READ) & (trace.fuse.connection == conn)]
    joined = preads.merge(reads, on=["tid", "offset", "size"], suffixes=("", "_fuse"))
    assert len(joined) == len(preads) == len(reads)
    assert (joined.ts_ns <= joined.ts_ns_fuse).all()
    assert (joined.ts_ns_fuse + joined.latency_ns_fuse <= joined.ts_ns + joined.latency_ns).all()
    opens = trace.fuse[(trace.fuse.opcode == 14) & (trace.fuse.connection == conn)]
    assert len(opens) == 2
