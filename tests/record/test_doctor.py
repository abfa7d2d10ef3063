"""`readtrace doctor`: every prerequisite with its status and fix; the same checks record uses."""

import subprocess
import sys

from workloads import ebpf_ready

from readtrace.record.prereq import all_checks, probe_tracepoints, require_prerequisites
from readtrace.record.program import FUSE_SOURCE, SOURCES


def test_doctor_lists_every_prerequisite():
    p = subprocess.run([sys.executable, "-m", "readtrace", "doctor", "--all"], capture_output=True, text=True,
                       timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    ready, _why = ebpf_ready()
    assert p.returncode == (0 if ready else 3), p.stdout + p.stderr
    for name in ("root or CAP_BPF", "bcc", "kernel headers", "tracefs", "kernel BTF", "/dev/fuse",
                 "raw tracepoint sys_enter", "tracepoint fuse:fuse_request_send"):
        assert name in p.stdout
    assert ("ready to record" in p.stdout) == ready


def test_checks_cover_every_tracepoint_the_probes_use():
    names = {c.name for c in all_checks()}
    used = probe_tracepoints(list(SOURCES)) + probe_tracepoints([FUSE_SOURCE])
    assert ("raw", "sys_enter") in used and ("raw", "mm_filemap_fault") in used
    for category, name in used:
        assert (f"raw tracepoint {name}" if category == "raw" else f"tracepoint {category}:{name}") in names


def test_every_missing_check_names_a_fix():
    for check in all_checks():
        assert check.ok or check.fix, check.name


def test_record_fails_fast_exactly_when_doctor_says_so():
    ready, why = ebpf_ready()
    if ready:
        require_prerequisites()  # does not raise
    else:
        import pytest

        from readtrace.errors import PrerequisiteError

        with pytest.raises(PrerequisiteError) as e:
            require_prerequisites()
        assert why.split(":")[0] in str(e.value)
