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

_LINE = re.compile(r"(\d+) +(\d+)\.(\d{6}) (.*)")
_RETURN = r"(-?\d+|0x[0-9a-f]+|\?)(?:<(.*?)>)?(?: \w+ \(.*?\)| \(.*?\))?(?: <(\d+)\.(\d+)>)?$"
# one regex for a whole complete line (nearly all of them): thread, time, call, arguments, return, duration
_FULL = re.compile(r"(\d+) +(\d+)\.(\d{6}) (\w+)\((.*)\)\s+= " + _RETURN)
_CALL = re.compile(r"(\w+)\((.*)\)\s+= " + _RETURN)
_RESUMED = re.compile(r"<\.\.\. (\w+) resumed>(.*)")
_FD = re.compile(r"(-?\d+)(?:<(.*?)>(?:\(deleted\))?)?(?:, |$)")
_CLONE_FLAGS = re.compile(r"flags=(0x[0-9a-f]+|\d+)")
_MMAP = re.compile(r"(\w+), (\d+), (\w+), (\w+), (-?\d+)(?:<.*>)?, (\w+)$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')

_TEXT = ("comm", "op", "path")
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
        self._rows: list[tuple] = []
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
        pid = self.tgid.get(tid, tid)
        self._rows.append((ts, pid, tid, self.comm.get(pid), op, fd, of.id if of else 0,
                           path if path is not None else (of.path if of else None), offset, size, ret, latency, arg))

    def take(self):
        """The rows so far as a DataFrame (schema.EVENTS columns); starts afresh."""
        import numpy as np
        import pandas as pd

        rows, self._rows = self._rows, []
        if not rows:
            return pd.DataFrame(columns=COLUMNS)
        columns = {}
        for name, values in zip(COLUMNS, zip(*rows, strict=True), strict=True):
            columns[name] = np.array(values, dtype=object if name in _TEXT else np.int64)
        return pd.DataFrame(columns, copy=False)

    def __len__(self) -> int:
        return len(self._rows)

    # -- lines -----------------------------------------------------------------------------------
    def feed(self, line: str) -> None:
        self.lines += 1
        m = _FULL.match(line)
        if m is None:
            self._feed_split(line)
            return
        tid_s, sec, usec, name, args, ret_s, note, dsec, dusec = m.groups()
        ts = int(sec) * 1_000_000_000 + int(usec) * 1000 + self.clock_offset_ns
        self._call(ts, int(tid_s), name, args, ret_s, note, dsec, dusec)

    def _feed_split(self, line: str) -> None:
        """Lines that are not one whole call: unfinished/resumed halves, exits, signals."""
        m = _LINE.match(line)
        if m is None:
            self.unparsed += 1
            return
        tid = int(m.group(1))
        ts = int(m.group(2)) * 1_000_000_000 + int(m.group(3)) * 1000 + self.clock_offset_ns
        body = m.group(4).rstrip("\n")
        if body.endswith("<unfinished ...>"):
            head = body[:-len("<unfinished ...>")]
            self.pending[tid] = (ts, head[:-1] if head.endswith(" ") else head)
            return
        if body.startswith(("+++", "---")):
            if body.startswith(("+++ exited", "+++ killed")):
                self.fdtab.pop(tid, None)
            return
        r = _RESUMED.match(body) if body.startswith("<...") else None
        start = self.pending.pop(tid, None) if r else None
        c = _CALL.match(start[1] + r.group(2)) if start else None
        if c is None:
            self.unparsed += 1
            return
        self._call(start[0], tid, *c.groups())

    def _call(self, ts, tid, name, args, ret_s, note, dsec, dusec) -> None:
        if name == "pread64" or name == "read":  # the bulk of a trace: inline
            table = self.fdtab.get(tid)
            head, _, rest = args.partition(", ")
            got = table.get(int(head.partition("<")[0])) if table is not None and head[:1].isdigit() else None
            if got is not None and ret_s[:1] != "?":
                of = got[0]
                if of.path is None:
                    return
                ret = int(ret_s)
                latency = int(dsec) * 1_000_000_000 + int(dusec) * 1000 if dsec else 0
                if name == "read":
                    offset, size = of.pos, int(rest.rpartition(", ")[2])
                    if ret > 0 and of.pos >= 0:
                        of.pos += ret
                else:
                    _, size_s, offset_s = rest.rsplit(", ", 2)
                    offset, size = int(offset_s), int(size_s)
                pid = self.tgid.get(tid, tid)
                self._rows.append((ts, pid, tid, self.comm.get(pid), "pread" if name == "pread64" else "read",
                                   int(head.partition("<")[0]), of.id, of.path, offset, size, ret, latency, 0))
                return
        handler = self._handlers.get(name)
        if handler is None:
            return
        ret = UNKNOWN if ret_s == "?" else int(ret_s, 0)
        latency = int(dsec) * 1_000_000_000 + int(dusec) * 1000 if dsec else 0
        table = self.fdtab.get(tid)
        if table is None:  # a process or thread first seen here (the command itself, or a clone not yet returned)
            table = self.fdtab[tid] = {}
        try:
            handler(ts, tid, table, name, args, ret, note, latency)
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
        if of.path:  # as the eBPF recorder: offset = the requested offset, ret = the new position
            offset, _, whence = rest.rpartition(", ")
            self._row(ts, tid, "lseek", fd, of, offset=_int(offset), ret=ret, latency=latency, arg=_int(whence))

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
