"""u64 inode numbers and nodeid != ino on FUSE clients others wrote, recorded with eBPF end to end.

rclone mount (local backend, no network) hashes each path into a 64-bit inode number: about half
of them are >= 2**63, which crashed ``record`` (int64 files table) and ``report`` (nodeid taken for the
inode). bindfs passes the backing file's inode through (libfuse high-level with use_ino), so its FUSE
nodeids are libfuse's own counter, not the inode number. For both: the files table carries the exact
st_ino, the FUSE READs join to the file the application read, and the findings name that file.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import pytest
from conftest import fuse_available, require
from workloads import ebpf_ready

from readtrace.trace import FUSE_READ, load_trace

pytestmark = [pytest.mark.ebpf, pytest.mark.fuse]
HIGH = 2**63
WORKERS = 4


def _wait_mounted(mnt: Path, process: subprocess.Popen | None) -> None:
    deadline = time.monotonic() + 20
    while not os.path.ismount(mnt):
        assert process is None or process.poll() is None, f"the FUSE client exited ({process.returncode})"
        assert time.monotonic() < deadline, f"{mnt} was not mounted in time"
        time.sleep(0.05)


@contextmanager
def _mounted(argv: list[str], mnt: Path, foreground: bool):
    """Run a FUSE client (``foreground``: it stays our child) and unmount/stop it however the test ends."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if foreground else None
    if not foreground:
        subprocess.run(argv, check=True)
    try:
        _wait_mounted(mnt, process)
        yield mnt
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False, stderr=subprocess.DEVNULL)
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def rclone_mount(src: Path, mnt: Path):
    require(shutil.which("rclone") is not None, "rclone missing (apt-get install -y rclone)")
    return _mounted(["rclone", "mount", "--config", os.devnull, "--read-only", str(src), str(mnt)], mnt,
                    foreground=True)


def bindfs_mount(src: Path, mnt: Path):
    require(shutil.which("bindfs") is not None, "bindfs missing (apt-get install -y bindfs)")
    return _mounted(["bindfs", "-f", str(src), str(mnt)], mnt, foreground=True)


CLIENTS = {"rclone": rclone_mount, "bindfs": bindfs_mount}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from readtrace.workloads import make_checkpoint

    ok, why = ebpf_ready()
    require(ok, why)
    require(*fuse_available())
    src = tmp_path_factory.mktemp("src")
    model = make_checkpoint(src, 24)[0]
    for i in range(12):  # more names for the same bytes: rclone hashes the path, so some land >= 2**63
        os.link(model, src / f"model-{i}.safetensors")
    return src


def _pick(mnt: Path, client: str) -> Path:
    """The file to load: for rclone one whose inode number has the top bit set."""
    names = sorted(p.name for p in mnt.glob("*.safetensors"))
    if client != "rclone":
        return mnt / names[0]
    high = [n for n in names if os.stat(mnt / n).st_ino >= HIGH]
    assert high, "rclone gave no inode number >= 2**63 for 13 names"
    return mnt / high[0]


@pytest.fixture(scope="module", params=list(CLIENTS))
def recorded(request, checkpoint, tmp_path_factory):
    from readtrace.record import record_command

    client = request.param
    out = tmp_path_factory.mktemp(client)
    mnt = out / "mnt"
    mnt.mkdir()
    with CLIENTS[client](checkpoint, mnt):
        path = _pick(mnt, client)
        st = os.stat(path)
        cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "fork-shared-fd",
               "--workers", str(WORKERS), str(path)]
        result = record_command(cmd, out / "t.rtrace", quiet=True)
        yield client, result, path, st


def test_files_table_carries_the_exact_u64_inode(recorded):
    client, result, path, st = recorded
    assert result.exit_code == 0 and result.lost_events == 0
    trace = load_trace(result.trace_path)
    assert str(trace.files["ino"].dtype) == "uint64"
    row = trace.files.set_index("path").loc[str(path)]
    assert int(row.ino) == st.st_ino and row.fstype.startswith("fuse")
    if client == "rclone":
        assert st.st_ino >= HIGH


def test_fuse_nodeid_is_not_the_inode_and_still_joins_to_the_file(recorded):
    from readtrace.analyze import analyze

    _client, result, path, st = recorded
    trace = load_trace(result.trace_path)
    conn = int(trace.files.set_index("path").loc[str(path)].dev) & 0xFFFFF
    reads = trace.fuse[(trace.fuse.opcode == FUSE_READ) & (trace.fuse.connection == conn)]
    assert len(reads) and (reads.nodeid > 0).all()
    assert st.st_ino not in set(reads.nodeid.tolist())  # the daemon's node handle is not st_ino
    a = analyze(trace)
    file_id = int(a.files.index[a.files["path"] == str(path)][0])
    handles = a.handles[a.handles["connection"] == conn]
    assert len(handles) and (handles["file"] == file_id).all()
    assert a.files.loc[file_id, "fuse_read_bytes"] >= 0.9 * st.st_size
    assert a.files.loc[file_id, "ino"] == st.st_ino


def test_report_terminal_and_json_name_the_file(recorded):
    from readtrace.cli import main

    _client, result, path, st = recorded
    text = io.StringIO()
    with redirect_stdout(text):
        assert main(["report", str(result.trace_path)]) == 0
    assert str(path.name) in text.getvalue()
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(result.trace_path), "--json"]) == 0
    report = json.loads(out.getvalue())
    by_path = {f["path"]: f for f in report["files"]}
    assert by_path[str(path)]["ino"] == st.st_ino  # exact, also above 2**63 (no float on the way)
    named = [f for f in report["findings"] if f.get("file")]
    assert named and all(f["file"] == str(path) for f in named), named
    handles = [s for s in report["streams"] if s["kind"] == "fuse_handle"]
    assert handles and all(s["path"] == str(path) for s in handles)
