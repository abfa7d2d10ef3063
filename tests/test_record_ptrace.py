"""`readtrace record --backend ptrace` (strace) on the workloads with known answers: the same facts the
eBPF recorder must show (tests/test_record.py), rebuilt from strace's output (one recording)."""

import json
import shutil

import pytest
from conftest import require
from workloads import make_data_file, shell_cmd, workload_cmd

from readtrace.trace import load_trace

MIB = 1 << 20
PAGE = 4096
NAMES = ("pread_threads", "fork_shared", "dup_lseek", "vectored", "mmap_threads")
SIZES = {"mmap_threads": 64 * MIB}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    require(shutil.which("strace") is not None, "strace missing (apt-get install strace)")
    from readtrace.ptrace.recorder import record_ptrace

    tmp = tmp_path_factory.mktemp("ptrace")
    cmds, files = [], {}
    for name in NAMES:
        files[name] = make_data_file(tmp / f"{name}.bin", SIZES.get(name, 4 * MIB))
        cmds.append(workload_cmd(name, files[name], tmp / f"{name}.json"))
    result = record_ptrace(shell_cmd(cmds), tmp / "t.rtrace", quiet=True, interval_s=0.002)
    truth = {name: json.loads((tmp / f"{name}.json").read_text()) for name in NAMES}
    return result, load_trace(result.trace_path), truth, files


def reads_of(trace, path):
    e = trace.events
    return e[(e.path == str(path)) & e.op.isin(["read", "pread", "readv", "preadv"])]


def test_meta_names_backend_and_missing_views(recorded):
    result, trace, _truth, _files = recorded
    assert result.exit_code == 0 and trace.meta["exit_code"] == 0
    assert trace.meta["backend"] == "ptrace"
    assert trace.meta["missing_views"] == ["page_faults", "page_cache", "fuse"]
    assert trace.meta["inferred"]["page_faults"] == "residency sampling every 2 ms"
    assert trace.meta["strace"]["unparsed_lines"] == 0
    assert trace.meta["sampler"]["samples"] > 0


def test_preads_main_thread_and_second_thread(recorded):
    _result, trace, truth, files = recorded
    t = truth["pread_threads"]
    reads = reads_of(trace, files["pread_threads"])
    assert set(reads.pid) == {t["pid"]}
    by_tid = {tid: sorted(zip(g.offset, g["size"], strict=True)) for tid, g in reads.groupby("tid")}
    assert by_tid[t["thread_tid"]] == sorted(map(tuple, t["thread_reads"]))
    assert by_tid[t["main_tid"]] == sorted(map(tuple, t["main_reads"] + t["run"] + t["fd2_reads"]))
    assert (reads.ret == reads["size"]).all() and (reads.latency_ns > 0).all()
    shared, own = reads[reads.fd == t["fd"]], reads[reads.fd == t["fd2"]]
    assert shared.ofd.nunique() == 1 and own.ofd.nunique() == 1 and shared.ofd.iloc[0] != own.ofd.iloc[0]
    assert set(shared.tid) == {t["main_tid"], t["thread_tid"]}


def test_forked_child_shares_the_open_file_description(recorded):
    _result, trace, truth, files = recorded
    t = truth["fork_shared"]
    reads = reads_of(trace, files["fork_shared"])
    assert set(reads.pid) == {t["pid"], t["child_pid"]}
    assert reads.ofd.nunique() == 1
    parent = reads[reads.pid == t["pid"]].sort_values("ts_ns")
    child = reads[reads.pid == t["child_pid"]].sort_values("ts_ns")
    assert list(zip(parent.op, parent.offset, parent["size"], strict=True)) == [("pread", 0, 4096), ("pread", 8192, 4096)]
    # the child's read() offset comes from the lseek on the description it inherited
    assert list(zip(child.op, child.offset, child["size"], strict=True)) == [("pread", 65536, 4096), ("read", 40960, 100)]
    forks = trace.events[(trace.events.op == "fork") & (trace.events.pid == t["pid"])]
    assert t["child_pid"] in set(forks.arg)


def test_dup_shares_ofd_and_read_offsets_follow_lseek(recorded):
    _result, trace, truth, files = recorded
    t = truth["dup_lseek"]
    e = trace.events[trace.events.path == str(files["dup_lseek"])].sort_values("ts_ns")
    dup = e[e.op == "dup"]
    assert list(zip(dup.fd, dup.arg, strict=True)) == [(t["dup"], t["fd"])]
    reads = e[e.op == "read"]
    assert [list(r) for r in zip(reads.fd, reads.offset, reads["size"], strict=True)] == t["reads"]
    assert e[e.fd.isin([t["fd"], t["dup"]])].ofd.nunique() == 1
    seeks = e[e.op == "lseek"]
    assert list(zip(seeks.offset, seeks.arg, seeks.ret, strict=True)) == [(12288, 0, 12288), (13888, 1, 13888)]


def test_readv_preadv_sizes_and_offsets(recorded):
    _result, trace, truth, files = recorded
    t = truth["vectored"]
    reads = reads_of(trace, files["vectored"]).sort_values("ts_ns")
    assert [list(r) for r in zip(reads.op, reads.offset, reads["size"], strict=True)] == t["reads"]
    assert set(reads.fd) == {t["fd"]}


def test_mmap_range_and_residency_of_the_touched_pages(recorded):
    _result, trace, truth, files = recorded
    t = truth["mmap_threads"]
    path = str(files["mmap_threads"])
    mmaps = trace.events[(trace.events.path == path) & (trace.events.op == "mmap")]
    assert len(mmaps) == 1 and mmaps.iloc[0]["size"] == 64 * MIB and mmaps.iloc[0].offset == 0
    assert trace.pages[trace.pages.op == "fault"].empty  # no page-fault view: nothing claims one
    sampled = trace.pages[trace.pages.path == path]
    assert (sampled.op == "resident").any()  # pages seen entering the cache while the command ran
    # the file was evicted, then each thread's pages came in: seen when the file was first sampled
    # (found in strace's output a few ms after the open: a thread may touch its pages before) or later
    seen = sampled[sampled.op.isin(["resident", "resident_start"])]
    for who in ("a", "b"):
        first, _stop = t[f"{who}_pages"]
        hit = (seen.offset <= first * PAGE) & (seen.offset + seen["size"] > first * PAGE)
        assert hit.any(), f"thread {who}'s first page never showed up as resident"


def test_files_table(recorded):
    _result, trace, _truth, files = recorded
    f = trace.files.set_index("path")
    for path in files.values():
        row = f.loc[str(path)]
        assert row["size"] == path.stat().st_size and row.fstype and row.mountpoint and row.ino > 0
