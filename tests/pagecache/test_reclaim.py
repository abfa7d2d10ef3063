"""What reclaimed page cache during a recording (readtrace/pagecache/reclaim.py), and what the report says
of a file fetched twice because of it: the cause from the machine's own counters, not a guess.

The real recording pages its file out in the middle of the load through the kernel's reclaim_pages()
(MADV_PAGEOUT, the path DAMON's pageout takes), so the trace holds a real refetch; the counters it
saved are checked against the kernel's, read around the recording by the test itself."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path

import pytest
from conftest import require
from workloads import ebpf_ready

from readtrace.analyze.rules.types import CacheEvictedReread
from readtrace.pagecache import reclaim
from readtrace.pagecache.reclaim import (
    CAUSES,
    DROPPED,
    NONE_SEEN,
    PRESSURE_CAUSE,
    PROACTIVE_CAUSE,
    Counters,
    Pageout,
    explain,
    window,
)
from readtrace.report.prose import EVICTION_ADVICE, render

MiB = 1 << 20

READ_PAGED_OUT_READ = """
import mmap, sys
with open(sys.argv[1], "rb") as f:
    while f.read(1 << 20):
        pass
    with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))  # mapped here: MADV_PAGEOUT takes them
        mapped.madvise(getattr(mmap, "MADV_PAGEOUT", 21))  # the pages DAMON's pageout would take
    f.seek(0)
    while f.read(1 << 20):
        pass
