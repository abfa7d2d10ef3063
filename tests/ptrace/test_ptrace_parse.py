"""The strace parser on lines in strace 6.1's exact shapes (-f -ttt -T -y -s 0 -X raw): split calls,
padded pids, threads vs forks, dup/fcntl/close-on-exec, read offsets per open file description."""

from readtrace.ptrace.parse import StraceParser

LINES = """\
500   1700000000.000001 execve("/usr/bin/python3", [""...], 0x7ffd /* 20 vars */) = 0 <0.000100>
500   1700000000.000010 openat(-100</work>, "/data/m.bin", 0x80000) = 3</data/m.bin> <0.000010>
500   1700000000.000020 pread64(3</data/m.bin>, ""..., 4096, 8192) = 4096 <0.000020>
500   1700000000.000030 read(3</data/m.bin>, ""..., 100) = 100 <0.000005>
500   1700000000.000040 clone3({flags=0x3d0f00, child_tid=0x7f, parent_tid=0x7f, exit_signal=0, stack=0x7f, stack_size=0x7fff80, tls=0x7f} => {parent_tid=[501]}, 88) = 501 <0.000050>
501   1700000000.000050 read(3</data/m.bin>,  <unfinished ...>
500   1700000000.000055 lseek(3</data/m.bin>, 0, 0x1 <unfinished ...>
501   1700000000.000060 <... read resumed>""..., 50) = 50 <0.000010>
500   1700000000.000061 <... lseek resumed>) = 150 <0.000006>
500   1700000000.000070 fcntl(3</data/m.bin>, 0x406, 0) = 4</data/m.bin> <0.000003>
500   1700000000.000075 fcntl(4</data/m.bin>, 0x3) = 0x8000 (flags O_RDONLY|O_LARGEFILE) <0.000002>
500   1700000000.000080 mmap(NULL, 65536, 0x1, 0x2, 4</data/m.bin>, 0) = 0x7f0000000000 <0.000010>
500   1700000000.000090 dup2(3</data/m.bin>, 7</dev/null>) = 7</data/m.bin> <0.000003>
500   1700000000.000100 clone(child_stack=NULL, flags=0x1200000|17, child_tidptr=0x7f) = 502 <0.000300>
502   1700000000.000200 read(7</data/m.bin>, ""..., 10) = 10 <0.000004>
502   1700000000.000210 preadv2(7</data/m.bin>, [{iov_base=""..., iov_len=8}], 1, -1, 0) = 8 <0.000004>
500   1700000000.000300 read(3</data/m.bin>, ""..., 10) = 10 <0.000004>
500   1700000000.000310 fcntl(1</tmp/#123>(deleted), 0x3) = 0x1 <0.000002>
500   1700000000.000320 read(5<pipe:[1234]>, ""..., 10) = 10 <0.000004>
500   1700000000.000330 openat(-100</work>, "/nope", 0) = -1 ENOENT (No such file or directory) <0.000004>
502   1700000000.000400 exit_group(0)           = ?
502   1700000000.000410 +++ exited with 0 +++
500   1700000000.000500 this is not a strace line
"""


def _rows():
    p = StraceParser()
    for line in LINES.splitlines(keepends=True):
        p.feed(line)
    return p, p.take()


def test_offsets_follow_the_open_file_description_across_threads_dups_and_forks():
    p, df = _rows()
    reads = df[df.op.isin(["read", "pread", "preadv"])]
    got = list(zip(reads.tid, reads.op, reads.fd, reads.offset, reads["size"], strict=True))
    assert got == [
        (500, "pread", 3, 8192, 4096),  # pread: offset from the arguments, the file offset unchanged
        (500, "read", 3, 0, 100),
        (501, "read", 3, 100, 50),  # the thread shares the fd table: continues at 100 (split call joined)
        (502, "read", 7, 150, 10),  # the fork's dup2'd fd 7 shares the description (lseek said 150)
        (502, "preadv", 7, 160, 8),  # preadv2 at offset -1: the current offset, advanced
        (500, "read", 3, 168, 10),  # the parent sees its child's reads on the shared description
    ]
    assert reads.ofd.nunique() == 1 and (reads.path == "/data/m.bin").all()
    assert set(reads[reads.tid == 501].pid) == {500} and set(reads[reads.tid == 502].pid) == {502}
    assert p.unparsed == 1  # only the line that is not strace's


def test_calls_processes_and_mappings():
    _, df = _rows()
    assert df[df.op == "thread"].arg.tolist() == [501] and df[df.op == "fork"].arg.tolist() == [502]
    dups = df[df.op == "dup"]
    assert list(zip(dups.fd, dups.arg, strict=True)) == [(4, 3), (7, 3)]
    (mmap,) = df[df.op == "mmap"].itertuples()
    assert (mmap.fd, mmap.offset, mmap.size, mmap.path, mmap.arg) == (4, 0, 65536, "/data/m.bin", 0x7F0000000000)
    seek = df[df.op == "lseek"].iloc[0]
    assert (seek.offset, seek.ret, seek.arg, seek.ts_ns) == (0, 150, 1, 1700000000000055000)  # the call's start
    assert df[df.op == "exec"].path.tolist() == ["/usr/bin/python3"] and set(df.comm.dropna()) == {"python3"}
    assert df[df.op == "read"].latency_ns.tolist()[0] == 5000
    assert not df.path.isin(["/nope"]).any() and not df.path.fillna("").str.startswith("pipe:").any()
