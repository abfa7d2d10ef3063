"""Item 1 of issue 8: --force replaces only a readtrace trace, atomically; never a directory of other
files, never through a symlink; a failed run keeps the previous trace. Same rule for report files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import require
from workloads import ebpf_ready

from readtrace.trace import load_trace, write_trace
from reliability.conftest import READTRACE, fingerprint, one_line, readtrace

pytestmark = pytest.mark.ebpf


@pytest.fixture(autouse=True)
def _ebpf():
    ok, why = ebpf_ready()
    require(ok, why)


def test_force_refuses_a_directory_of_other_files(tmp_path, leftovers):
    (tmp_path / "k" / "src").mkdir(parents=True)
    (tmp_path / "k" / "src" / "a").write_text("x")
    before = fingerprint(tmp_path / "k")
    p = readtrace(["record", "-f", "-o", "k", "--", "true"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 1
    assert "k is not a readtrace trace; --force only replaces a readtrace trace" in one_line(p.stderr)
    assert fingerprint(tmp_path / "k") == before


def test_force_onto_the_current_directory_empties_nothing(tmp_path, leftovers):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    before = fingerprint(tmp_path)
    p = readtrace(["record", "-f", "-o", ".", "--", "true"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 1 and "not a readtrace trace" in one_line(p.stderr)
    assert fingerprint(tmp_path) == before


def test_force_never_writes_through_a_symlink(tmp_path, leftovers):
    old = tmp_path / "old.rtrace"
    write_trace(old, meta={"command": ["old"]})
    (tmp_path / "link.rtrace").symlink_to(old)
    before = fingerprint(old)
    p = readtrace(["record", "-f", "-o", "link.rtrace", "--", "true"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 1 and "is a symlink; readtrace never writes through one" in one_line(p.stderr)
    assert fingerprint(old) == before and (tmp_path / "link.rtrace").is_symlink()


def test_force_replaces_a_trace_and_a_failed_run_keeps_the_previous_one(tmp_path, leftovers):
    out = tmp_path / "t.rtrace"
    write_trace(out, meta={"command": ["previous"]})
    before = fingerprint(out)
    p = readtrace(["record", "-f", "-o", out, "--", "no-such-command-xyz"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 127 and fingerprint(out) == before  # failed: the previous trace is intact
    p = readtrace(["record", "-q", "-f", "-o", out, "--", "true"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0, p.stderr
    assert load_trace(out).meta["command"] == ["true"]


def test_force_replaces_an_unfinished_trace_of_ours(tmp_path, leftovers):
    """A recorder killed mid-run leaves a marked directory: --force may replace it."""
    out = tmp_path / "t.rtrace"
    out.mkdir()
    (out / ".readtrace-unfinished").write_text("12345\n")
    (out / "events.spool").write_bytes(b"\0" * 64)
    p = readtrace(["record", "-q", "-f", "-o", out, "--", "true"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0, p.stderr
    assert load_trace(out).meta["command"] == ["true"] and not (out / "events.spool").exists()


def test_a_trace_with_a_foreign_file_inside_is_not_replaced(tmp_path, leftovers):
    out = tmp_path / "t.rtrace"
    write_trace(out, meta={"command": ["previous"]})
    (out / "notes.txt").write_text("mine")
    before = fingerprint(out)
    p = readtrace(["record", "-f", "-o", out, "--", "true"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 1 and "not a readtrace trace" in one_line(p.stderr)
    assert fingerprint(out) == before


def test_two_concurrent_forced_recordings_leave_one_complete_trace(tmp_path, leftovers):
    out = tmp_path / "same.rtrace"
    cmd = READTRACE + ["record", "-q", "-f", "-o", str(out), "--", sys.executable, "-c",
                       "import time; [open('/etc/hostname').read() for _ in range(200)]; time.sleep(0.5)"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=leftovers.env, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=180), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in results] == [0, 0], results
    trace = load_trace(out)  # one complete, readable trace
    assert trace.meta["exit_code"] == 0 and len(trace.events)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.rtrace"]


def test_missing_command_and_unrunnable_ones_exit_like_a_shell(tmp_path, leftovers):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    cases = [(["no-such-command-xyz"], 127, "no-such-command-xyz: command not found"),
             ([str(tmp_path / "missing")], 127, "missing: No such file or directory"),
             ([str(script)], 126, "script.sh: cannot run: Permission denied"),
             ([str(tmp_path)], 126, ": cannot run: Is a directory")]
    for cmd, code, message in cases:
        p = readtrace(["record", "-o", "x.rtrace", "--", *cmd], cwd=tmp_path, env=leftovers.env)
        assert p.returncode == code, (cmd, p.stderr)
        assert message in one_line(p.stderr)
    assert not list(tmp_path.glob("*.rtrace"))
    # what a shell says for the same ones
    assert subprocess.run(["sh", "-c", str(script)], capture_output=True).returncode == 126
    assert subprocess.run(["sh", "-c", str(tmp_path)], capture_output=True).returncode == 126


@pytest.mark.parametrize("value", ["0", "3", "-8", "8192", "lots"])
def test_ring_mib_is_validated(tmp_path, leftovers, value):
    p = readtrace(["record", "--ring-mib", value, "-o", "x.rtrace", "--", "true"], cwd=tmp_path,
                  env=leftovers.env)
    assert p.returncode == 2
    assert one_line(p.stderr) == f"readtrace: --ring-mib must be a power of two from 1 to 4096, not {value!r}" \
        if not value.lstrip("-").isdigit() else "--ring-mib must be a power of two" in p.stderr
    assert not list(tmp_path.glob("*.rtrace"))


def test_ring_mib_sizes_the_ring_and_the_lost_events_advice_names_it(tmp_path, leftovers):
    from readtrace.analyze import analyze
    from readtrace.report.prose import render

    p = readtrace(["record", "-q", "--ring-mib", "8", "-o", "r.rtrace", "--", "cat", "/etc/hostname"],
                  cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0, p.stderr
    assert load_trace(tmp_path / "r.rtrace").meta["ring_mib"] == 8
    lossy = tmp_path / "lossy.rtrace"
    write_trace(lossy, meta={"lost_events": 12, "lost_detail": {"events_ring_full": 12}})
    findings = [f for f in analyze(load_trace(lossy)).findings if f.code == "LOST_EVENTS"]
    assert findings and "--ring-mib" in render(findings[0]).recommendation
    text = readtrace(["report", lossy], cwd=tmp_path, env=leftovers.env).stdout
    assert "--ring-mib" in text


def _report(tmp_path, env, *extra):
    seed = tmp_path / "seed.rtrace"
    if not seed.exists():
        write_trace(seed, meta={"command": ["x"]})
    return readtrace(["report", seed, *extra], cwd=tmp_path, env=env)


def test_report_files_are_replaced_only_when_ours(tmp_path, leftovers):
    html, perf = tmp_path / "r.html", tmp_path / "p.json"
    assert _report(tmp_path, leftovers.env, "--html", html, "--perfetto", perf).returncode == 0
    assert json.loads(perf.read_text())["metadata"]["source"] == "readtrace"
    p = _report(tmp_path, leftovers.env, "--html", html)
    assert p.returncode == 1 and "exists; use --force" in one_line(p.stderr)
    assert _report(tmp_path, leftovers.env, "--html", html, "--perfetto", perf, "--force").returncode == 0
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    before = fingerprint(mine)
    for flag in ("--html", "--perfetto"):
        p = _report(tmp_path, leftovers.env, flag, mine, "--force")
        assert p.returncode == 1 and "is not a readtrace" in one_line(p.stderr)
    assert fingerprint(mine) == before


def test_report_files_never_go_through_a_symlink(tmp_path, leftovers):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "r.html").symlink_to(victim)
    before = fingerprint(victim)
    p = _report(tmp_path, leftovers.env, "--html", tmp_path / "r.html", "--force")
    assert p.returncode == 1 and "is a symlink" in one_line(p.stderr)
    assert fingerprint(victim) == before
