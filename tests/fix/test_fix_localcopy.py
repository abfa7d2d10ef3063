"""The floor on a mount that drops the page cache on every open (fix/localcopy.py): the files read once
through the mount into local copies, and the command run warm with each file bound over by its copy in
a private mount namespace. Real lab mounts without keep_cache, real processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import lab_mount

from readtrace.fix import child
from readtrace.fix.compare import compare
from readtrace.fix.localcopy import local_copies
from readtrace.fix.verdict import verdict_of
from readtrace.workloads import make_checkpoint

pytestmark = [pytest.mark.fuse, pytest.mark.usefixtures("need_root")]
MiB = 1 << 20


def _weights(src, mib: int) -> str:
    data = os.urandom(mib * MiB)
    (src / "w.bin").write_bytes(data)
    os.chmod(src / "w.bin", 0o640)
    return hashlib.sha256(data).hexdigest()


STAT = "import os, sys; st = os.stat(sys.argv[1]); print(st.st_dev, oct(st.st_mode & 0o777))"


def test_copies_are_the_same_bytes_and_only_the_command_sees_them(tmp_path):
    with lab_mount(tmp_path, lambda src: _weights(src, 8), latency_ms=2, keep_cache=False) as (mnt, sha):
        file = str(mnt / "w.bin")
        mount_dev = os.stat(file).st_dev
        with local_copies([file], streams=2, chunk_bytes=1 * MiB) as copies:
            (copy,) = copies.binds.values()
            assert copies.bytes == 8 * MiB and copies.read_s > 0 and copies.streams == 2
            assert hashlib.sha256(Path(copy).read_bytes()).hexdigest() == sha
            out = tmp_path / "seen"
            with open(out, "w") as f:
                assert child.run([sys.executable, "-c", STAT, file], stdout=f, binds=copies.binds) == 0
            dev, mode = out.read_text().split()
            assert int(dev) == os.stat(copy).st_dev != mount_dev  # the command read the copy
            assert mode == "0o440"  # the file's mode, read bits only
            assert os.stat(file).st_dev == mount_dev  # everyone else still sees the mount
        assert not os.path.exists(copy) and not os.path.exists(os.path.dirname(copy))
        assert os.stat(file).st_dev == mount_dev


def test_a_failed_bind_never_runs_the_command(tmp_path):
    ran = tmp_path / "ran"
    with pytest.raises(subprocess.SubprocessError):
        child.run(["touch", str(ran)], binds={str(tmp_path / "missing"): str(tmp_path / "also-missing")})
    assert not ran.exists()


def test_a_load_at_its_floor_on_a_mount_that_drops_the_cache_is_left_alone_with_the_floor(tmp_path):
    """A sequential safetensors load: at its floor. Without the local copy the floor was unknown there,
    and every candidate ran."""
    with lab_mount(tmp_path, lambda src: make_checkpoint(src, 16)[0], latency_ms=2, keep_cache=False) as (mnt, path):
        file = str(mnt / path.name)
        lines = []
        cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "sequential", file]
        result = compare(cmd, files=[file], log=lines.append)
    floor = result.choice.floor
    assert floor is not None and floor.local_copy and floor.bytes == os.path.getsize(path), result.choice.floor_unknown
    assert floor.warm_s > 0 and floor.read_s > 0
    assert any("into a local copy, then the command warm from it" in line for line in lines), lines
    verdict = verdict_of(result)
    assert verdict.word == "not-slow" and "from a local copy" in verdict.why, verdict.why
    assert result.choice.trials == []  # within noise of its floor: no candidate ran
    assert result.unproven == [] and result.evictions


def test_copies_never_go_where_another_user_could_swap_the_directory(tmp_path, monkeypatch):
    """Root writes the file's bytes into the copy: never below a directory another user may write
    (a $TMPDIR of theirs could be swapped for a symlink between the mkdir and the write)."""
    import tempfile

    from readtrace.fix.localcopy import _root_only_base

    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(open_dir))
    assert _root_only_base(4096) in ("/dev/shm", "/var/tmp", "/tmp")
    assert _root_only_base(1 << 50) in ("/var/tmp", "/tmp")  # more than memory holds: never the memory file system
    (tmp_path / "w.bin").write_bytes(b"x" * 4096)
    with local_copies([str(tmp_path / "w.bin")]) as copies:
        (copy,) = copies.binds.values()
        assert not copy.startswith(str(open_dir)) and Path(copy).read_bytes() == b"x" * 4096
    assert list(open_dir.iterdir()) == []


MAPPED = """
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], "pt") as f:  # lazy slices: tensors mapped from the file, digested from its bytes
    t = {k: f.get_slice(k)[:] if f.get_slice(k).get_shape() else f.get_tensor(k) for k in f.keys()}
