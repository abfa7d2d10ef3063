"""The scheduler view's per-thread totals (probes/sched.bpf.c, the trace's meta["sched"]) up to a
process's exit: the exit of a process's last thread untraces it before its final context switch, which
then counted nothing, so a forked worker that computed until it exited lost that stretch (0-0.5 s of a
0.5 s burn): the critical path's own time of a fork pool (analyze/views/criticalpath.py) reads it."""

import sys

import pandas as pd
import pytest
from conftest import require
from workloads import ebpf_ready

pytestmark = pytest.mark.ebpf

# a forked child burns CPU until it exits, with no syscall between (no context switch of its own)
BURN_THEN_EXIT = """
import os, time
pid = os.fork()
if pid == 0:
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_process_is_accounted_up_to_its_exit(tmp_path):
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command
    from readtrace.trace import load_trace

    trace = load_trace(record_command([sys.executable, "-c", BURN_THEN_EXIT], tmp_path / "t.rtrace",
                                      quiet=True).trace_path)
    sched = pd.DataFrame(trace.meta["sched"]).set_index("tid")
    child = next(int(c) for c in trace.others.loc[trace.others["op"] == "fork", "arg"])
    exit_ns = int(trace.others.loc[(trace.others["op"] == "exit") & (trace.others["tid"] == child), "ts_ns"].iloc[0])
    # its totals run to its exit, not to its last context switch (1.5-500 ms before it, before)
    assert 0 <= exit_ns - int(sched.loc[child, "last_ns"]) < 1_000_000, sched.loc[child]
    assert sched.loc[child, "cpu_ns"] >= 0.1e9, sched.loc[child]
