"""Recorder pieces without probes: BTF reader, program assembly, record layout, decoder logic."""

import re

import numpy as np
import pytest
from conftest import require

from readtrace.record.btf import VMLINUX_BTF
from readtrace.record.decode import Decoder, _factorize_files, exit_status
from readtrace.record.probefiles import kind_numbers
from readtrace.record.program import BTF_TOKENS, CONSTANTS, SYSCALL_NUMBERS, build_source
from readtrace.record.records import EVENT_DTYPE, KIND, STR_EVENT_DTYPE, event_view, layout_asserts, str_view


@pytest.fixture(scope="module")
def btf():
    from readtrace.record.btf import VMLINUX_BTF, kernel_btf

    require(VMLINUX_BTF.exists(), "no kernel BTF (/sys/kernel/btf/vmlinux)")
    return kernel_btf()


def test_btf_reader_matches_the_x86_64_abi(btf):
    # struct pt_regs is user-visible ABI (ptrace), its layout is fixed on x86_64.
    assert [btf.offset("pt_regs", r) for r in ("r10", "r8", "si", "di", "orig_ax")] == [56, 72, 104, 112, 120]
    assert btf.offset("iovec", "iov_len") == 8
    assert btf.offset("fdtable", "max_fds") == 0 and btf.offset("fdtable", "fd") == 8


def test_btf_reader_flattens_anonymous_members_and_rejects_unknown(btf):
    from readtrace.record.btf import BTFError

    assert btf.offset("file", "f_pos") > 0  # inside anonymous unions on recent kernels
    with pytest.raises(BTFError):
        btf.offset("file", "no_such_member")
    with pytest.raises(BTFError):
        btf.offset("no_such_struct_xyz", "x")


def test_generated_program_has_every_token_substituted(btf):
    src = build_source(with_fuse=True)
    for token in [*BTF_TOKENS, *CONSTANTS, *SYSCALL_NUMBERS, "COALESCE", "WITH_FUSE", "SYSARG1_SLOT"]:
        assert not re.search(rf"\b{token}\b", src), token
    assert "#if 1" in src and "fuse_daemon_read" in src
    assert "#if 0" in build_source(with_fuse=False)


def test_record_layouts_match_the_header():
    assert EVENT_DTYPE.itemsize == 88 + 8 and STR_EVENT_DTYPE.itemsize == 352
    kinds = kind_numbers()
    assert kinds["PREAD"] == 2 and kinds["FUSE_DAEMON_READ"] == 32 and len(set(kinds.values())) == len(kinds)
    # every member offset Python reads is pinned in the compiled C, each probe file compiled once
    src = build_source(with_fuse=True) if VMLINUX_BTF.exists() else ""
    asserts = layout_asserts()
    assert "struct rt_event, daemon.fh) == 40" in asserts and "struct rt_str_event, open.flags) == 56" in asserts
    if src:
        assert asserts in src
        for guard in ("READTRACE_H", "COMMON", "APP", "SCHED", "PAGES", "PROC", "FUSE", "SYSCALLS"):
            name = guard if guard == "READTRACE_H" else f"READTRACE_{guard}_BPF_C"
            assert src.count(f"#define {name}\n") == 1, name  # each file compiled once
        assert "#include \"" not in src  # every local include expanded


def test_exit_status_decodes_wait_status():
    assert list(exit_status(np.array([7 << 8, 0, 9, 15 | 0x80]))) == [7, 0, 137, 143]


def test_factorize_files_is_exact_even_when_the_packed_key_collides():
    dev = np.array([1, 1, 2, 1], dtype=np.uint32)
    ino = np.array([10, 11, 10, 10], dtype=np.uint64)
    codes, keys, _ = _factorize_files(dev, ino)
    assert [keys[c] for c in codes] == [(1, 10), (1, 11), (2, 10), (1, 10)]
    # (dev 0, ino 1<<40) and (dev 1, ino 0) pack to the same key: must still be told apart
    codes, keys, _ = _factorize_files(np.array([0, 1], dtype=np.uint32), np.array([1 << 40, 0], dtype=np.uint64))
    assert [keys[c] for c in codes] == [(0, 1 << 40), (1, 0)]


def records(rows):
    """Ring records from (member, fields) pairs: the head fields and that union member's."""
    rec = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, (member, row) in enumerate(rows):
        view = event_view(rec[i:i + 1], member)
        for k, v in row.items():
            view[0][k] = v
    return rec


