"""Container ids and paths (record/namespaces.py, analyze/views/namespaces.py): the host path of a file named in
another mount namespace, traces from before the tasks table, the report's lines."""

import json
import os

import pyarrow.parquet as pq

from readtrace.analyze import analyze
from readtrace.fs.mounts import kernel_dev, parse_mountinfo
from readtrace.record.namespaces import host_path
from readtrace.report.prose import container_lines
from readtrace.trace import load_trace, make_trace, write_trace
from readtrace.trace.format import META_FILE

HOST = parse_mountinfo(b"22 1 8:1 / / rw - ext4 /dev/vda1 rw\n"
                       b"30 22 8:2 / /srv rw - ext4 /dev/vdb rw\n"
                       b"31 30 8:2 /models/llama /opt/llama rw - ext4 /dev/vdb rw\n")
CONTAINER = parse_mountinfo(b"50 49 0:60 / / rw - overlay overlay rw\n"
                            b"51 50 8:2 /models/llama /ckpt ro - ext4 /dev/vdb rw\n"
                            b"52 50 0:61 / /scratch rw - tmpfs tmpfs rw\n")
SRV = kernel_dev(8, 2)


def test_mountinfo_keeps_each_mounts_root():
    assert [m.root for m in CONTAINER] == ["/", "/models/llama", "/"]


def test_a_bind_mounted_path_is_found_where_the_host_mounts_it():
    """The container's /ckpt is the file system's /models/llama: the host shows it under /srv/models/llama
    (its whole mount) and /opt/llama (a bind of that directory); the later mount wins, no inode to check."""
    assert host_path("/ckpt/model.safetensors", SRV, 0, CONTAINER, HOST) == "/opt/llama/model.safetensors"
    assert host_path("/ckpt", SRV, 0, CONTAINER, HOST[:2]) == "/srv/models/llama"


def test_no_host_path_for_what_only_the_container_mounts():
    assert host_path("/scratch/x.bin", kernel_dev(0, 61), 0, CONTAINER, HOST) is None  # its own tmpfs
    assert host_path("/etc/passwd", kernel_dev(0, 60), 0, CONTAINER, HOST) is None  # its overlay root


def test_the_host_path_is_checked_by_device_and_inode(tmp_path):
    data = tmp_path / "model.bin"
    data.write_bytes(b"x")
    st = os.stat(data)
    dev = kernel_dev(os.major(st.st_dev), os.minor(st.st_dev))
    inner = parse_mountinfo(f"70 69 {dev >> 20}:{dev & 0xFFFFF} {tmp_path} /ckpt rw - ext4 x rw\n".encode())
    host = parse_mountinfo(f"22 1 {dev >> 20}:{dev & 0xFFFFF} / / rw - ext4 x rw\n".encode())
    assert host_path("/ckpt/model.bin", dev, st.st_ino, inner, host) == str(data)
    assert host_path("/ckpt/model.bin", dev, st.st_ino + 1, inner, host) is None  # another file there now
    same = parse_mountinfo(f"70 69 {dev >> 20}:{dev & 0xFFFFF} / / rw - ext4 x rw\n".encode())
    elsewhere = host + parse_mountinfo(f"80 22 {dev >> 20}:{dev & 0xFFFFF} / /mnt/copy rw - ext4 x rw\n".encode())
    assert host_path(str(data), dev, 0, same, elsewhere) == str(data)  # its own path, not the later bind
    assert host_path(str(data), dev, 0, same, elsewhere[1:]) == "/mnt/copy" + str(data)


def test_a_trace_from_before_the_container_view_loads_without_it(tmp_path):
    path = write_trace(tmp_path / "old.rtrace", events={"ts_ns": [1], "op": ["read"], "size": [4], "ret": [4]},
                       files={"path": ["/m.bin"], "dev": [1], "ino": [2], "size": [4]})
    os.unlink(path / "tasks.parquet")
    pq.write_table(pq.read_table(path / "files.parquet").drop_columns(["host_path"]), path / "files.parquet")
    meta = json.loads((path / META_FILE).read_text())
    del meta["rows"]["tasks"]
    (path / META_FILE).write_text(json.dumps(meta))
    for lean in (False, True):
        trace = load_trace(path, lean=lean)
        assert len(trace.tasks) == 0 and list(trace.tasks.columns)[:4] == ["pid", "tid", "ns_pid", "ns_tid"]
        assert trace.files["host_path"].isna().all() and trace.files["path"].tolist() == ["/m.bin"]
    assert analyze(load_trace(path)).summary.container == {"processes": [], "files": []}


def test_the_report_names_container_ids_and_paths_next_to_the_hosts():
    trace = make_trace(
        events={"ts_ns": [1, 2], "pid": [4242, 4242], "tid": [4242, 4250], "op": ["read", "read"], "fd": [3, 3],
                "path": ["/ckpt/m.bin", "/scratch/x"], "size": [4, 4], "ret": [4, 4]},
        files={"path": ["/ckpt/m.bin", "/scratch/x", "/usr/lib/a.so"], "dev": [1, 2, 3], "ino": [1, 2, 3],
               "size": [4, 4, 4], "host_path": ["/srv/m.bin", None, "/usr/lib/a.so"]},
        tasks={"pid": [4242, 4242, 4300], "tid": [4242, 4250, 4300], "ns_pid": [1, 1, 4300],
               "ns_tid": [1, 7, 4300], "pid_ns": [9, 9, 8], "mnt_ns": [5, 5, 6]})
    summary = analyze(trace).summary
    assert summary.container == {"processes": [{"pid": 4242, "ns_pid": 1, "threads": {4242: 1, 4250: 7}}],
                                    "files": [{"path": "/ckpt/m.bin", "host_path": "/srv/m.bin"}]}
    assert container_lines(summary) == ["pid 4242 (host) is pid 1 in its PID namespace, threads 4250 -> 7",
                                        "/ckpt/m.bin in the container is /srv/m.bin on the host"]
