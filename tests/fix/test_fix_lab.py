"""fix --compare end to end on the lab mount (gcsfuse profile, 20 ms first byte) with readtrace's
example loader, unchanged: the daemon's own request log is the ground truth for what each run cost."""

from __future__ import annotations

import sys

import pytest
from conftest import fuse_available, require

from readtrace.fix.compare import compare
from readtrace.fix.runs import default_recorder
from readtrace.simfs import force_unmount, mount
from readtrace.workloads import make_checkpoint
from readtrace.workloads.layout import read_layout

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require(*fuse_available())
    src, mnt = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("mnt")
    path = make_checkpoint(src, 16)[0]
    try:
        # keep_cache: the kernel page cache survives the loader's own open (else prefetch cannot help;
        # compare says so, see test_compare_names_a_mount_that_drops_the_cache)
        with mount(src, mnt, profile="gcsfuse", latency_ms=20, keep_cache=True) as m:
            yield m, f"{mnt}/{path.name}", len(read_layout(path))
    finally:
        force_unmount(mnt)


def reads_per_run(m, run):
    """Run ``run(log)``; return its result and the lab daemon's FUSE READs during each run, by side."""
    marks, sides = [], []

    def log(line: str) -> None:
        if line.startswith("run "):
            marks.append(len(m.requests()))
            sides.append(line.split()[2])

    result = run(log)
    marks.append(len(m.requests()))
    reads = m.requests()
    return result, {side: reads.iloc[lo:hi] for side, lo, hi in zip(sides, marks, marks[1:], strict=False)}


def backend_streams_per_run(m, run):
    """Run ``run(log)``; return its result and the backend streams the daemon opened during each run."""
    result, reads = reads_per_run(m, run)
    return result, {side: int(r["new_request"].sum()) for side, r in reads.items()}


@pytest.mark.parametrize("pattern", ["mmap-threads", "fork-shared-fd"])
def test_fix_removes_the_shared_handle_penalty(lab, pattern):
    m, path, tensors = lab
    cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern, "--workers", "4", path]
    result, streams = backend_streams_per_run(m, lambda log: compare(cmd, strategy="both", files=[path], log=log))
    assert result.diff.all_identical and result.diff.count == tensors
    # baseline: every jump on the shared handle reopens a backend stream; fixed: the start-up prefetch
    # reads the file once, sequentially, on a few own handles, and the load hits the page cache.
    # The prefetched pages are pinned until the load used them (proactive reclaim, e.g. this VM's
    # kdamond, cannot drop them in between), so the loader itself opens no stream: only the
    # residency probe, the header and the 4 prefetch threads do.
    assert streams["baseline"] > 30
    assert streams["fixed"] <= 8, streams


def test_compare_names_a_mount_that_drops_the_cache(tmp_path):
    require(*fuse_available())
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    path = make_checkpoint(src, 4)[0]
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=1, keep_cache=False):
            cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "safetensors-default",
                   f"{mnt}/{path.name}"]
            result = compare(cmd, strategy="both", files=[f"{mnt}/{path.name}"])
    finally:
        force_unmount(mnt)
    assert result.diff.all_identical
    assert any("lose their page cache on every open()" in n for n in result.notes)
    fixed_calls = result.side("fixed")[0].manifest.calls
    assert not any(c.call == "prefetch" for c in fixed_calls)  # skipped: it would be dropped anyway
    # the pattern calls safetensors' load_file: the own-fd loader still serves it
    assert any(c.call == "load_file" and c.strategy == "both" and c.nested and c.fallback is None
               for c in fixed_calls)


@pytest.mark.ebpf
def test_recorded_compare_reports_fewer_fuse_requests(lab):
    from workloads import ebpf_ready

    require(*ebpf_ready())
    recorder, why = default_recorder()
    require(recorder is not None, why or "")
    m, path, tensors = lab
    cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "mmap-threads", "--workers", "4", path]
    result = compare(cmd, strategy="both", files=[path], recorder=recorder)
    base, fixed = result.side("baseline")[0].summary, result.side("fixed")[0].summary
    assert result.diff.all_identical and result.diff.count == tensors
    assert base["lost_events"] == 0 and fixed["lost_events"] == 0
    assert base["cache_miss_bytes"] > 0
    assert fixed["fuse_read_requests"] < base["fuse_read_requests"]
    assert "SHARED_FD_INTERLEAVE" in base["findings"]
    # the fixed run's handles (the prefetcher's own fds) are read front to back; the threads' page
    # faults then hit the page cache, so gcsfuse's replay predicts a handful of backend streams
    assert fixed["handle_consecutive_fraction"] > 0.9 > base["handle_consecutive_fraction"]
    assert fixed["gcsfuse_predicted_requests"] * 10 < base["gcsfuse_predicted_requests"]


@pytest.mark.ebpf
def test_own_fd_per_fork_reads_one_handle_per_worker(lab):
    """Forked workers preading the parent's fd, fixed with own-fd-per-fork (inject/forkfd.py): the
    daemon sees one FUSE handle per worker where the baseline's workers all read one, the recorded
    baseline is blamed for the interleave and the fixed run is not, and the tensors are identical."""
    from workloads import ebpf_ready

    require(*ebpf_ready())
    recorder, why = default_recorder()
    require(recorder is not None, why or "")
    m, path, tensors = lab
    cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "fork-shared-fd", "--workers", "4", path]
    result, reads = reads_per_run(m, lambda log: compare(cmd, strategy="own-fd-per-fork", files=[path],
                                                          recorder=recorder, log=log))
    assert result.diff.all_identical and result.diff.count == tensors
    base, fixed = reads["baseline"], reads["fixed"]
    assert base.groupby("fh")["pid"].nunique().max() >= 4  # the workers (and the parent) on one handle
    assert fixed.groupby("fh")["pid"].nunique().max() == 1, fixed.groupby("fh")["pid"].unique()
    assert fixed.groupby("pid")["fh"].nunique().max() == 1  # and each on exactly one handle
    assert fixed["fh"].nunique() >= 4
    reopened = [c for c in result.side("fixed")[0].manifest.calls if c.call == "fork:shared-fd"]
    assert len({c.pid for c in reopened}) == 4 and all(c.reopened for c in reopened)
    base_sum, fixed_sum = result.side("baseline")[0].summary, result.side("fixed")[0].summary
    assert base_sum["lost_events"] == 0 and fixed_sum["lost_events"] == 0
    assert "SHARED_FD_INTERLEAVE" in base_sum["findings"]
    assert "SHARED_FD_INTERLEAVE" not in fixed_sum["findings"]
    assert fixed_sum["gcsfuse_predicted_requests"] * 4 < base_sum["gcsfuse_predicted_requests"]
