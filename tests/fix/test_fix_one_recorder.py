"""fix --compare records every run under one probe set (fix/recording.py): each run's trace is its own
run's, with the reads at the offsets the loader used, and the probes are gone when the compare ends."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import fuse_available, require

from readtrace.fix.compare import compare
from readtrace.simfs import force_unmount, mount
from readtrace.workloads import make_checkpoint
from readtrace.workloads.layout import read_layout

pytestmark = [pytest.mark.fuse, pytest.mark.ebpf]


def bpf_programs() -> int:
    """BPF programs this process holds open (the attached probes)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                count += "prog_type:" in f.read()
        except OSError:
            continue
    return count


def test_every_run_of_a_compare_is_recorded_under_one_probe_set(tmp_path):
    from workloads import ebpf_ready

    require(*fuse_available())
    require(*ebpf_ready())
    from readtrace.fix.recording import RunRecorder
    from readtrace.trace import load_trace

    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    path = make_checkpoint(src, 8)[0]
    layout = [t for t in read_layout(path) if t.nbytes]
    recorder = RunRecorder()
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=5, keep_cache=True):
            file = f"{mnt}/{path.name}"
            cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", "per-tensor-pread", file]
            result = compare(cmd, strategy="own-fd", files=[file], recorder=recorder, workdir=tmp_path / "work")
            held_after = bpf_programs()
    finally:
        force_unmount(mnt)
    assert held_after == 0  # compare closed the recorder: every probe detached
    assert result.diff.all_identical and result.diff.count == len(read_layout(path))
    assert [r.side for r in result.runs] == ["baseline", "fixed"]
    base, fixed = (load_trace(r.trace_path) for r in result.runs)
    assert [t.meta["probe_set_recording"] for t in (base, fixed)] == [1, 2]
    assert not set(base.events.pid) & set(fixed.events.pid)
    assert base.meta["lost_events"] == 0 == fixed.meta["lost_events"]
    for trace in (base, fixed):  # the loader's own preads (os.preadv): one per tensor at its offset, in each run
        calls = trace.calls()
        preads = calls[(calls.path == file) & calls.op.isin(["pread", "preadv"])]
        assert {(t.start, t.nbytes) for t in layout} <= set(zip(preads.offset, preads.ret, strict=True))
    assert result.side("baseline")[0].summary["bytes_read"] >= sum(t.nbytes for t in layout)


def test_the_probes_detach_while_the_last_traces_are_analysed():
    """compare's end: the recorder closes (each tracepoint's detach waits for an RCU grace period) in a
    background thread while the body analyses the traces, and is closed when the body ends; a close
    that fails is not swallowed."""
    import threading
    import time

    from readtrace.fix.recording import detaching

    class Recorder:
        def __init__(self, fails=False):
            self.closing, self.closed_by, self.fails = threading.Event(), None, fails

        def close(self):
            self.closing.set()
            time.sleep(0.2)
            self.closed_by = threading.current_thread()
            if self.fails:
                raise OSError("detach failed")

    recorder = Recorder()
    with detaching(recorder):
        assert recorder.closing.wait(10)  # the close runs while the body (the analysis) does
    assert recorder.closed_by not in (None, threading.current_thread())  # and has ended with it
    with pytest.raises(OSError, match="detach failed"), detaching(Recorder(fails=True)):
        pass
    with detaching(None):  # runs not recorded: nothing to close
        pass
