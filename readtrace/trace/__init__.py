"""The trace format: one schema, one writer, one reader (see format.py for the layout)."""

from readtrace.trace.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SUFFIX,
    Trace,
    TraceWriter,
    default_trace_name,
    empty_frame,
    load_trace,
    make_trace,
    newest_trace,
    write_trace,
)
from readtrace.trace.schema import (
    EVENT_OPS,
    FUSE_OPCODES,
    FUSE_READ,
    PAGE_OPS,
    READ_COLUMNS,
    READ_OPS,
    TABLES,
)

__all__ = [
    "EVENT_OPS", "FORMAT_NAME", "FORMAT_VERSION", "FUSE_OPCODES", "FUSE_READ", "PAGE_OPS", "READ_COLUMNS",
    "READ_OPS", "SUFFIX",
    "TABLES", "Trace", "TraceWriter", "default_trace_name", "empty_frame", "load_trace", "make_trace",
    "newest_trace", "write_trace",
]
