"""numpy views of the probe records in probes/readtrace.h (struct rt_event, struct rt_str_event)."""

from __future__ import annotations

import re

import numpy as np

from readtrace.record.program import HEADER, kind_numbers, probe_text

KIND = kind_numbers()

_COMMON = [
    ("ts_ns", "<u8"), ("ofd", "<u8"), ("ino", "<u8"), ("offset", "<i8"), ("size", "<i8"),
    ("ret", "<i8"), ("latency_ns", "<u8"), ("arg", "<i8"),
]
# The fast ring's records with the ring's 8-byte record header in front (read from the mmap).
EVENT_DTYPE = np.dtype([
    ("hdr_len", "<u4"), ("hdr_pgoff", "<u4"), *_COMMON,
    ("pid", "<u4"), ("tid", "<u4"), ("fd", "<i4"), ("dev", "<u4"), ("count", "<u4"), ("aux", "<u4"),
    ("kind", "<u2"), ("pad16", "<u2"), ("pad32", "<u4"),
])
STR_EVENT_DTYPE = np.dtype([
    ("ts_ns", "<u8"), ("ofd", "<u8"), ("ino", "<u8"), ("size", "<i8"), ("ret", "<i8"), ("arg", "<i8"),
    ("latency_ns", "<u8"), ("pid", "<u4"), ("tid", "<u4"), ("fd", "<i4"), ("dev", "<u4"),
    ("kind", "<u4"), ("pad32", "<u4"), ("comm", "S16"), ("path", "S256"),
])


def _declared_size(macro: str) -> int:
    return int(re.search(rf"#define {macro} (\d+)", probe_text(HEADER)).group(1))


assert EVENT_DTYPE.itemsize == _declared_size("RT_EVENT_SIZE") + 8, "EVENT_DTYPE out of sync with readtrace.h"
assert STR_EVENT_DTYPE.itemsize == _declared_size("RT_STR_EVENT_SIZE"), "STR_EVENT_DTYPE out of sync"
