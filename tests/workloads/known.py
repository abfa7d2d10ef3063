"""Checks of a trace against the workloads' known answers, shared by every recorder's tests (eBPF:
test_record.py, strace: test_record_ptrace.py): the same facts, whichever backend recorded them."""

READ_OPS = ["read", "pread", "readv", "preadv"]


def reads_of(trace, path):
    e = trace.events
    return e[(e.path == str(path)) & e.op.isin(READ_OPS)]


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
