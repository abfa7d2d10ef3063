"""The critical path's own time the union of the data waits hides (issue 21): where several tasks read,
``wall - data_wait_s`` charges only the time no task waited on data, so the fixed prediction of a fork
pool left out the time a worker computed while another waited (rclone 256 MiB fork pool: predicted
2.10 s, measured 2.77 s). A fixed load still pays it; a load with one reader is predicted as before."""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import lab_mount, require

from readtrace.analyze.views.criticalpath import hidden_s

S = 1_000_000_000


def _spans(rows: dict[int, tuple[float, float, float, float]]) -> pd.DataFrame:
    """Per tid: (first s, last s, cpu s, runq s) as timesplit's task spans (ns)."""
    return pd.DataFrame({tid: {"first_ns": int(f * S), "last_ns": int(last * S), "cpu_ns": cpu * S, "runq_ns": q * S}
                         for tid, (f, last, cpu, q) in rows.items()}).T


def _waits(rows: list[tuple[int, float, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start ns, end ns, tid) of waits given as (tid, start s, end s)."""
    tid, start, end = zip(*rows, strict=True)
    return np.array([int(s * S) for s in start]), np.array([int(e * S) for e in end]), np.array(tid)


def test_a_worker_computing_while_another_waits_is_hidden():
    # parent 1 forks 2 and 3 at 2 s; 2 reads then computes 1.5 s, 3 computes 1.5 s then reads: the
    # union of their waits covers the whole fan-out, yet each worker spends 1.5 s of its own
    spans = _spans({1: (0, 6, 1.0, 0.0), 2: (2, 5, 1.4, 0.1), 3: (2, 5, 1.5, 0.0)})
    start, end, tid = _waits([(2, 2.0, 3.5), (3, 3.5, 5.0)])
    assert hidden_s(spans, start, end, tid) == pytest.approx(1.5)


def test_the_fan_outs_time_without_a_data_wait_is_charged_once():
    # both workers compute 0.5 s at once, after their reads: the union's gap already holds it
    spans = _spans({1: (0, 6, 1.0, 0.0), 2: (2, 5, 0.5, 0.0), 3: (2, 5, 0.5, 0.0)})
    start, end, tid = _waits([(2, 2.0, 4.5), (3, 2.0, 4.5)])
    assert hidden_s(spans, start, end, tid) == 0.0
    # 0.8 s own in the slowest: 0.3 s of it lay under the other's wait
    spans.loc[3, "cpu_ns"] = 0.8 * S
    assert hidden_s(spans, start, end, tid) == pytest.approx(0.3)


def test_the_parents_own_time_inside_the_fan_out():
    # a main thread that ran 3.5 s of a 4 s life, 1 s of it outside its reader threads: 2.5 s inside
    spans = _spans({1: (0, 4, 3.5, 0.0), 2: (1, 4, 0.1, 0.0), 3: (1, 4, 0.1, 0.0)})
    start, end, tid = _waits([(1, 1.0, 2.0), (2, 1.5, 3.0), (3, 2.5, 4.0)])
    assert hidden_s(spans, start, end, tid) == pytest.approx(2.5)


def test_one_reader_or_no_scheduler_view_hides_nothing():
    spans = _spans({1: (0, 6, 1.0, 0.0), 2: (2, 5, 1.5, 0.0)})
    start, end, tid = _waits([(2, 2.0, 5.0), (2, 5.0, 5.0)])
    assert hidden_s(spans, start, end, tid) == 0.0  # one task waited
    spans = _spans({1: (0, 6, 1.0, 0.0), 2: (2, 5, 1.5, 0.0), 3: (2, 5, 1.5, 0.0)})
    start, end, tid = _waits([(2, 2.0, 3.5), (3, 3.5, 5.0)])
    assert hidden_s(spans.drop(columns=["cpu_ns", "runq_ns"]), start, end, tid) == 0.0


def test_a_lever_pays_the_hidden_time_and_the_load_as_recorded_does_not():
    from readtrace.analyze.storage.levers import load_with

    model = {"recorded": 8.0, "hidden": 0.4, "sequential": 1.0, "prefetch": 2.0, "profile": "nfs", "latency_ms": 20.0}
    assert load_with(10.0, model, ("recorded",))[0] == pytest.approx(10.0)
    assert load_with(10.0, model, ("sequential",))[0] == pytest.approx(10.0 - 8.0 + 0.4 + 1.0)
    del model["hidden"]  # a model kept in a fix run's summary before it: as before
    assert load_with(10.0, model, ("prefetch",))[0] == pytest.approx(4.0)


# Two forked workers, each reading half the file on an fd of its own: the first reads then burns BURN
# s of CPU, the second burns first, so the union of their waits covers the CPU of both. "single": the
# parent reads it all, then burns.
STAGGERED = """
import os, sys, time
from multiprocessing import get_context

PATH, BURN, MODE = sys.argv[1], float(sys.argv[2]), sys.argv[3]


def burn():
    end = time.process_time() + BURN
    while time.process_time() < end:
        pass


def read(lo, hi):
    fd = os.open(PATH, os.O_RDONLY)
    for off in range(lo, hi, 1 << 20):
        os.pread(fd, min(1 << 20, hi - off), off)
    os.close(fd)


def work(i, barrier, size):
    barrier.wait()
    if i:
        burn()
    read(i * size // 2, (i + 1) * size // 2)
    if not i:
        burn()


if __name__ == "__main__":
    size = os.path.getsize(PATH)
    if MODE == "single":
        read(0, size)
        burn()
        sys.exit()
    ctx = get_context("fork")
    barrier = ctx.Barrier(2)
    workers = [ctx.Process(target=work, args=(i, barrier, size)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
"""
BURN = 0.5
SIZE = 16 << 20


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """{"forked", "single"}: the staggered load recorded cold on the lab mount (nfs, 20 ms a request)."""
    pytest.importorskip("readtrace.record", reason="the recorder is not available")
    require(os.geteuid() == 0, "recording needs root")
    from readtrace.analyze import analyze
    from readtrace.pagecache.evict import evict
    from readtrace.record import record_command
    from readtrace.trace import load_trace

    tmp = tmp_path_factory.mktemp("criticalpath")
    script = tmp / "staggered.py"
    script.write_text(STAGGERED)

    def fill(src):
        (src / "weights.bin").write_bytes(os.urandom(SIZE))
        return src / "weights.bin"

    out = {}
    with lab_mount(tmp, fill, profile="nfs", latency_ms=20.0) as (mnt, ck):
        for mode in ("forked", "single"):
            evict([str(ck)])
            result = record_command([sys.executable, str(script), str(mnt / ck.name), str(BURN), mode],
                                    tmp / f"{mode}.rtrace", quiet=True)
            out[mode] = analyze(load_trace(result.trace_path))
    return out


@pytest.mark.ebpf
@pytest.mark.fuse
@pytest.mark.slow
def test_a_fork_pools_fixed_prediction_keeps_the_workers_own_time(recorded):
    a = recorded["forked"]
    t, tasks = a.summary.time, a.tasks
    workers = tasks[(tasks["pid"] != a.meta["pid"]) & (tasks["io_wait_s"] > 0)]
    assert len(workers) == 2 and workers["cpu_s"].max() >= 0.5 * BURN, tasks.to_dict("records")
    # what the union covered of the workers' own time: the shorter of a burn and a worker's read
    covered = min(BURN, float(workers["io_wait_s"].min()))
    assert covered >= 0.2, tasks.to_dict("records")  # the case is one: a read overlaps the other's burn
    assert t.besides_hidden_s >= 0.5 * covered, (t, tasks.to_dict("records"))
    p = a.summary.prediction
    # the fixed load's time besides its waits: the critical path's, not the wall less the union
    assert p.predicted_fixed_s - _fixed_io_s(a) == pytest.approx(a.summary.wall_s - t.data_wait_s + t.besides_hidden_s)


@pytest.mark.ebpf
@pytest.mark.fuse
@pytest.mark.slow
def test_a_single_readers_fixed_prediction_is_as_before(recorded):
    a = recorded["single"]
    assert a.summary.time.besides_hidden_s == 0.0
    p = a.summary.prediction
    assert p.predicted_fixed_s == a.summary.wall_s - a.summary.time.data_wait_s + _fixed_io_s(a)


def _fixed_io_s(a) -> float:
    """The fixed I/O the summary's prediction charged (the own mount's model, as analyze ran it)."""
    from readtrace.analyze.storage.whatif import mount_profile, what_if

    return what_if(a, [mount_profile(a)], recorded=False)[0].predicted_fixed_io_s
