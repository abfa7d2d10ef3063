"""The workloads with known answers, recorded once per backend, and the checks of a trace against
them, shared by every recorder's tests (eBPF: record/test_record.py, strace: ptrace/test_record_ptrace.py):
the same facts, whichever backend recorded them."""

import json
from collections.abc import Callable
from pathlib import Path

from workloads import make_data_file, shell_cmd, workload_cmd

MIB = 1 << 20
READ_OPS = ["read", "pread", "readv", "preadv"]
NAMES = ("pread_threads", "fork_shared", "dup_lseek", "vectored", "mmap_threads")
SIZES = {"mmap_threads": 64 * MIB}
SAME_FACTS = ("fork_shared", "dup_lseek", "vectored", "mmap_range", "files_table")  # what every backend records alike


def record_known(tmp: Path, record: Callable[[list[str], Path], object]):
    """(result, trace, truth, files): every workload in one ``sh -c``, recorded by ``record(cmd, out)``."""
    from readtrace.trace import load_trace

    cmds, files = [], {}
    for name in NAMES:
        files[name] = make_data_file(tmp / f"{name}.bin", SIZES.get(name, 4 * MIB))
        cmds.append(workload_cmd(name, files[name], tmp / f"{name}.json"))
    result = record(shell_cmd(cmds), tmp / "t.rtrace")
    truth = {name: json.loads((tmp / f"{name}.json").read_text()) for name in NAMES}
    return result, load_trace(result.trace_path), truth, files


def check_same_fact(recorded, fact: str) -> None:
    """One of SAME_FACTS in a ``record_known`` recording."""
    _result, trace, truth, files = recorded
    if fact == "files_table":
        check_files_table(trace, files)
    elif fact == "mmap_range":
        e = trace.events
        mmaps = e[(e.path == str(files["mmap_threads"])) & (e.op == "mmap")]
        assert len(mmaps) == 1 and mmaps.iloc[0]["size"] == 64 * MIB and mmaps.iloc[0].offset == 0
    else:
        {"fork_shared": check_fork_shared, "dup_lseek": check_dup_lseek,
         "vectored": check_vectored}[fact](trace, truth[fact], files[fact])


def reads_of(trace, path):
    e = trace.events
    return e[(e.path == str(path)) & e.op.isin(READ_OPS)]


def check_pread_threads(trace, t, path, *, merged_run: bool):
    """Two threads pread through one shared fd, the main thread through its own fd too: one open file
    description each, every call at its offset. ``merged_run``: the recorder merges the 4 consecutive
    4 KiB preads of ``run`` into one row of count 4 (eBPF, in the kernel); else each is its own row."""
    reads = reads_of(trace, path)
    assert set(reads.pid) == {t["pid"]} and t["thread_tid"] != t["main_tid"]

    def calls(g):
        return sorted(zip(g.offset, g["size"], g["count"] if merged_run else [1] * len(g), strict=True))

    by_tid = {tid: calls(g) for tid, g in reads.groupby("tid")}
    run = [(t["run"][0][0], 4 * 4096, 4)] if merged_run else [(o, s, 1) for o, s in t["run"]]
    assert by_tid[t["thread_tid"]] == sorted((o, s, 1) for o, s in t["thread_reads"])
    assert by_tid[t["main_tid"]] == sorted([(o, s, 1) for o, s in t["main_reads"] + t["fd2_reads"]] + run)
    assert (reads.ret == reads["size"]).all() and (reads.latency_ns > 0).all()
    shared, own = reads[reads.fd == t["fd"]], reads[reads.fd == t["fd2"]]
    assert shared.ofd.nunique() == 1 and own.ofd.nunique() == 1 and shared.ofd.iloc[0] != own.ofd.iloc[0]
    assert set(shared.tid) == {t["main_tid"], t["thread_tid"]}
    return shared


def check_fork_shared(trace, t, path):
    """A forked child reads through the open file description it inherited (offsets from its lseek)."""
    reads = reads_of(trace, path)
    assert set(reads.pid) == {t["pid"], t["child_pid"]}
    assert reads.ofd.nunique() == 1
    parent = reads[reads.pid == t["pid"]].sort_values("ts_ns")
    child = reads[reads.pid == t["child_pid"]].sort_values("ts_ns")
    assert list(zip(parent.op, parent.offset, parent["size"], strict=True)) == [("pread", 0, 4096), ("pread", 8192, 4096)]
    assert list(zip(child.op, child.offset, child["size"], strict=True)) == [("pread", 65536, 4096), ("read", 40960, 100)]
    forks = trace.events[(trace.events.op == "fork") & (trace.events.pid == t["pid"])]
    assert t["child_pid"] in set(forks.arg)


def check_dup_lseek(trace, t, path):
    """A dup'd fd shares the description; read() offsets follow lseek (offset: requested, ret: new)."""
    e = trace.events[trace.events.path == str(path)].sort_values("ts_ns")
    dup = e[e.op == "dup"]
    assert list(zip(dup.fd, dup.arg, strict=True)) == [(t["dup"], t["fd"])]
    reads = e[e.op == "read"]
    assert [list(r) for r in zip(reads.fd, reads.offset, reads["size"], strict=True)] == t["reads"]
    assert e[e.fd.isin([t["fd"], t["dup"]]) & (e.op != "open")].ofd.nunique() == 1
    seeks = e[e.op == "lseek"]
    assert list(zip(seeks.offset, seeks.arg, seeks.ret, strict=True)) == [(12288, 0, 12288), (100, 1, 13888)]


def check_vectored(trace, t, path):
    reads = reads_of(trace, path).sort_values("ts_ns")
    assert [list(r) for r in zip(reads.op, reads.offset, reads["size"], strict=True)] == t["reads"]
    assert (reads.ret == reads["size"]).all() and set(reads.fd) == {t["fd"]}


def check_files_table(trace, files):
    f = trace.files.set_index("path")
    for path in files.values():
        row = f.loc[str(path)]
        assert row["size"] == path.stat().st_size and row.fstype and row.mountpoint and row.ino > 0
