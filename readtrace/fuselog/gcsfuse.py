"""gcsfuse's ``--log-severity=trace`` log -> FUSE READ rows (schema.FUSE) and the inodes' names.

Where the lines come from (gcsfuse v3 + jacobsa/fuse, read from their sources):

- jacobsa/fuse ``Connection.debugLog`` prints ``Op 0x%08x %24s] %v``: the FUSE request's unique id,
  ``connection.go:LINE`` right-aligned in 24 columns, then ``<- `` + ``describeRequest(op)`` for a
  request (``ReadFile (inode 2, PID 77, handle 1, offset 0, 262144 bytes)``; ``PID`` is the requesting
  thread, as the FUSE header carries it) and ``-> `` + ``describeResponse(op)`` (``ReadFile ()``,
  ``LookUpInode (inode 2)``) or ``-> Error: "..."`` for its reply.
- gcsfuse hands that logger ``"fuse_debug: "`` as message prefix (cmd/mount.go) and writes it with
  slog (internal/logger): JSON ``{"timestamp":{"seconds":S,"nanos":N},"severity":"TRACE",
  "message":"fuse_debug: Op ...","mount-id":"..."}`` (the default) or text ``time="DD/MM/YYYY
  hh:mm:ss.micro" severity=TRACE message="fuse_debug: Op ..." mount-id=...``. The text time is
  local time on a 12-hour clock without AM/PM (Go layout ``02/01/2006 03:04:05.000000``): a jump back
  of more than 6 h is taken as the clock passing 12.
- Lines quoted in bug reports often keep only ``connection.go:420] <- ReadFile (...)``: no time and no
  op id. File order is then time order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from readtrace.trace.schema import FUSE_READ
from readtrace.validate import json_value

_INT64 = 1 << 63  # a number from the log at or past this fits no column of the trace
_READ = re.compile(r"<- ReadFile \(inode (\d+), PID (\d+), handle (\d+), offset (\d+), (\d+) bytes\)")
_OP = re.compile(r"Op 0x([0-9a-fA-F]+)\s")
_LOOKUP = re.compile(r'<- LookUpInode \(parent (\d+), name "((?:[^"\\]|\\.)*)"')
_LOOKUP_REPLY = re.compile(r"-> LookUpInode \(inode (\d+)\)")
_REPLY = re.compile(r"-> (?:ReadFile \(|Error: )")
_TEXT_TIME = re.compile(r'time="(\d\d)/(\d\d)/(\d{4}) (\d\d):(\d\d):(\d\d)\.(\d{6})"')
_TEXT_MESSAGE = re.compile(r'message="((?:[^"\\]|\\.)*)"')
_HALF_DAY_NS = 12 * 3600 * 10**9
ROOT_INODE = 1  # fuseops.RootInodeID


@dataclass
class GcsfuseLog:
    """What one log gave: READ rows (column lists), inode names, and the lines it could not use."""

    ts_ns: list[int] = field(default_factory=list)
    tid: list[int] = field(default_factory=list)
    unique: list[int] = field(default_factory=list)
    nodeid: list[int] = field(default_factory=list)
    fh: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    latency_ns: list[int] = field(default_factory=list)
    names: dict[int, tuple[int, str]] = field(default_factory=dict)  # inode -> (parent, name)
    lines: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    timed: bool = False  # the lines carried timestamps (else ts_ns is the line order)
    formats: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.offset)

    def fuse_columns(self) -> dict[str, list]:
        """The READ rows as schema.FUSE columns (connection 0: the log does not name the mount)."""
        n = len(self)
        return {"ts_ns": self.ts_ns, "pid": self.tid, "tid": self.tid, "connection": [0] * n,
                "unique": self.unique, "opcode": [FUSE_READ] * n, "nodeid": self.nodeid, "fh": self.fh,
                "offset": self.offset, "size": self.size, "reply_bytes": [-1] * n,
                "latency_ns": self.latency_ns, "daemon_tid": [0] * n}

    def path_of(self, inode: int) -> str | None:
        """The inode's path below the mount point from the LookUpInode replies, if the log has them."""
        parts, seen = [], set()
        while inode != ROOT_INODE:
            if inode not in self.names or inode in seen:
                return None
            seen.add(inode)
            inode, name = self.names[inode]
            parts.append(name)
        return "/".join(reversed(parts))


