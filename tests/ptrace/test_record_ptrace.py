"""`readtrace record --backend ptrace` (strace) on the workloads with known answers: the same facts the
eBPF recorder must show (tests/record/test_record.py), rebuilt from strace's output (one recording)."""

import shutil

import pytest
from conftest import require
from workloads.known import SAME_FACTS, check_pread_threads, check_same_fact, record_known

PAGE = 4096


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    require(shutil.which("strace") is not None, "strace missing (apt-get install strace)")
    from readtrace.ptrace.recorder import record_ptrace

    return record_known(tmp_path_factory.mktemp("ptrace"),
                        lambda cmd, out: record_ptrace(cmd, out, quiet=True, interval_s=0.002))


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
    check_pread_threads(trace, truth["pread_threads"], files["pread_threads"], merged_run=False)


@pytest.mark.parametrize("fact", SAME_FACTS)
def test_the_facts_every_backend_records(recorded, fact):
    """Fork and dup share the open file description, offsets follow lseek, readv/preadv, the mmap's
    range, the files table: rebuilt from strace as the eBPF recorder sees them."""
    check_same_fact(recorded, fact)


def test_mmap_range_and_residency_of_the_touched_pages(recorded):
    _result, trace, truth, files = recorded
    t = truth["mmap_threads"]
    path = str(files["mmap_threads"])
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

