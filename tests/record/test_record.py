"""`readtrace record` on real workloads with known answers (one recording for the whole module).

The workloads (tests/workloads/) do I/O at fixed offsets and write their pids/tids/fds to JSON; the
trace must show exactly those. They run in one `sh -c`, which also exercises following the tree.
"""


import pytest
from conftest import require
from workloads import ebpf_ready
from workloads.known import SAME_FACTS, check_pread_threads, check_same_fact, record_known

pytestmark = pytest.mark.ebpf
PAGE = 4096


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    return record_known(tmp_path_factory.mktemp("record"), lambda cmd, out: record_command(cmd, out, quiet=True))


def test_result_and_meta(recorded):
    result, trace, _truth, _files = recorded
    assert result.exit_code == 0
    assert result.lost_events == 0 and trace.meta["lost_events"] == 0
    assert result.events > 0 and result.wall_s > 0
    assert trace.meta["exit_code"] == 0 and trace.meta["command"][0] == "sh"


def test_preads_main_thread_and_second_thread(recorded):
    _result, trace, truth, files = recorded
    shared = check_pread_threads(trace, truth["pread_threads"], files["pread_threads"], merged_run=True)
    assert shared.ofd.iloc[0] != 0  # the kernel's struct file pointer


@pytest.mark.parametrize("fact", SAME_FACTS)
def test_the_facts_every_backend_records(recorded, fact):
    """Fork and dup share the open file description, offsets follow lseek, readv/preadv, the mmap's
    range, the files table: what the strace backend must rebuild too."""
    check_same_fact(recorded, fact)


def test_mmap_of_cold_file_faults_per_thread(recorded):
    _result, trace, truth, files = recorded
    t = truth["mmap_threads"]
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

