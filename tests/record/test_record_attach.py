"""`readtrace record -p PID`: attach to a process already under way, recover its open files from /proc."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import lab_mount, require
from workloads import ebpf_ready, make_data_file, workload_cmd

from readtrace.analyze import analyze
from readtrace.trace import load_trace

pytestmark = pytest.mark.ebpf
READTRACE = [sys.executable, "-m", "readtrace"]
MIB = 1 << 20


@pytest.fixture(autouse=True)
def _ebpf():
    ok, why = ebpf_ready()
    require(ok, why)


def _wait_for(path, proc, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"{what} exited early"
        assert time.monotonic() < deadline, f"{what} never came"
        time.sleep(0.02)


@contextlib.contextmanager
def _running(cmd, **kw):
    """A process that is killed at the end if it still runs (also on a failed assertion)."""
    proc = subprocess.Popen(cmd, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _attached(pid, out, *more):
    """The recorder attached to ``pid`` (or ``more`` says to what), yielded once it says it records."""
    what = ["-p", str(pid)] if pid is not None else []
    with _running(READTRACE + ["record", *what, "-o", str(out), *more], stderr=subprocess.PIPE,
                  text=True) as rec:
        line = rec.stderr.readline()
        if "attached to" not in line:
            rec.kill()
            pytest.fail(line + rec.stderr.read())
        yield rec


def _attach_when_ready(cmd, ready, go, out):
    """Start ``cmd``, attach once it touched ``ready``, let it go on (``go``) to its end: (its pid, the
    recorder's exit code and stderr)."""
    with _running(cmd) as proc:
        _wait_for(ready, proc, "the workload")
        with _attached(proc.pid, out) as rec:
            go.touch()
            assert proc.wait(timeout=120) == 0
            _, err = rec.communicate(timeout=60)
    return proc.pid, rec.returncode, err


def _sleeper():
    return _running([sys.executable, "-c", "import time; time.sleep(120)"])


def test_attach_mid_load_names_the_shared_fd_opened_before(tmp_path):
    """A 4-thread load through one fd opened before the attach: the reads after it carry the fd's open file
    description and file, the recovered open says so, and the report flags the shared-fd interleave."""
    with lab_mount(tmp_path, lambda src: make_data_file(src / "model.bin", 16 * MIB), latency_ms=5) as (mnt, _):
        ready, go, truth, out = tmp_path / "ready", tmp_path / "go", tmp_path / "truth.json", tmp_path / "a.rtrace"
        pid, code, err = _attach_when_ready(workload_cmd("attach_threads", mnt / "model.bin", ready, go, truth),
                                            ready, go, out)
        assert code == 0, err
        assert "stopped by exit" in err and "recovered at attach" in err
        t = json.loads(truth.read_text())
        trace = load_trace(out)
        meta = trace.meta["attached"]
        assert meta["pids"] == [pid] and meta["stopped_by"] == "exit"
        (shared,) = [f for f in meta["recovered"]["files"] if f["fd"] == t["fd"]]
        assert shared["path"] == str(mnt / "model.bin") and shared["pos"] == 0
        ev = trace.events
        (opened,) = ev[(ev["op"] == "open") & (ev["fd"] == t["fd"])].itertuples()
        assert opened.path == str(mnt / "model.bin") and opened.ofd != 0 and opened.pid == pid
        reads = trace.calls()
        reads = reads[reads["path"] == str(mnt / "model.bin")]
        assert set(reads["tid"]) == set(t["tids"])
        assert set(reads["ofd"]) == {opened.ofd}  # one open file description, the one opened before
        for i, tid in enumerate(t["tids"]):  # each thread's first chunk came before the attach: not there
            mine = reads[reads["tid"] == tid]
            assert mine["offset"].min() == i * t["part"] + t["chunk"]
            assert int(mine["ret"].sum()) == t["part"] - t["chunk"]
        a = analyze(trace)
        f = next(f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE")
        assert f.file == str(mnt / "model.bin") and f.tasks == 4
        assert any("not in the trace" in line for line in a.summary.not_seen)


def test_duration_stops_the_recording_and_the_process_keeps_running(tmp_path):
    out = tmp_path / "d.rtrace"
    with _sleeper() as sleeper:
        t0 = time.monotonic()
        p = subprocess.run(READTRACE + ["record", "-p", str(sleeper.pid), "--duration", "1", "-o", str(out)],
                           capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        assert p.returncode == 0, p.stderr
        assert sleeper.poll() is None  # attached processes are never stopped
    assert "stopped by duration" in p.stderr and took < 30
    meta = load_trace(out).meta
    assert meta["attached"]["stopped_by"] == "duration" and 0.9 < meta["wall_s"] < 10
    assert meta["attached"]["still_running"] == [sleeper.pid] and not meta.get("survivors")  # not a partial trace


def test_sigint_stops_and_writes_the_trace(tmp_path):
    out = tmp_path / "i.rtrace"
    with _sleeper() as sleeper, _attached(sleeper.pid, out) as rec:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 130, err
        assert sleeper.poll() is None
    meta = load_trace(out).meta
    assert meta["interrupted"] is True and meta["attached"]["stopped_by"] == "signal"


def test_children_started_after_the_attach_are_recorded(tmp_path):
    data = make_data_file(tmp_path / "data.bin", 64 * 1024)
    go = tmp_path / "go"
    script = ("import os, pathlib, time\n"
              f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)\n"
              f"if os.fork() == 0:\n    open({str(data)!r}, 'rb').read(); os._exit(0)\n"
              "os.wait()\n")
    out = tmp_path / "c.rtrace"
    with _running([sys.executable, "-c", script]) as parent, _attached(parent.pid, out) as rec:
        go.touch()
        assert parent.wait(timeout=60) == 0
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    trace = load_trace(out)
    reads = trace.calls()
    reads = reads[reads["path"] == str(data)]
    assert len(reads) and set(reads["pid"]) - {parent.pid}  # read by the forked child
    assert int(reads["ret"].sum()) == 64 * 1024


def test_a_mapping_made_before_the_attach_is_recovered_and_its_munmap_recorded(tmp_path):
    data = make_data_file(tmp_path / "weights.bin", 2 * MIB)
    go, ready, out = tmp_path / "go", tmp_path / "ready", tmp_path / "m.rtrace"
    script = ("import mmap, os, pathlib, time\n"
              f"fd = os.open({str(data)!r}, os.O_RDONLY); m = mmap.mmap(fd, 0, prot=mmap.PROT_READ); os.close(fd)\n"
              f"pathlib.Path({str(ready)!r}).touch()\n"
              f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)\n"
              "sum(m[i] for i in range(0, len(m), 4096)); m.close()\n")
    pid, code, err = _attach_when_ready([sys.executable, "-c", script], ready, go, out)
    assert code == 0, err
    ev = load_trace(out).events
    (mapped,) = ev[(ev["op"] == "mmap") & (ev["path"] == str(data))].itertuples()
    assert mapped.size == 2 * MIB and mapped.pid == pid  # recovered from /proc/PID/maps: no fd left
    (unmapped,) = ev[(ev["op"] == "munmap") & (ev["arg"] == mapped.arg)].itertuples()
    assert unmapped.ofd == mapped.ofd and unmapped.path == str(data) and unmapped.ts_ns > mapped.ts_ns


@pytest.mark.parametrize("pids,line", [("999999999", "no process with pid 999999999"),
                                       ("12x", "'12x' is not a process id (--pid PID[,PID...])")])
def test_bad_pid_is_one_line_and_exit_5(tmp_path, pids, line):
    p = subprocess.run(READTRACE + ["record", "-p", pids], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert p.returncode == 5
    assert p.stderr.strip().splitlines() == [f"readtrace: {line}"]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args", [["-p", "1", "--", "true"], ["--duration", "1", "--", "true"],
                                  ["--until-idle", "1", "--", "true"], ["-p", "1", "--cgroup", "/sys/fs/cgroup"],
                                  ["--wait-for", "("], ["-p", "1", "--duration", "0"]])
