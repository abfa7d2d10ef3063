"""numpy views of the probe records in probes/readtrace.h: a head plus one union member per kind.

``EVENT_DTYPE`` is what the ring and the spool hold (the ring's 8-byte record header, the head, the
union as raw bytes); ``event_view(rec, "io")`` reinterprets records of one kind as that member's
fields (a view, no copy). ``layout_asserts()`` is C the loader appends to the probes, so the compiler
checks every offset Python reads.
"""

from __future__ import annotations

import re

import numpy as np

from readtrace.record.probefiles import HEADER, kind_numbers, probe_text

KIND = kind_numbers()

RING_HEADER = [("hdr_len", "<u4"), ("hdr_pgoff", "<u4")]  # struct bpf_ringbuf_hdr, in front in the ring
HEAD = [("ts_ns", "<u8"), ("pid", "<u4"), ("tid", "<u4"), ("count", "<u4"), ("kind", "<u2"), ("head_pad", "<u2")]
# struct rt_event's union members (field lists in declaration order; "pad" fields are not asserted)
EVENT_MEMBERS = {
    "io": [("file", "<u8"), ("ino", "<u8"), ("offset", "<i8"), ("size", "<i8"), ("ret", "<i8"),
           ("latency_ns", "<u8"), ("arg", "<i8"), ("fd", "<i4"), ("dev", "<u4")],
    "exit": [("wait_status", "<i8"), ("group_dead", "<u4"), ("pad", "<u4")],
    "wait": [("file", "<u8"), ("ino", "<u8"), ("latency_ns", "<u8"), ("dev", "<u4"), ("in_kind", "<u2"),
             ("pad", "<u2")],
    "pages": [("mapping", "<u8"), ("ino", "<u8"), ("first", "<u8"), ("npages", "<u8"), ("dev", "<u4"),
              ("pad", "<u4")],
    "fuse": [("unique", "<u8"), ("len", "<i8"), ("error", "<i4"), ("connection", "<u4"), ("opcode", "<i4"),
             ("pad", "<u4")],
    "daemon": [("unique", "<u8"), ("nodeid", "<u8"), ("fh", "<u8"), ("offset", "<u8"), ("size", "<u4"),
               ("connection", "<u4"), ("opcode", "<u4"), ("daemon_tid", "<u4"), ("has_read_in", "<u4"),
               ("pad", "<u4")],
}
# struct rt_str_event's union members; comm and path follow the union
STR_MEMBERS = {
    "open": [("file", "<u8"), ("ino", "<u8"), ("i_size", "<i8"), ("ret", "<i8"), ("flags", "<i8"),
             ("latency_ns", "<u8"), ("dev", "<u4"), ("pad", "<u4")],
    "task": [("id", "<u4"), ("inner_id", "<u4")],
}
STR_TAIL = [("comm", "S16"), ("path", "S256")]


def _size(fields) -> int:
    return np.dtype(fields).itemsize


_HEAD_SIZE = _size(HEAD)
_EVENT_UNION = max(_size(f) for f in EVENT_MEMBERS.values())
_STR_UNION = max(_size(f) for f in STR_MEMBERS.values())


def _dtype(parts: list[tuple[int, list]], itemsize: int) -> np.dtype:
    """One dtype from (offset, fields) parts, fields packed from each offset."""
    names, formats, offsets = [], [], []
    for start, fields in parts:
        at = start
        for name, fmt in fields:
            names.append(name)
            formats.append(fmt)
            offsets.append(at)
            at += np.dtype(fmt).itemsize
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})


_RING = _size(RING_HEADER)
EVENT_SIZE = _RING + _HEAD_SIZE + _EVENT_UNION
EVENT_DTYPE = _dtype([(0, RING_HEADER), (_RING, HEAD), (_RING + _HEAD_SIZE, [("body", f"V{_EVENT_UNION}")])],
                     EVENT_SIZE)
EVENT_VIEWS = {m: _dtype([(0, RING_HEADER), (_RING, HEAD), (_RING + _HEAD_SIZE, f)], EVENT_SIZE)
               for m, f in EVENT_MEMBERS.items()}
_STR_TAIL_AT = _HEAD_SIZE + _STR_UNION
STR_EVENT_SIZE = _STR_TAIL_AT + _size(STR_TAIL)
STR_EVENT_DTYPE = _dtype([(0, HEAD), (_HEAD_SIZE, [("body", f"V{_STR_UNION}")]), (_STR_TAIL_AT, STR_TAIL)],
                         STR_EVENT_SIZE)
STR_VIEWS = {m: _dtype([(0, HEAD), (_HEAD_SIZE, f), (_STR_TAIL_AT, STR_TAIL)], STR_EVENT_SIZE)
             for m, f in STR_MEMBERS.items()}


def event_view(rec: np.ndarray, member: str) -> np.ndarray:
    """Records of ``EVENT_DTYPE`` read as ``struct rt_event``'s ``member`` (no copy)."""
    return rec.view(EVENT_VIEWS[member])


def str_view(rec: np.ndarray, member: str) -> np.ndarray:
    """Records of ``STR_EVENT_DTYPE`` read as ``struct rt_str_event``'s ``member`` (no copy)."""
    return rec.view(STR_VIEWS[member])


def layout_asserts() -> str:
    """C _Static_asserts pinning every offset and size above to the structs in readtrace.h."""
    lines = []

    def check(struct: str, member: str, offset: int) -> None:
        lines.append(f'_Static_assert(__builtin_offsetof(struct {struct}, {member}) == {offset}, '
                     f'"{struct}.{member}: records.py disagrees");')

    for struct, base, members in (("rt_event", _RING, EVENT_VIEWS), ("rt_str_event", 0, STR_VIEWS)):
        some = next(iter(members.values()))
        for name, _ in HEAD:
            if not name.endswith("pad"):
                check(struct, f"h.{name}", some.fields[name][1] - base)
        source = EVENT_MEMBERS if struct == "rt_event" else STR_MEMBERS
        for member, fields in source.items():
            view = members[member]
            for name, _ in fields:
                if not name.endswith("pad"):
                    check(struct, f"{member}.{name}", view.fields[name][1] - base)
        lines.append(f'_Static_assert(sizeof(struct {struct}) == {some.itemsize - base}, "{struct} size");')
    for name, _ in STR_TAIL:
        check("rt_str_event", name, STR_EVENT_DTYPE.fields[name][1])
    return "\n".join(lines) + "\n"


def _declared_size(macro: str) -> int:
    return int(re.search(rf"#define {macro} (\d+)", probe_text(HEADER)).group(1))


assert EVENT_DTYPE.itemsize == _declared_size("RT_EVENT_SIZE") + _RING, "EVENT_DTYPE out of sync with readtrace.h"
assert STR_EVENT_DTYPE.itemsize == _declared_size("RT_STR_EVENT_SIZE"), "STR_EVENT_DTYPE out of sync"