def test_fuse_join_send_daemon_read_end():
    d = Decoder(root_pid=100, cwd="/")
    top = 2**64 - 1
    rec = records([
        ("fuse", {"kind": KIND["FUSE_SEND"], "connection": 40, "unique": 7, "opcode": 15, "pid": 100, "tid": 101,
                  "ts_ns": 1000, "len": 80}),
        ("daemon", {"kind": KIND["FUSE_DAEMON_READ"], "connection": 40, "unique": 7, "opcode": 15, "pid": 100,
                    "tid": 101, "daemon_tid": 55, "nodeid": top - 1, "fh": top, "has_read_in": 1, "offset": 8192,
                    "size": 4096, "ts_ns": 1500}),
        ("fuse", {"kind": KIND["FUSE_END"], "connection": 40, "unique": 7, "len": 16 + 4096, "error": 0,
                  "opcode": -1, "ts_ns": 3000}),
        # a request of another process on the same connection: dropped
        ("fuse", {"kind": KIND["FUSE_SEND"], "connection": 40, "unique": 9, "opcode": 15, "pid": 999, "tid": 999,
                  "ts_ns": 1100}),
        ("fuse", {"kind": KIND["FUSE_END"], "connection": 40, "unique": 9, "len": 16, "error": 0, "ts_ns": 1200}),
    ])
    _app, _pages, rows = d.events(rec)
    assert rows == [{"ts_ns": 1000, "pid": 100, "tid": 101, "connection": 40, "unique": 7, "opcode": 15,
                     "nodeid": top - 1, "fh": top, "offset": 8192, "size": 4096, "reply_bytes": 4096,
                     "latency_ns": 2000, "daemon_tid": 55}]
    assert d.unfinished_fuse() == []


def open_records(opens):
    """strs ring records of opens: (ts_ns, struct file, ino, path)."""
    rec = np.zeros(len(opens), dtype=STR_EVENT_DTYPE)
    view = str_view(rec, "open")
    for i, (ts, ofd, ino, path) in enumerate(opens):
        rec[i]["ts_ns"], rec[i]["pid"], rec[i]["tid"], rec[i]["kind"] = ts, 100, 100, KIND["OPEN"]
        rec[i]["comm"], rec[i]["path"] = b"python", path.encode()
        view[i]["file"], view[i]["ino"], view[i]["dev"], view[i]["ret"], view[i]["i_size"] = ofd, ino, 40, 3, 4096
    return rec


def read_records(reads):
    """Ring records of preads without dev/ino (as the probes send them): (ts_ns, struct file)."""
    return records([("io", {"kind": KIND["PREAD"], "pid": 100, "tid": 100, "count": 1, "ts_ns": ts, "file": ofd,
                            "fd": 3, "size": 4096, "ret": 4096}) for ts, ofd in reads])


def test_forgetting_old_history_keeps_every_later_read_named():
    """A struct file address reused by opens of a, b, a, b ...: after forget_before(t) the history is
    one row per struct file in force at t plus later ones, and reads from t on are named as before."""
    d = Decoder(root_pid=100, cwd="/")
    files = {10: "/m/a", 11: "/m/b"}
    opens = [(1000 * i, 0xFFFF8000_00001000, 10 + i % 2, files[10 + i % 2]) for i in range(1, 200)]
    opens.append((500, 0xFFFF8000_00002000, 10, "/m/a"))  # another struct file, opened once, long before
    d.note_strs(open_records(opens))
    reads = [(1000 * i + 10, 0xFFFF8000_00001000) for i in range(150, 200)] + [(199_500, 0xFFFF8000_00002000)]
    before, _, _ = d.events(read_records(reads))
    d.forget_before(150_000)
    assert sum(len(f) for f in d._ofd_files) == 2 + 49  # in force at 150,000 (two struct files) + later opens
    after, _, _ = d.events(read_records(reads))
    assert list(after.path) == list(before.path)
    assert list(after.path[:3]) == ["/m/a", "/m/b", "/m/a"] and after.path.iloc[-1] == "/m/a"


def test_a_file_reopened_under_another_name_is_named_by_the_latest_open():
    """save_pretrained writes `.tmpXXXX`, renames it, and the loader opens the final name: the same
    (dev, ino) under two paths; the files table and the reads name it by the latest open."""
    d = Decoder(root_pid=100, cwd="/")
    ofd = 0xFFFF8000_00003000
    d.note_strs(open_records([(1000, ofd, 77, "/m/unet/.tmpab12"), (5000, ofd, 77, "/m/unet/model.safetensors")]))
    app, _, _ = d.events(read_records([(6000, ofd)]))
    assert d.files[(40, 77)].path == "/m/unet/model.safetensors"
    assert list(app.path) == ["/m/unet/model.safetensors"]


def test_until_idle_counts_checkpoint_like_files_by_name_only():
    from readtrace.fs.datafiles import maybe_data

    assert maybe_data("/models/model.pth", 10) and maybe_data("/data/shard-00001", 64 << 20)
    assert not maybe_data("/venv/lib/python3.11/site-packages/distutils-precedence.pth", 151)  # a .pth of code
    assert not maybe_data("/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so", 400 << 20)
    assert not maybe_data("/usr/lib/locale/locale-archive", 3 << 20) and not maybe_data("/data/small.json", 10)