def test_attach_usage_errors_are_one_line_and_exit_2(tmp_path, args):
    p = subprocess.run(READTRACE + ["record", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_attach_needs_root(unprivileged_user):
    p = unprivileged_user.run([unprivileged_user.python, "-m", "readtrace", "record", "-p", "1"], timeout=60)
    assert p.returncode == 3
    assert p.stderr.strip().splitlines() == ["readtrace: attaching to running processes needs root "
                                             "(sudo readtrace record -p PID)"]


def _reader(data, go=None, sleep_after=0.0, chunk=MIB):
    """A Python process that (after ``go`` exists) reads ``data`` with read()s of ``chunk``, then sleeps."""
    wait = f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)\n" if go else ""
    return [sys.executable, "-c", f"import pathlib, time\n{wait}"
            f"with open({str(data)!r}, 'rb') as f:\n    while f.read({chunk}): pass\n"
            f"time.sleep({sleep_after})\n"]


def _data_reads(trace, data):
    reads = trace.calls()
    return reads[reads["path"] == str(data)]


@pytest.mark.parametrize("chunk", [MIB, 8 * MIB], ids=["1MiB-reads", "one-read"])
def test_until_idle_ends_the_recording_of_a_process_that_keeps_running(tmp_path, chunk):
    # one read of the cached file: its page hits are one run, held in the kernel slot (no later run of
    # that thread sends it) until the thread exits, which it does not; the watch must see it there
    data = make_data_file(tmp_path / "model.bin", 4 * MIB)
    go, out = tmp_path / "go", tmp_path / "idle.rtrace"
    with _running(_reader(data, go, sleep_after=120, chunk=chunk)) as server, \
            _attached(server.pid, out, "--until-idle", "1") as rec:
        go.touch()
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
        assert server.poll() is None  # still running: the recording ended on its own
    assert "stopped by idle" in err
    trace = load_trace(out)
    assert trace.meta["attached"]["stopped_by"] == "idle"
    assert int(_data_reads(trace, data)["ret"].sum()) == 4 * MIB


def test_wait_for_catches_a_load_started_after_the_recorder(tmp_path):
    data = make_data_file(tmp_path / "model.bin", 4 * MIB)
    marker = f"readtrace-wait-{os.getpid()}-{time.monotonic_ns()}"
    out = tmp_path / "w.rtrace"
    with _running(READTRACE + ["record", "--wait-for", marker, "-o", str(out)], stderr=subprocess.PIPE,
                  text=True) as rec:
        line = rec.stderr.readline()
        if "waiting for a process" not in line:
            rec.kill()
            pytest.fail(line + rec.stderr.read())
        time.sleep(0.5)  # the recorder polls /proc from now on
        script = _reader(data, sleep_after=0)
        script[2] = f"import time; time.sleep(0.3)  # {marker}\n" + script[2]
        with _running(script) as load:
            assert load.wait(timeout=60) == 0
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    trace = load_trace(out)
    assert trace.meta["attached"]["pids"] == [load.pid] and trace.meta["attached"]["wait_for"] == marker
    assert int(_data_reads(trace, data)["ret"].sum()) == 4 * MIB


def _cgroup2_root():
    from readtrace.fs.mounts import read_mounts

    roots = [m.mountpoint for m in read_mounts() if m.fstype == "cgroup2"]
    require(bool(roots), "no cgroup2 mount")
    return roots[0]


def test_cgroup_records_its_processes_and_those_that_join_it(tmp_path):
    """A process in the cgroup before the recorder, and one that joins it after (echo $$ > cgroup.procs,
    then exec: a container's first process), recorded from outside; removing the cgroup ends it."""
    cg = os.path.join(_cgroup2_root(), f"readtrace-test-{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(cg)
    before, after = make_data_file(tmp_path / "before.bin", MIB), make_data_file(tmp_path / "after.bin", 2 * MIB)
    go, out = tmp_path / "go", tmp_path / "cg.rtrace"
    outside = make_data_file(tmp_path / "outside.bin", MIB)
    try:
        with _running(_reader(before, go)) as inside:
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(inside.pid))
            with _attached(None, out, "--cgroup", cg) as rec:
                join = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *_reader(after)]
                with _running(join) as joined, _running(_reader(outside)) as other:
                    go.touch()
                    assert joined.wait(timeout=60) == 0 and inside.wait(timeout=60) == 0
                    assert other.wait(timeout=60) == 0
                os.rmdir(cg)
                _, err = rec.communicate(timeout=60)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(cg)
    assert rec.returncode == 0, err
    trace = load_trace(out)
    meta = trace.meta["attached"]
    assert meta["cgroup"]["path"] == os.path.realpath(cg) and meta["stopped_by"] == "cgroup removed"
    assert meta["pids"] == [inside.pid]
    got_before, got_after = _data_reads(trace, before), _data_reads(trace, after)
    assert set(got_before["pid"]) == {inside.pid} and int(got_before["ret"].sum()) == MIB
    assert set(got_after["pid"]) == {joined.pid} and int(got_after["ret"].sum()) == 2 * MIB
    ev = trace.events  # the join was seen by the probe as it happened (a "fork" row naming the process)
    assert ((ev["op"] == "fork") & (ev["arg"] == joined.pid)).any()
    assert _data_reads(trace, outside).empty  # a process outside the cgroup is not recorded
    assert not (trace.events["pid"] == other.pid).any()


