"""Diagnosing as a real unprivileged user (created by the test), on the lab mount (mounted by root,
readable by that user): `readtrace record` picks the ptrace backend by itself; the syscall view alone
names the fork-shared-fd and per-tensor-pread loads, the residency sampler names the mmap-threads load
(marked inferred); sequential and own-fd loads are not flagged."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import fuse_available, require

from readtrace.analyze import analyze
from readtrace.analyze.rules.cost import by_seconds
from readtrace.trace import load_trace

pytestmark = [pytest.mark.fuse, pytest.mark.slow]
WORKERS = 4
SHAPE_CODES = {"SHARED_FD_INTERLEAVE", "RANDOM_ON_FUSE_HANDLE"}


@pytest.fixture(scope="module")
def lab(unprivileged_user):
    """A 64 MiB checkpoint behind the lab mount (gcsfuse profile), both in a directory others may enter.
    The file belongs to the user, as gcsfuse shows every object owned by the mount's --uid: the kernel
    shows page-cache residency to a file's owner only."""
    require(os.geteuid() == 0, "mounting the lab for another user needs root")
    require(*fuse_available())
    require(shutil.which("strace") is not None, "strace missing (apt-get install strace)")
    from readtrace.simfs import force_unmount, mount
    from readtrace.workloads import make_checkpoint

    root = Path(tempfile.mkdtemp(prefix="readtrace-unpriv-", dir="/tmp"))
    try:
        root.chmod(0o755)
        (root / "src").mkdir(mode=0o755)
        (root / "mnt").mkdir(mode=0o755)
        checkpoint = make_checkpoint(root / "src", 64)[0]
        checkpoint.chmod(0o644)
        os.chown(checkpoint, unprivileged_user.uid, unprivileged_user.gid)
        with mount(root / "src", root / "mnt", profile="gcsfuse", latency_ms=1.0):
            yield root / "mnt" / checkpoint.name
        force_unmount(root / "mnt")
    finally:
        force_unmount(root / "mnt")
        shutil.rmtree(root / "src", ignore_errors=True)
        for d in (root / "mnt", root):
            d.rmdir()


def record_as(user, model: Path, pattern: str):
    """Evict the file, then ``readtrace record`` the load as ``user`` (auto backend); the trace's analysis."""
    from readtrace.pagecache.evict import evict

    evict([model])
    out = user.home / f"{pattern}.rtrace"
    p = user.readtrace("record", "--force", "-o", out, "--", user.python, "-m", "readtrace.workloads.load", "--pattern",
                       pattern, "--workers", WORKERS, model, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    notices = [line for line in p.stderr.splitlines() if "eBPF not available" in line]
    assert len(notices) == 1 and "--backend ptrace" in notices[0]
    trace = load_trace(out, lean=True)
    assert trace.meta["backend"] == "ptrace" and trace.meta["missing_views"] == ["page_faults", "page_cache", "fuse"]
    return analyze(trace), out


def test_user_cannot_use_ebpf(unprivileged_user):
    p = unprivileged_user.readtrace("record", "--backend", "ebpf", "--", "true")
    assert p.returncode == 3 and "root or CAP_BPF" in p.stderr


@pytest.mark.parametrize("pattern,code", [("fork-shared-fd", "SHARED_FD_INTERLEAVE"),
                                          ("per-tensor-pread", "RANDOM_ON_FUSE_HANDLE")])
def test_shared_fd_and_per_tensor_pread_from_ptrace_alone(unprivileged_user, lab, pattern, code):
    a, _ = record_as(unprivileged_user, lab, pattern)
    f = next(f for f in a.findings if f.code == code)
    assert f.file == str(lab) and f.view == "ofd" and f.role == "cause"
    # how severe follows the seconds it cost (strace's syscall latency stands in for the waits)
    assert f.cost_s is not None and f.severity == by_seconds(f.cost_s, a.summary.wall_s, a.thresholds)
    assert not f.inferred and f.basis == "syscalls (strace)"  # seen, not inferred
    if code == "SHARED_FD_INTERLEAVE":
        assert f.tasks == WORKERS and f.min_task_consecutive_fraction >= 0.9


def test_mmap_threads_from_the_residency_sampler(unprivileged_user, lab):
    a, out = record_as(unprivileged_user, lab, "mmap-threads")
    f = next(f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE")
    assert f.view == "residency" and f.mapping and f.inferred and f.file == str(lab)
    assert "residency sampling every 5 ms" in f.basis and f.tasks >= 2
    assert all(r["sequential_fraction"] >= 0.8 for r in f.task_rows)
    cold = next(f for f in a.findings if f.code == "COLD_CACHE")
    assert cold.inferred and "residency sampling" in cold.basis
    # every report output says what could not be seen, and the finding says it is inferred
    rep = unprivileged_user.readtrace("report", "--json", out)
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    assert data["summary"]["backend"] == "ptrace"
    assert any(line.startswith("page-fault order not seen") for line in data["summary"]["not_seen"])
    shared = next(x for x in data["findings"] if x["code"] == "SHARED_FD_INTERLEAVE")
    assert shared["inferred"] is True and "[inferred: fault order inferred from residency sampling" in shared["message"]
    text = unprivileged_user.readtrace("report", out).stdout
    assert "not seen:" in text and "[inferred:" in text
    html = unprivileged_user.home / "r.html"
    assert unprivileged_user.readtrace("report", out, "--html", html).returncode == 0
    assert "page-fault order not seen" in html.read_text()


def test_a_file_the_user_does_not_own_is_not_measured(unprivileged_user, lab):
    """mincore would say "all resident" and cachestat refuses: the sampler says so and infers nothing."""
    # a copy owned by root, looked up through the mount for the first time here: the mount caches a
    # file's attributes for 60 s, so chown of the file the other tests used would not show in time
    src = lab.parent.parent / "src" / f"root-owned-{lab.name}"
    shutil.copyfile(lab.parent.parent / "src" / lab.name, src)
    src.chmod(0o644)
    os.chown(src, 0, 0)
    theirs = lab.parent / src.name
    try:
        a, out = record_as(unprivileged_user, theirs, "mmap-threads")
    finally:
        src.unlink()
    lab = theirs
    sampler = load_trace(out).meta["sampler"]
    assert sampler["unmeasurable"] >= 1 and str(lab) in sampler["unmeasurable_paths"]
    assert not any(f.file == str(lab) and f.inferred for f in a.findings)
    assert any("not measurable" in line for line in a.summary.not_seen)


@pytest.mark.parametrize("pattern", ["sequential", "fork-own-fd"])
def test_sequential_and_own_fd_not_flagged(unprivileged_user, lab, pattern):
    a, _ = record_as(unprivileged_user, lab, pattern)
    assert not SHAPE_CODES & {f.code for f in a.findings}
