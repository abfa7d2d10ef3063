"""Items 7 and 2 of issue 8: a full disk, SIGHUP and SIGKILL while recording; recording under sudo.

The workload is never killed by the recorder's failure, what was written is kept and marked partial;
a killed recorder takes its command down; under sudo the command and the output get the user's rights."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require
from workloads import ebpf_ready

from readtrace.trace import load_trace, write_trace
from reliability.conftest import READTRACE, fingerprint, one_line, readtrace

pytestmark = pytest.mark.ebpf
LOAD = "import os, sys\nfd = os.open('/etc/hostname', os.O_RDONLY)\nfor i in range(int(sys.argv[1])):\n" \
       "    os.pread(fd, 1, i % 3)\nprint('workload done', flush=True)\n"


@pytest.fixture(autouse=True)
def _ebpf():
    ok, why = ebpf_ready()
    require(ok, why)


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs: the recorder's spool fills it within a second of a pread loop."""
    point = tmp_path / "disk"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(point)], check=True)
    yield point
    subprocess.run(["umount", str(point)], check=True)


def test_a_full_disk_keeps_the_workload_and_a_partial_trace(tmp_path, small_disk, leftovers):
    load = tmp_path / "load.py"
    load.write_text(LOAD)
    out = small_disk / "t.rtrace"
    p = readtrace(["record", "--no-coalesce", "-o", out, "--", sys.executable, load, "300000"], cwd=tmp_path,
                  env=leftovers.env)
    assert p.returncode == 0, p.stderr  # the workload's own exit code: it ran to its end
    assert "workload done" in p.stdout and "Traceback" not in p.stderr
    assert "WARNING: partial trace: writing the trace failed while recording (No space left on device)" in p.stderr
    assert "records dropped" in p.stderr
    meta = load_trace(out).meta  # readable
    assert meta["partial"] is True and meta["dropped_records"] > 0
    assert any("No space left" in r for r in meta["partial_reasons"])
    assert sorted(x.name for x in small_disk.iterdir()) == ["t.rtrace"]  # no spool, no temp dir