def _bad(log: GcsfuseLog, line: str) -> None:
    log.malformed += 1
    if len(log.malformed_examples) < 3:
        log.malformed_examples.append(line[:160])


class _Clock:
    """Text-format times (local, 12-hour, no AM/PM) -> monotonic-looking ns."""

    def __init__(self):
        self.last = None
        self.shift = 0

    def text(self, m: re.Match) -> int:
        day, month, year, hour, minute, sec, micro = (int(g) for g in m.groups())
        ns = int(datetime(year, month, day, hour % 12, minute, sec).timestamp()) * 10**9 + micro * 1000 + self.shift
        if self.last is not None and ns < self.last - _HALF_DAY_NS // 2:
            self.shift += _HALF_DAY_NS
            ns += _HALF_DAY_NS
        self.last = ns
        return ns


def _unquote(m: re.Match | None) -> str | None:
    """slog's text handler quotes the message with Go's strconv.Quote: JSON's escapes, mostly."""
    if m is None:
        return None
    try:
        return json.loads(f'"{m.group(1)}"')
    except ValueError:
        return m.group(1).replace('\\"', '"')


def _message(line: str, log: GcsfuseLog, clock: _Clock) -> tuple[str, int | None] | None:
    """(the log message, its time in ns or None); None for a JSON line that does not parse."""
    if line.startswith("{"):
        try:
            record = json_value(line)
            stamp = record.get("timestamp") or {}
            ts = int(stamp["seconds"]) * 10**9 + int(stamp.get("nanos", 0)) if stamp else None
            log.formats.add("json")
            return str(record.get("message", "")), ts
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            return None
    m = _TEXT_TIME.match(line)
    if m:
        log.formats.add("text")
        return _unquote(_TEXT_MESSAGE.search(line)) or line, clock.text(m)
    log.formats.add("plain")
    return line, None


def parse_lines(lines) -> GcsfuseLog:
    """Parse an iterable of log lines (str). Unusable ReadFile lines are counted, never fatal."""
    log, clock = GcsfuseLog(), _Clock()
    pending_read: dict[int, int] = {}  # op id -> row (its reply gives the latency)
    pending_lookup: dict[int, tuple[int, str]] = {}
    for line in lines:
        log.lines += 1
        if "ReadFile" not in line and "LookUpInode" not in line:
            continue
        got = _message(line.rstrip("\n"), log, clock)
        if got is None:
            _bad(log, line)
            continue
        text, ts = got
        op = _OP.search(text)
        op_id = int(op.group(1), 16) if op else 0  # 0: unknown (unique is u64 in the trace)
        m = _READ.search(text)
        if m:
            inode, tid, handle, offset, size = (int(g) for g in m.groups())
            if max(inode, tid, handle, offset, size, abs(ts or 0), op_id) >= _INT64:  # not a trace column's value
                _bad(log, line)
                continue
            if ts is not None:
                log.timed = True
            log.ts_ns.append(ts if ts is not None else len(log.offset))
            log.tid.append(tid)
            log.unique.append(op_id)
            log.nodeid.append(inode)
            log.fh.append(handle)
            log.offset.append(offset)
            log.size.append(size)
            log.latency_ns.append(0)
            if op_id >= 0 and ts is not None:
                pending_read[op_id] = len(log.offset) - 1
            continue
        if "<- ReadFile" in text:
            _bad(log, line)
            continue
        if op_id < 0:
            continue
        if ts is not None and _REPLY.search(text) and op_id in pending_read:
            row = pending_read.pop(op_id)
            log.latency_ns[row] = max(0, ts - log.ts_ns[row])
            continue
        lookup = _LOOKUP.search(text)
        if lookup:
            pending_lookup[op_id] = (int(lookup.group(1)), lookup.group(2).replace('\\"', '"'))
            continue
        reply = _LOOKUP_REPLY.search(text)
        if reply and op_id in pending_lookup:
            log.names[int(reply.group(1))] = pending_lookup.pop(op_id)
    return log