def test_bad_cgroup_path_is_one_line_and_exit_5(tmp_path):
    p = subprocess.run(READTRACE + ["record", "--cgroup", str(tmp_path)], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert p.returncode == 5
    assert p.stderr.strip().splitlines() == [f"readtrace: {tmp_path}: not a cgroup v2 directory (one under a "
                                             "cgroup2 mount, with a cgroup.procs)"]


def test_cgroup_records_a_container_with_its_own_pids_and_paths(tmp_path):
    """A process in its own cgroup, PID and mount namespace (unshare: a container without hostPID) mounts,
    once recorded, a bind mount and a tmpfs that exist only in its mount namespace, execs its entry point
    and reads a checkpoint on each from two threads; recorded from outside by --cgroup: its ids and paths
    as it sees them, next to the host's."""
    require(shutil.which("unshare") is not None, "unshare (util-linux)")
    cg = os.path.join(_cgroup2_root(), f"readtrace-ns-{os.getpid()}-{time.monotonic_ns()}")
    real, seen, ram = tmp_path / "real", tmp_path / "seen", tmp_path / "ram"
    for d in (real, seen, ram):
        d.mkdir()
    make_data_file(real / "model.bin", 2 * MIB)
    ready, go, truth, out = tmp_path / "ready", tmp_path / "go", tmp_path / "truth.json", tmp_path / "ns.rtrace"
    load = ("import json, os, pathlib, threading\n"
            f"pathlib.Path({str(ram / 'extra.bin')!r}).write_bytes(os.urandom({MIB}))\n"
            "def read(path, ids):\n"
            "    ids.append(threading.get_native_id())\n"
            "    with open(path, 'rb') as f:\n        while f.read(1 << 20): pass\n"
            "main, worker = [], []\n"
            f"t = threading.Thread(target=read, args=({str(ram / 'extra.bin')!r}, worker)); t.start()\n"
            f"read({str(seen / 'model.bin')!r}, main); t.join()\n"
            f"pathlib.Path({str(truth)!r}).write_text(json.dumps({{'pid': os.getpid(), 'main': main[0], "
            "'worker': worker[0]}))\n")
    container = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cg,
                 "unshare", "--pid", "--mount", "--fork", "--propagation", "private",
                 "sh", "-c", 'touch "$5"; while [ ! -e "$6" ]; do sleep 0.02; done; '
                 'mount --bind "$0" "$1" && mount -t tmpfs readtrace-test "$2" && exec "$3" -c "$4"',
                 str(real), str(seen), str(ram), sys.executable, load, str(ready), str(go)]
    os.mkdir(cg)
    try:
        with _running(container) as proc:
            _wait_for(ready, proc, "the container")
            with _attached(None, out, "--cgroup", cg) as rec:
                go.touch()
                assert proc.wait(timeout=60) == 0
                os.rmdir(cg)
                _, err = rec.communicate(timeout=60)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(cg)
    assert rec.returncode == 0, err
    assert not (seen / "model.bin").exists() and not (ram / "extra.bin").exists()  # only in its namespace
    t = json.loads(truth.read_text())
    assert t["pid"] == 1 and t["main"] == 1 and t["worker"] != 1  # the ids it sees are its namespace's
    trace = load_trace(out)
    model, extra = _data_reads(trace, seen / "model.bin"), _data_reads(trace, ram / "extra.bin")
    assert int(model["ret"].sum()) == 2 * MIB and int(extra["ret"].sum()) == MIB
    (host_pid,) = set(model["pid"])
    assert host_pid != 1 and set(extra["pid"]) == {host_pid}
    tasks = trace.tasks.set_index("tid")
    main_tid, (worker_tid,) = host_pid, set(extra["tid"])
    assert tasks.loc[main_tid, "ns_pid"] == 1 and tasks.loc[main_tid, "ns_tid"] == 1
    assert tasks.loc[worker_tid, "ns_pid"] == 1 and tasks.loc[worker_tid, "ns_tid"] == t["worker"]
    files = trace.files.set_index("path")
    assert files.loc[str(seen / "model.bin"), "host_path"] == str(real / "model.bin")
    assert files.loc[str(ram / "extra.bin"), "fstype"] == "tmpfs"
    assert pd.isna(files.loc[str(ram / "extra.bin"), "host_path"])  # a tmpfs of its own: nowhere on the host
    text = subprocess.run(READTRACE + ["report", str(out)], capture_output=True, text=True, timeout=120).stdout
    text = " ".join(text.split())  # lines wrap at the terminal's width
    assert f"pid {host_pid} (host) is pid 1 in its PID namespace, threads {worker_tid} -> {t['worker']}" in text
    assert f"{seen / 'model.bin'} in the container is {real / 'model.bin'} on the host" in text