def test_a_complete_trace_says_it_is_not_partial(tmp_path, leftovers):
    p = readtrace(["record", "-q", "-o", "t.rtrace", "--", "true"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0, p.stderr
    meta = load_trace(tmp_path / "t.rtrace").meta
    assert meta["partial"] is False and meta["partial_reasons"] == [] and meta["dropped_records"] == 0


def _start_sleeper(tmp_path, env, out, *flags):
    started = tmp_path / "started"
    started.unlink(missing_ok=True)
    script = f"import os, pathlib, time; pathlib.Path({str(started)!r}).write_text(str(os.getpid())); time.sleep(60)"
    proc = subprocess.Popen(READTRACE + ["record", *flags, "-o", str(out), "--", sys.executable, "-c", script],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (started.exists() and started.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), "the traced command never started"
    return proc, int(started.read_text())


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_sighup_is_handled_like_sigterm(tmp_path, leftovers):
    out = tmp_path / "hup.rtrace"
    proc, child = _start_sleeper(tmp_path, leftovers.env, out)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=60) == 130
    assert _gone(child, 5)
    meta = load_trace(out).meta
    assert meta["interrupted"] is True and meta["exit_code"] == 128 + signal.SIGTERM


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_still_write_the_trace(tmp_path, leftovers, sig):
    out = tmp_path / "int.rtrace"
    proc, child = _start_sleeper(tmp_path, leftovers.env, out)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 130
    assert _gone(child, 5) and load_trace(out).meta["interrupted"] is True


def test_a_killed_recorder_takes_its_command_down_and_its_leftovers_are_cleaned(tmp_path, leftovers):
    out, temp = tmp_path / "k.rtrace", tmp_path / "tmp"
    temp.mkdir()
    # TMPDIR: where the Python-calls hook and its log go; a state dir of its own, so that no other
    # readtrace run on this machine cleans this run's leftovers first
    env = {**leftovers.env, "TMPDIR": str(temp), "READTRACE_STATE_DIR": str(tmp_path / "state")}
    write_trace(out, meta={"command": ["previous"]})
    before = fingerprint(out)
    proc, child = _start_sleeper(tmp_path, env, out, "-f")
    proc.kill()
    proc.wait(timeout=10)
    assert _gone(child, 5), "the traced command outlived a SIGKILLed recorder"
    assert fingerprint(out) == before  # the previous trace is intact
    staged = [p for p in tmp_path.iterdir() if p.name.startswith(".k.rtrace.partial-")]
    assert len(staged) == 1 and (staged[0] / ".readtrace-unfinished").exists()
    hook = sorted(temp.iterdir())
    assert [p.name.split("-")[1] for p in hook] == ["calls", "shim"], hook  # SIGKILL: no chance to remove them
    p = readtrace(["record", "-f", "-o", out, "--", "true"], cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert not staged[0].exists()  # the dead run's unfinished trace was removed
    assert not list(temp.iterdir())  # and its hook directory and calls log
    for path in hook:  # (another run's leftovers may be cleaned and told too)
        assert f"cleaned up after a killed run: temp {path}" in p.stderr, p.stderr
    assert load_trace(out).meta["command"] == ["true"]


def test_concurrent_recordings_to_different_traces(tmp_path, leftovers):
    procs = [subprocess.Popen(READTRACE + ["record", "-q", "-o", f"c{i}.rtrace", "--", "cat", "/etc/hostname"],
                              cwd=tmp_path, env=leftovers.env, stdout=subprocess.PIPE) for i in range(3)]
    assert [p.wait(timeout=180) for p in procs] == [0, 0, 0]
    for i in range(3):
        assert load_trace(tmp_path / f"c{i}.rtrace").meta["exit_code"] == 0


def _sudo_record(user, *args):
    return user.sudo([sys.executable, "-m", "readtrace", "record", *map(str, args)], timeout=180)


def test_under_real_sudo_the_command_has_only_the_users_rights(unprivileged_user, leftovers):
    require(shutil.which("sudo") is not None, "sudo missing (apt-get install sudo)")
    user = unprivileged_user
    out = user.home / "real-sudo.rtrace"
    p = _sudo_record(user, "-q", "-f", "-o", out, "--", "sh", "-c", 'id -u; id -g; id -G; echo "$HOME $USER"')
    assert p.returncode == 0, p.stderr
    uid, gid, groups, env = p.stdout.strip().splitlines()
    assert (uid, gid) == (str(user.uid), str(user.gid))
    assert groups == str(user.gid)  # no supplementary group of root's
    assert env == f"{user.home} {user.name}"
    assert {f.stat().st_uid for f in [out, *out.iterdir()]} == {user.uid}


def test_under_sudo_a_symlinked_output_gains_no_root_rights(unprivileged_user, leftovers):
    require(shutil.which("sudo") is not None, "sudo missing (apt-get install sudo)")
    user = unprivileged_user
    secret = Path("/root") / f"readtrace-test-{os.getpid()}"
    secret.mkdir(mode=0o700)
    try:
        link = user.home / "into-root"
        user.run(["ln", "-sfn", str(secret), str(link)], check=True)
        p = _sudo_record(user, "-o", link / "x.rtrace", "--", "true")
        assert p.returncode == 1 and "Permission denied" in one_line(p.stderr)
        assert list(secret.iterdir()) == []  # nothing written where only root may write
        victim = user.home / "victim.rtrace"
        user.run(["ln", "-sfn", "/etc", str(victim)], check=True)
        p = _sudo_record(user, "-f", "-o", victim, "--", "true")
        assert p.returncode == 1 and "is a symlink" in one_line(p.stderr)
        assert Path("/etc/passwd").exists()
    finally:
        shutil.rmtree(secret)
