"""`readtrace record` on real workloads with known answers (one recording for the whole module).

The workloads (tests/workloads/) do I/O at fixed offsets and write their pids/tids/fds to JSON; the
trace must show exactly those. They run in one `sh -c`, which also exercises following the tree.
"""

import json

import pytest
from conftest import require
from workloads import ebpf_ready, make_data_file, shell_cmd, workload_cmd
from workloads.known import check_dup_lseek, check_files_table, check_fork_shared, check_vectored, reads_of

from readtrace.trace import load_trace

pytestmark = pytest.mark.ebpf
MIB = 1 << 20
PAGE = 4096
NAMES = ("pread_threads", "fork_shared", "dup_lseek", "vectored", "mmap_threads")
SIZES = {"mmap_threads": 64 * MIB}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    tmp = tmp_path_factory.mktemp("record")
    cmds, files = [], {}
    for name in NAMES:
        files[name] = make_data_file(tmp / f"{name}.bin", SIZES.get(name, 4 * MIB))
        cmds.append(workload_cmd(name, files[name], tmp / f"{name}.json"))
    result = record_command(shell_cmd(cmds), tmp / "t.rtrace", quiet=True)
    truth = {name: json.loads((tmp / f"{name}.json").read_text()) for name in NAMES}
    return result, load_trace(result.trace_path), truth, files


def test_result_and_meta(recorded):
    result, trace, _truth, _files = recorded
    assert result.exit_code == 0
    assert result.lost_events == 0 and trace.meta["lost_events"] == 0
    assert result.events > 0 and result.wall_s > 0
    assert trace.meta["exit_code"] == 0 and trace.meta["command"][0] == "sh"


def test_preads_main_thread_and_second_thread(recorded):
    _result, trace, truth, files = recorded
    t = truth["pread_threads"]
    reads = reads_of(trace, files["pread_threads"])
    assert set(reads.pid) == {t["pid"]}
    by_tid = {tid: sorted(zip(g.offset, g["size"], g["count"], strict=True)) for tid, g in reads.groupby("tid")}
    assert t["thread_tid"] != t["main_tid"]
    assert by_tid[t["thread_tid"]] == [(o, s, 1) for o, s in t["thread_reads"]]
    run_start = t["run"][0][0]
    expected_main = sorted([(o, s, 1) for o, s in t["main_reads"] + t["fd2_reads"]]
                           + [(run_start, 4 * 4096, 4)])  # 4 consecutive 4 KiB preads, merged in kernel
    assert by_tid[t["main_tid"]] == expected_main
    assert (reads.ret == reads["size"]).all() and (reads.latency_ns > 0).all()
    shared = reads[reads.fd == t["fd"]]
    own = reads[reads.fd == t["fd2"]]
    assert shared.ofd.nunique() == 1 and own.ofd.nunique() == 1
    assert shared.ofd.iloc[0] != own.ofd.iloc[0] and shared.ofd.iloc[0] != 0
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


def test_mmap_of_cold_file_faults_per_thread(recorded):
    _result, trace, truth, files = recorded
    t = truth["mmap_threads"]
    mmaps = trace.events[(trace.events.path == str(files["mmap_threads"])) & (trace.events.op == "mmap")]
    assert len(mmaps) == 1 and mmaps.iloc[0]["size"] == 64 * MIB and mmaps.iloc[0].offset == 0
    p = trace.pages[trace.pages.path == str(files["mmap_threads"])]
    for who in ("a", "b"):
        first, stop = t[f"{who}_pages"]
        mine = p[p.tid == t[f"{who}_tid"]]
        faults = mine[mine.op == "fault"]
        assert first * PAGE in set(faults.offset), f"thread {who}: no fault on its first page"
        assert (faults.offset >= first * PAGE).all() and (faults.offset + faults["size"] <= stop * PAGE).all()
        misses = mine[mine.op == "miss"]
        assert misses.offset.min() <= first * PAGE < (misses.offset + misses["size"]).max(), \
            f"thread {who}: its first page was not read in (file not cold?)"
    assert set(p.pid) == {t["pid"]}


def test_files_table(recorded):
    _result, trace, _truth, files = recorded
    check_files_table(trace, files)

