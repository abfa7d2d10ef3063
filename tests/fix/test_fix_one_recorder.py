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


def test_the_probes_attach_and_detach_while_traces_are_analysed():
    """A recorded trace's analysis at compare's start, the last traces' at its end: the probes compile
    and attach (``attaching``) or detach (``detaching``: each tracepoint waits for an RCU grace period)
    in a background thread meanwhile, done when the body ends; an error of theirs is not swallowed."""
    import threading
    import time

    from readtrace.fix.recording import attaching, detaching

    class Recorder:
        def __init__(self, fails=False):
            self.started, self.done_by, self.fails = threading.Event(), None, fails

        def attach(self):
            self.close()

        def close(self):
            self.started.set()
            time.sleep(0.2)
            self.done_by = threading.current_thread()
            if self.fails:
                raise OSError("bcc failed")

    for meanwhile in (attaching, detaching):
        recorder = Recorder()
        with meanwhile(recorder):
            assert recorder.started.wait(10)  # it runs while the body (the analysis) does
        assert recorder.done_by not in (None, threading.current_thread())  # and has ended with it
        with pytest.raises(OSError, match="bcc failed"), meanwhile(Recorder(fails=True)):
            pass
        with meanwhile(None):  # runs not recorded: nothing to do
            pass