"""


def _sysfs(path: Path) -> str:
    for _ in range(40):  # EBUSY while a refresh (the recorder's, finishing) waits on the kdamond
        try:
            return path.read_text().strip()
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            time.sleep(0.05)
    raise TimeoutError(path)


def _running_pageouts() -> set[str]:
    """The kdamond pageout schemes running here, read from sysfs by the test itself (root)."""
    found = set()
    for kdamond in Path("/sys/kernel/mm/damon/admin/kdamonds").glob("[0-9]*"):
        if _sysfs(kdamond / "state") != "on":
            continue
        for scheme in kdamond.glob("contexts/[0-9]*/schemes/[0-9]*"):
            if _sysfs(scheme / "action") == "pageout":
                found.add(f"kdamond {kdamond.name} scheme {scheme.name}")
    return found


@pytest.mark.ebpf
def test_a_recording_says_what_reclaimed_page_cache_during_it_and_the_report_names_it(tmp_path, disk_dir):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.analyze import analyze
    from readtrace.pagecache.evict import evict
    from readtrace.record import record_command
    from readtrace.trace import load_trace

    path = Path(disk_dir) / "w.bin"
    path.write_bytes(os.urandom(8 * MiB))
    os.sync()
    evict([str(path)])
    before = Counters.now()
    result = record_command([sys.executable, "-c", READ_PAGED_OUT_READ, str(path)], tmp_path / "t.rtrace", quiet=True)
    after = Counters.now()
    assert result.exit_code == 0
    trace = load_trace(tmp_path / "t.rtrace")
    seen = trace.meta["reclaim"]
    outer = window(before, after)
    assert seen["cause"] in CAUSES
    assert 0 <= seen["pressure_pages"] <= outer["pressure_pages"]  # the recording's window lies inside ours
    assert 0 <= seen["drop_caches"] <= outer["drop_caches"]
    assert {p["where"] for p in seen["pageouts"]} == _running_pageouts()
    if seen["pressure_pages"] == 0 and seen["drop_caches"] == 0 and not any(p["applied_bytes"] for p in seen["pageouts"]):
        assert seen["cause"] in (NONE_SEEN, PROACTIVE_CAUSE)  # proactive: configured, its statistics unread

    finding = next(f for f in analyze(trace).findings if f.code == "CACHE_EVICTED_REREAD")
    assert finding.refetched_bytes >= 4 * MiB  # the pages it paged out came back from storage
    assert (finding.evicted_by, finding.eviction) == explain(seen)
    prose = render(finding)
    assert f"eviction: {finding.eviction}" in prose.evidence
    assert prose.recommendation == EVICTION_ADVICE[finding.evicted_by]


def _pageout(applied: int | None, where: str = "kdamond 0 scheme 0") -> Pageout:
    return Pageout(where, 1, 10, 60.0, 128.0 * MiB, applied)


def _counters(pressure: int = 0, drops: int = 0, proactive: int = 0) -> Counters:
    return Counters({"pgsteal_kswapd": pressure, "pgsteal_direct": 0, "pgsteal_khugepaged": 0,
                     "pgsteal_proactive": proactive, "drop_pagecache": drops}, 20 << 30)


@pytest.mark.parametrize("after,readings,cause,says", [
    (_counters(pressure=256), [], PRESSURE_CAUSE, "memory pressure reclaimed 1 MiB"),
    (_counters(drops=1), [], DROPPED, "drop_caches"),
    (_counters(), [(_pageout(100 * MiB),), (_pageout(164 * MiB),)], PROACTIVE_CAUSE, "64 MiB paged out during the run"),
    (_counters(), [(_pageout(None),), (_pageout(None),)], PROACTIVE_CAUSE, "proactive reclaim evicts idle page cache"),
    (_counters(proactive=512), [], PROACTIVE_CAUSE, "memory.reclaim: 2 MiB"),
    (_counters(), [(_pageout(5 * MiB),), (_pageout(5 * MiB),)], NONE_SEEN, "paged out nothing during it"),
    (_counters(), [], NONE_SEEN, "no proactive reclaim was seen"),
    (_counters(), None, NONE_SEEN, "whether DAMON's proactive reclaim ran could not be read"),
])
def test_the_cause_is_the_first_the_counters_show(after, readings, cause, says):
    w = window(_counters(), after, readings)
    assert w["cause"] == cause
    assert explain(w)[0] == cause and says in explain(w)[1], explain(w)
    if cause != PRESSURE_CAUSE:
        assert "no memory-pressure reclaim ran during the run, 20.0 GiB available" in explain(w)[1] or cause == DROPPED


def test_one_reading_of_damon_is_no_count_of_what_it_did():
    """Both ends the same reading (a run shorter than a refresh): nothing measured, not zero."""
    assert window(_counters(), _counters(), [(_pageout(7 * MiB),)])["pageouts"][0]["applied_bytes"] is None


@pytest.mark.parametrize("meta", [
    None, "proactive reclaim", {}, {"cause": "ghosts", "pageouts": []},
    {"cause": NONE_SEEN, "pageouts": [{"described": 5}]},
    {"cause": PRESSURE_CAUSE, "pageouts": [], "pressure_pages": True},
    {"cause": PRESSURE_CAUSE, "pageouts": [], "pressure_pages": -3},
])
def test_a_reclaim_record_this_code_did_not_write_is_unknown_not_a_traceback(meta):
    assert explain(meta) == ("", "whether memory pressure evicted them is not known (not in this trace)")


@pytest.mark.parametrize("cause,says", [
    (PRESSURE_CAUSE, "give the load more page cache"),
    (PROACTIVE_CAUSE, "more memory does not help"),
    (DROPPED, "/proc/sys/vm/drop_caches"),
    (NONE_SEEN, "no reclaim was seen taking them"),
    ("", "where memory pressure evicted them"),
])
def test_the_advice_follows_the_cause(cause, says):
    f = CacheEvictedReread("warn", file="/m/w.bin", refetched_bytes=4 * MiB, miss_bytes=12 * MiB,
                           miss_unique_bytes=8 * MiB, evicted_by=cause, eviction="x" if cause else "")
    prose = render(f)
    assert says in prose.recommendation
    assert ("eviction: x" in prose.evidence) == bool(cause)
    if cause != PRESSURE_CAUSE:
        assert "raise the cgroup memory limit" not in prose.recommendation


def test_without_damon_no_thread_and_no_pageouts(tmp_path, monkeypatch):
    monkeypatch.setattr(reclaim, "KDAMONDS", tmp_path / "none")
    monkeypatch.setattr(reclaim, "DAMON_RECLAIM", tmp_path / "none")
    w = reclaim.Watch().stop()
    assert w["pageouts"] == [] and w["pressure_pages"] is not None and w["mem_available_bytes"] > 0


def test_a_pageout_described():
    assert _pageout(None).describe() == ("DAMON pageout (kdamond 0 scheme 0): memory seen accessed in at most 1 of 10 "
                                         "samples an interval, idle >= 60 s, up to 128 MiB/s")


@pytest.mark.usefixtures("need_root")
def test_back_to_back_recordings_each_see_the_pageout_that_runs():
    """A recording that starts while the last one's refresh still waits on the kdamond (fix --compare's
    runs, one after another) still sees what runs here: DAMON's sysfs is busy then, not empty."""
    first = reclaim.Watch()
    time.sleep(0.05)  # its thread's first refresh is in flight
    first.stop()
    second = reclaim.Watch().stop()
    assert {p["where"] for p in second["pageouts"]} == _running_pageouts()