print(len(t))
"""


def test_the_warm_runs_digests_of_the_copy_are_kept_for_the_file(tmp_path):
    """The floor's warm run digests the copy's mapped tensors; the file's next run (a recorded baseline's
    first trial) finds them under the file's own identity and does not read the file again for them."""
    from readtrace.fix.session import Session
    from readtrace.inject.digestcache import CACHE_NAME, cached, file_key

    with lab_mount(tmp_path, lambda src: make_checkpoint(src, 8)[0], latency_ms=2, keep_cache=False) as (mnt, path):
        file = str(mnt / path.name)
        work = tmp_path / "work"
        work.mkdir()
        session = Session([sys.executable, "-c", MAPPED, file], work, None, None, None, [file], True, print)
        floor, warm, why = session.floor(keeps_cache=False)
        assert floor is not None and floor.local_copy and warm.exit_code == 0, why
        kept = cached(work / CACHE_NAME, file_key(file))
    mapped = [t for t in warm.manifest.tensors if t.sha256]
    assert kept and set(kept.values()) <= {t.sha256 for t in mapped}


# MAPPED after 16 spans read backwards (first bytes at the mount's latency): the load waits on its
# file longer than a sequential read of it takes, so it is not at its floor and the floor runs warm
SEEKS_THEN_MAPPED = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for offset in range(os.fstat(fd).st_size - (64 << 10), 0, -(1 << 20)):
    os.pread(fd, 64 << 10, offset)
os.close(fd)
""" + MAPPED


@pytest.mark.ebpf
@pytest.mark.parametrize("keep_cache", [True, False], ids=["keeps-cache", "drops-cache"])
def test_a_made_baseline_is_recorded_first_and_takes_its_digests_from_the_floors_warm_run(tmp_path, keep_cache):
    """The comparison's first baseline run is recorded as a user records one, without the shim, so it reads
    only what the load reads (with the shim's digests a 220 MiB transformers load on the lab mount read
    5.4 s more after a 4.5 s load); its tensors are the floor's warm run's, digested from the page cache
    (or the local copy)."""
    from readtrace.fix.recording import RunRecorder

    with lab_mount(tmp_path, lambda src: make_checkpoint(src, 16)[0], latency_ms=20, keep_cache=keep_cache) as (mnt, path):
        file = str(mnt / path.name)
        lines: list[str] = []
        # budget: a load this near its floor has no candidate proved within 2x its time (schedule.BAND_BUDGET)
        result = compare([sys.executable, "-c", SEEKS_THEN_MAPPED, file], files=[file], recorder=RunRecorder(),
                         log=lines.append, budget=600)
    assert lines[0].startswith("run 1 baseline [unchanged, recorded without the shim]"), lines
    assert any(line.startswith("floor: ") and "the command warm" in line for line in lines), lines
    baseline = result.side("baseline")[0]
    assert baseline.recorded and baseline.loader_s is None and not result.choice.floor.warm_recorded
    mapped = [t for t in baseline.manifest.tensors if t.sha256]
    assert mapped and result.diff.count == len(baseline.manifest.tensors)
    # what the load read through the mount, not the whole file again for the digests
    assert baseline.summary["fuse_read_bytes"] < os.path.getsize(path), baseline.summary["fuse_read_bytes"]
