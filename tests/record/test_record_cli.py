"""`readtrace record` as a user runs it: exit codes, errors as one line, Ctrl-C, --ebpf, sudo-less."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import require
from workloads import ebpf_ready

from readtrace.trace import load_trace

pytestmark = pytest.mark.ebpf
READTRACE = [sys.executable, "-m", "readtrace"]


@pytest.fixture(autouse=True)
def _ebpf():
    ok, why = ebpf_ready()
    require(ok, why)


def run(args, cwd, **kw):
    return subprocess.run(READTRACE + args, cwd=cwd, capture_output=True, text=True, timeout=120, **kw)


def test_exit_code_passes_through_and_next_command_is_printed(tmp_path):
    p = run(["record", "--", sys.executable, "-c", "import sys; sys.exit(7)"], tmp_path)
    assert p.returncode == 7, p.stderr
    traces = list(tmp_path.glob("readtrace-python*.rtrace"))
    assert len(traces) == 1
    assert f"readtrace report {traces[0]}" in p.stderr
    assert "lost events: 0" in p.stderr
    assert load_trace(traces[0]).meta["exit_code"] == 7


def test_missing_command_is_one_line_127(tmp_path):
    p = run(["record", "--", "no-such-command-xyz"], tmp_path)
    assert p.returncode == 127
    assert p.stderr.strip().splitlines() == ["readtrace: no-such-command-xyz: command not found"]
    assert not list(tmp_path.glob("*.rtrace"))


def test_existing_output_needs_force(tmp_path):
    out = tmp_path / "x.rtrace"
    out.mkdir()
    p = run(["record", "-o", str(out), "--", "true"], tmp_path)
    assert p.returncode == 1 and "--force" in p.stderr and "Traceback" not in p.stderr
    p = run(["record", "-q", "-f", "-o", str(out), "--", "true"], tmp_path)  # not a trace: refused
    assert p.returncode == 1 and "not a readtrace trace" in p.stderr and out.is_dir()
    out.rmdir()
    assert run(["record", "-q", "-o", str(out), "--", "true"], tmp_path).returncode == 0
    p = run(["record", "-q", "-f", "-o", str(out), "--", "true"], tmp_path)  # a trace: replaced
    assert p.returncode == 0 and p.stderr == ""
    assert load_trace(out).meta["command"] == ["true"]


def test_ctrl_c_stops_the_child_and_still_writes_a_trace(tmp_path):
    out, started = tmp_path / "sleep.rtrace", tmp_path / "started"
    script = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    proc = subprocess.Popen(READTRACE + ["record", "-o", str(out), "--", sys.executable, "-c", script],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "workload never started"
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)  # to the recorder only, not its process group
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 15
    trace = load_trace(out)
    assert trace.meta["interrupted"] is True
    assert trace.meta["exit_code"] in (128 + signal.SIGTERM, -signal.SIGTERM, 1)
    assert (trace.events.path == str(started)).any()


def test_ebpf_flag_prints_the_final_program(tmp_path):
    p = run(["record", "--ebpf"], tmp_path)
    assert p.returncode == 0
    assert "RAW_TRACEPOINT_PROBE(sys_enter)" in p.stdout and "case 17:" in p.stdout  # pread64
    assert "FILE_F_POS" not in p.stdout and "TASK_FILES" not in p.stdout  # tokens substituted


def test_without_bpf_capabilities_record_fails_with_the_doctor_line(tmp_path):
    """Real missing prerequisite: the recorder runs with every capability dropped (eBPF forced)."""
    import shutil

    require(shutil.which("setpriv") is not None, "setpriv missing (util-linux)")
    p = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", *READTRACE, "record", "--backend",
                        "ebpf", "--", "true"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "root or CAP_BPF" in lines[0] and "sudo" in lines[0]
    assert not list(tmp_path.glob("*.rtrace"))


def test_without_bpf_capabilities_auto_records_with_ptrace_and_one_notice(tmp_path):
    import shutil

    require(shutil.which("setpriv") is not None, "setpriv missing (util-linux)")
    require(shutil.which("strace") is not None, "strace missing (apt-get install strace)")
    p = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", *READTRACE, "record", "-o", "t.rtrace",
                        "--", "cat", "/proc/self/stat"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    notices = [line for line in p.stderr.splitlines() if "eBPF not available" in line]
    assert len(notices) == 1 and "root or CAP_BPF" in notices[0] and "--backend ptrace" in notices[0]
    meta = load_trace(tmp_path / "t.rtrace").meta
    assert meta["backend"] == "ptrace" and "page_faults" in meta["missing_views"]


def test_under_sudo_the_command_runs_as_the_user_and_owns_the_trace(unprivileged_user):
    user = unprivileged_user
    out = user.home / "sudo-env.rtrace"  # a name of its own: the session-wide user is shared
    env = {**os.environ, "SUDO_UID": str(user.uid), "SUDO_GID": str(user.gid), "SUDO_USER": user.name}
    p = run(["record", "-q", "-o", str(out), "--", "id", "-u"], "/", env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(user.uid)
    assert out.stat().st_uid == user.uid and (out / "meta.json").stat().st_uid == user.uid
    assert load_trace(out).meta["exit_code"] == 0
