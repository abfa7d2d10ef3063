"""`readtrace record --backend ptrace` (strace) on the workloads with known answers: the same facts the
eBPF recorder must show (tests/record/test_record.py), rebuilt from strace's output (one recording)."""

import json
import shutil

import pytest
from conftest import require
from workloads import make_data_file, shell_cmd, workload_cmd
from workloads.known import check_dup_lseek, check_files_table, check_fork_shared, check_vectored, reads_of

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
    check_fork_shared(trace, truth["fork_shared"], files["fork_shared"])


def test_dup_shares_ofd_and_read_offsets_follow_lseek(recorded):
    _result, trace, truth, files = recorded
    check_dup_lseek(trace, truth["dup_lseek"], files["dup_lseek"])


def test_readv_preadv_sizes_and_offsets(recorded):
    _result, trace, truth, files = recorded
    check_vectored(trace, truth["vectored"], files["vectored"])


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
    check_files_table(trace, files)

