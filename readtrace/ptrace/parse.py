"""strace ``-f -ttt -T -y -s 0 -X raw`` output -> rows of the events table (schema.EVENTS).

strace shows each call with its thread, arguments and fd paths, not the kernel's open-file identity
or a read()'s offset: both are rebuilt here. Every open makes an open file description (our own id,
never reused); dup/dup2/dup3/fcntl(F_DUPFD) share it; a fork copies the fd table (its fds share the
parent's descriptions, hence their offsets); threads and CLONE_FILES share the table itself; exec
drops close-on-exec fds. read/readv advance the description's offset, lseek sets it, pread/preadv
name theirs. The process (tgid) of a thread follows from clone's CLONE_THREAD.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLONE_FILES, CLONE_THREAD = 0x400, 0x10000
O_CLOEXEC = 0x80000
F_DUPFD, F_SETFD, F_DUPFD_CLOEXEC = 0, 2, 0x406
UNKNOWN = -1

_LINE = re.compile(r"(\d+) (\d+)\.(\d{6}) (.*)")
_CALL = re.compile(r"(\w+)\((.*)\)\s+= (-?\d+|0x[0-9a-f]+|\?)(?:<(.*?)>)?(?: \w+ \(.*?\)| \(.*?\))?(?: <(\d+)\.(\d+)>)?$")
_RESUMED = re.compile(r"<\.\.\. (\w+) resumed>(.*)")
_FD = re.compile(r"(-?\d+)(?:<(.*?)>(?:\(deleted\))?)?(?:, |$)")
_CLONE_FLAGS = re.compile(r"flags=(0x[0-9a-f]+|\d+)")
_MMAP = re.compile(r"(\w+), (\d+), (\w+), (\w+), (-?\d+)(?:<.*>)?, (\w+)$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')

COLUMNS = ("ts_ns", "pid", "tid", "comm", "op", "fd", "ofd", "path", "offset", "size", "ret", "latency_ns",
           "arg")


@dataclass
class OpenFile:
    """One open file description: its id, path (None: not a file) and offset (-1 unknown)."""

    id: int
    path: str | None
    pos: int = 0


def _int(text: str) -> int:
    return int(text, 0)


def _file_path(annotation: str | None) -> str | None:
    """The -y annotation of a regular file path; pipes, sockets, anon inodes are not files."""
    return annotation if annotation and annotation.startswith("/") else None


class StraceParser:
    """Feed lines (``feed``); ``take()`` returns the rows so far as columns and starts afresh."""

    def __init__(self, clock_offset_ns: int = 0):
        self.clock_offset_ns = clock_offset_ns  # added to strace's wall-clock times (-> monotonic)
        self.tgid: dict[int, int] = {}  # tid -> process; a tid first seen without a clone: a process
        self.fdtab: dict[int, dict[int, tuple[OpenFile, bool]]] = {}  # tid -> its (maybe shared) fd table
        self.comm: dict[int, str] = {}
        self.next_id = 1
        self.pending: dict[int, tuple[int, str]] = {}  # tid -> (ts, start of an unfinished call)
        self.lines = 0
        self.unparsed = 0
        self.paths: set[str] = set()  # every file path seen (for the files table)
        self._rows = {c: [] for c in COLUMNS}
        self._handlers = {
            "open": self._open, "openat": self._open, "openat2": self._open, "close": self._close,
            "dup": self._dup, "dup2": self._dup, "dup3": self._dup, "fcntl": self._fcntl,
            "read": self._read, "readv": self._read, "pread64": self._pread, "preadv": self._pread,
            "preadv2": self._pread, "mmap": self._mmap, "munmap": self._munmap, "lseek": self._lseek,
            "fadvise64": self._fadvise, "readahead": self._readahead, "clone": self._clone,
            "clone3": self._clone, "fork": self._clone, "vfork": self._clone, "execve": self._exec,
            "exit_group": self._exit,
        }

    # -- rows ------------------------------------------------------------------------------------
    def _row(self, ts, tid, op, fd=UNKNOWN, of: OpenFile | None = None, offset=UNKNOWN, size=UNKNOWN, ret=0,
             latency=0, arg=0, path=None) -> None:
        r = self._rows
        r["ts_ns"].append(ts)
        r["pid"].append(self.tgid.get(tid, tid))
        r["tid"].append(tid)
        r["comm"].append(self.comm.get(self.tgid.get(tid, tid)))
        r["op"].append(op)
        r["fd"].append(fd)
        r["ofd"].append(of.id if of else 0)
        r["path"].append(path if path is not None else (of.path if of else None))
        r["offset"].append(offset)
        r["size"].append(size)
        r["ret"].append(ret)
        r["latency_ns"].append(latency)
        r["arg"].append(arg)

    def take(self) -> dict[str, list]:
        rows, self._rows = self._rows, {c: [] for c in COLUMNS}
        return rows

    def __len__(self) -> int:
        return len(self._rows["ts_ns"])

    # -- lines -----------------------------------------------------------------------------------
    def feed(self, line: str) -> None:
        self.lines += 1
        m = _LINE.match(line)
        if m is None:
            self.unparsed += 1
            return
        tid = int(m.group(1))
        ts = int(m.group(2)) * 1_000_000_000 + int(m.group(3)) * 1000 + self.clock_offset_ns
        body = m.group(4)
        if body.endswith("<unfinished ...>"):
            head = body[:-len("<unfinished ...>")]
            self.pending[tid] = (ts, head[:-1] if head.endswith(" ") else head)
            return
        if body.startswith("<..."):
            r = _RESUMED.match(body)
            start = self.pending.pop(tid, None)
            if r is None or start is None:
                self.unparsed += 1
                return
            ts, head = start
            body = head + r.group(2)
        elif body.startswith(("+++", "---")):
            if body.startswith(("+++ exited", "+++ killed")):
                self.fdtab.pop(tid, None)
            return
        c = _CALL.match(body)
        if c is None:
            self.unparsed += 1
            return
        handler = self._handlers.get(c.group(1))
        if handler is None:
            return
        ret_text = c.group(3)
        ret = UNKNOWN if ret_text == "?" else _int(ret_text)
        latency = int(c.group(5)) * 1_000_000_000 + int(c.group(6)) * 1000 if c.group(5) else 0
        table = self.fdtab.get(tid)
        if table is None:  # a thread strace attached before its clone returned in the parent
            table = self.fdtab[tid] = {}
        try:
            handler(ts, tid, table, c.group(1), c.group(2), ret, c.group(4), latency)
        except (ValueError, IndexError):  # arguments in a shape we do not know: counted, never fatal
            self.unparsed += 1

    # -- fds -------------------------------------------------------------------------------------
    def _lookup(self, table, fd: int, annotation: str | None) -> OpenFile:
        """The description behind ``fd``; one made up (offset unknown) for fds opened before tracing."""
        got = table.get(fd)
        if got is None:
            got = (self._new(_file_path(annotation), UNKNOWN), False)
            table[fd] = got
        return got[0]

    def _new(self, path: str | None, pos: int = 0) -> OpenFile:
        of = OpenFile(self.next_id, path, pos)
        self.next_id += 1
        if path:
            self.paths.add(path)
        return of

    def _fd_arg(self, args: str) -> tuple[int, str | None, str]:
        m = _FD.match(args)
        if m is None:
            return UNKNOWN, None, args
        return int(m.group(1)), m.group(2), args[m.end():]

    def _open(self, ts, tid, table, name, args, ret, annotation, latency):
        if ret < 0:
            return
        parts = args.rsplit(", ", 2 if name != "openat2" else 1)
        flags = 0
        if name == "openat2":
            f = _CLONE_FLAGS.search(parts[-2] if len(parts) > 1 else "")
            flags = _int(f.group(1)) if f else 0
        else:  # open(path, flags[, mode]) / openat(dirfd, path, flags[, mode])
            for p in parts[1:]:
                if p.startswith("0x") or p.isdigit():
                    flags = _int(p)
                    break
        of = self._new(_file_path(annotation))
        table[ret] = (of, bool(flags & O_CLOEXEC))
        if of.path:
            self._row(ts, tid, "open", ret, of, ret=ret, latency=latency, arg=flags)

    def _close(self, ts, tid, table, name, args, ret, annotation, latency):
        fd, _, _ = self._fd_arg(args)
        got = table.pop(fd, None)
        if got is not None and got[0].path:
            self._row(ts, tid, "close", fd, got[0], ret=ret, latency=latency)

    def _share(self, ts, tid, table, old: int, old_note, new: int, cloexec: bool, latency):
        of = self._lookup(table, old, old_note)
        table[new] = (of, cloexec)
        if of.path:
            self._row(ts, tid, "dup", new, of, ret=new, latency=latency, arg=old)

    def _dup(self, ts, tid, table, name, args, ret, annotation, latency):
        if ret < 0:
            return
        old, note, rest = self._fd_arg(args)
        flags = _int(rest.rsplit(", ", 1)[-1]) if name == "dup3" and rest else 0
        self._share(ts, tid, table, old, note, ret, bool(flags & O_CLOEXEC), latency)

    def _fcntl(self, ts, tid, table, name, args, ret, annotation, latency):
        fd, note, rest = self._fd_arg(args)
        cmd, _, value = rest.partition(", ")
        cmd = _int(cmd) if cmd else UNKNOWN
        if ret >= 0 and cmd in (F_DUPFD, F_DUPFD_CLOEXEC):
            self._share(ts, tid, table, fd, note, ret, cmd == F_DUPFD_CLOEXEC, latency)
        elif ret >= 0 and cmd == F_SETFD and fd in table:
            table[fd] = (table[fd][0], bool(_int(value or "0") & 1))

    def _read(self, ts, tid, table, name, args, ret, annotation, latency):
        fd, note, rest = self._fd_arg(args)
        of = self._lookup(table, fd, note)
        if not of.path:
            return
        offset = of.pos
        if ret > 0 and of.pos >= 0:
            of.pos += ret
        size = _int(rest.rsplit(", ", 1)[-1]) if name == "read" else max(ret, 0)
        self._row(ts, tid, name, fd, of, offset=offset, size=size, ret=ret, latency=latency)

    def _pread(self, ts, tid, table, name, args, ret, annotation, latency):
        fd, note, rest = self._fd_arg(args)
        of = self._lookup(table, fd, note)
        if not of.path:
            return
        tail = rest.rsplit(", ", 3 if name == "preadv2" else 2)
        offset = _int(tail[-2] if name == "preadv2" else tail[-1])
        if offset == -1:  # preadv2 at the current offset, which it advances
            offset = of.pos
            if ret > 0 and of.pos >= 0:
                of.pos += ret
        size = _int(tail[-2]) if name == "pread64" else max(ret, 0)
        self._row(ts, tid, "pread" if name == "pread64" else "preadv", fd, of, offset=offset, size=size, ret=ret,
                  latency=latency)

    def _lseek(self, ts, tid, table, name, args, ret, annotation, latency):
        fd, note, rest = self._fd_arg(args)
        of = self._lookup(table, fd, note)
        if ret >= 0:
            of.pos = ret
        if of.path:
            self._row(ts, tid, "lseek", fd, of, offset=ret, ret=ret, latency=latency,
                      arg=_int(rest.rsplit(", ", 1)[-1]))

    def _mmap(self, ts, tid, table, name, args, ret, annotation, latency):
        m = _MMAP.match(args)
        if m is None or ret < 0 or int(m.group(5)) < 0:
            return
        fd = int(m.group(5))
        of = self._lookup(table, fd, None)
        if of.path:
            self._row(ts, tid, "mmap", fd, of, offset=_int(m.group(6)), size=int(m.group(2)), ret=ret,
                      latency=latency, arg=ret)

    def _munmap(self, ts, tid, table, name, args, ret, annotation, latency):
        addr, _, length = args.partition(", ")
        self._row(ts, tid, "munmap", size=_int(length or "0"), ret=ret, latency=latency, arg=_int(addr))

    def _fadvise(self, ts, tid, table, name, args, ret, annotation, latency):
        fd, note, rest = self._fd_arg(args)
        of = self._lookup(table, fd, note)
        offset, size, advice = (_int(x) for x in rest.split(", ")[:3])
        if of.path:
            self._row(ts, tid, "fadvise", fd, of, offset=offset, size=size, ret=ret, latency=latency, arg=advice)

    def _readahead(self, ts, tid, table, name, args, ret, annotation, latency):
        fd, note, rest = self._fd_arg(args)
        of = self._lookup(table, fd, note)
        offset, size = (_int(x) for x in rest.split(", ")[:2])
        if of.path:
            self._row(ts, tid, "readahead", fd, of, offset=offset, size=size, ret=ret, latency=latency)

    def _clone(self, ts, tid, table, name, args, ret, annotation, latency):
        if ret <= 0:
            return
        f = _CLONE_FLAGS.search(args)
        flags = _int(f.group(1).split("|")[0]) if f and name in ("clone", "clone3") else 0
        pid = self.tgid.get(tid, tid)
        if flags & CLONE_THREAD:
            self.tgid[ret] = pid
            self.fdtab[ret] = table
            self._row(ts, tid, "thread", ret=ret, arg=ret)
            return
        self.tgid[ret] = ret
        self.fdtab[ret] = table if flags & CLONE_FILES else dict(table)
        self.comm[ret] = self.comm.get(pid)
        self._row(ts, tid, "fork", ret=ret, arg=ret)

    def _exec(self, ts, tid, table, name, args, ret, annotation, latency):
        if ret < 0:
            return
        m = _QUOTED.match(args)
        path = m.group(1) if m else None
        for fd in [fd for fd, (_, cloexec) in table.items() if cloexec]:
            del table[fd]
        pid = self.tgid.get(tid, tid)
        if path:
            self.comm[pid] = path.rsplit("/", 1)[-1][:15]
        self._row(ts, tid, "exec", ret=ret, latency=latency, path=path)

    def _exit(self, ts, tid, table, name, args, ret, annotation, latency):
        code = args.strip()
        self._row(ts, tid, "exit", arg=_int(code) if code.lstrip("-").isdigit() else 0)
