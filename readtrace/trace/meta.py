"""The types of ``meta.json``'s known keys, checked once when a trace is loaded (so no reader meets a
string where it expects a number). Unknown keys pass: newer writers may add some."""

from __future__ import annotations

from readtrace.errors import TraceError

NUMBER = (int, float)
TEXT = (str,)
INT = (int,)
FLAG = (bool,)

# key -> (allowed types, allowed types of the items of a list / values of a dict, or None)
META_TYPES: dict[str, tuple[tuple[type, ...], tuple[type, ...] | None]] = {
    "command": ((list,), TEXT),
    "exit_code": (INT, None),
    "interrupted": (FLAG, None),
    "partial": (FLAG, None),
    "partial_reasons": ((list,), TEXT),
    "dropped_records": (INT, None),
    "survivors": ((list,), INT),
    "lost_events": (INT + (dict,), INT),
    "lost_detail": ((dict,), INT),
    "rows": ((dict,), INT),
    "wall_s": (NUMBER, None),
    "t0_ns": (INT, None),
    "end_ns": (INT, None),
    "pid": (INT, None),
    "cwd": (TEXT, None),
    "backend": (TEXT, None),
    "hostname": (TEXT, None),
    "start_time": (TEXT, None),
    "ring_mib": (INT, None),
    "truncated_paths": (INT, None),
    "page_size": (INT, None),
    "fuse_connections": ((list,), INT),
    "ranks": ((dict,), None),
    "sched": ((list,), (dict,)),
    "sampler": ((dict,), None),
    "inferred": ((dict,), None),
    "missing_views": ((list,), TEXT),
    "fuse_view": ((dict,), None),
    "python_calls": ((dict,), None),
    "mount_profiles": ((list,), (dict,)),  # readtrace probe's profiles of the mounts (measure/profile.py)
    "attached": ((dict,), None),
    "reclaim": ((dict,), None),  # what reclaimed page cache during the recording (pagecache/reclaim.py)
}


def _names(types: tuple[type, ...]) -> str:
    types = tuple(t for t in types if not (t is int and float in types))
    return " or ".join({int: "an integer", float: "a number", str: "text", bool: "true/false", list: "a list",
                        dict: "an object", type(None): "null"}[t] for t in types)


def _is(value, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:  # JSON true is no integer here
        return False
    return isinstance(value, types)


def check_meta(meta: dict, where: str) -> None:
    """TraceError naming the first known key whose value has the wrong type (null: unknown,
    allowed everywhere: importers and the ptrace backend leave what they cannot know as null)."""
    for key, (types, items) in META_TYPES.items():
        if meta.get(key) is None:
            continue
        value = meta[key]
        if not _is(value, types):
            raise TraceError(f"{where}: corrupt meta.json: {key!r} is {value!r}, expected {_names(types)}")
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if items and not all(_is(v, items) for v in inner):
            raise TraceError(f"{where}: corrupt meta.json: {key!r} holds {value!r}, expected items that are "
                             f"{_names(items)}")
    for key in ("command", "cwd"):  # what `fix` runs: no argument or path can hold a NUL
        value = meta.get(key)
        if value is not None and "\0" in "".join(value if isinstance(value, list) else [value]):
            raise TraceError(f"{where}: corrupt meta.json: {key!r} holds a NUL character")
