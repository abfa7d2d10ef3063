"""The request log: JSON lines written by the daemon, the ground truth tests and benchmarks use.

Records (``kind``): ``mount`` (the settings), ``open`` / ``release`` (a handle's life), ``read``
(one FUSE READ: ``ts_ns`` CLOCK_MONOTONIC, ``fh``, ``pid`` = the requesting thread id as the kernel
reports it, ``offset``, ``size``, ``returned``, ``new_request``, ``seek``, ``mode``, ``range_end``,
``cost_s`` = modelled backend time, ``wait_s`` = time the request spent waiting, queueing included)
and ``counters`` (written once on unmount).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from readtrace.errors import InputError
from readtrace.validate import json_value

if TYPE_CHECKING:
    import pandas as pd

_JSON_BOOL = {True: "true", False: "false"}
READ_COLUMNS = ["ts_ns", "fh", "pid", "path", "offset", "size", "returned", "new_request", "seek",
                "mode", "range_end", "cost_s", "wait_s"]


class RequestLog:
    """Appends one JSON line per record; thread-safe; every line reaches the file before the next."""

    def __init__(self, path: str):
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def write(self, kind: str, **fields) -> None:
        line = json.dumps({"kind": kind, "ts_ns": time.monotonic_ns(), **fields}, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")

    def write_read(self, fh: int, pid: int, path_json: str, offset: int, size: int, returned: int,
                   new_request: bool, seek: bool, mode: str, range_end: int, cost_s: float, wait_s: float) -> None:
        """One READ record, formatted by hand: json.dumps was ~15 % of the daemon's Python time.
        ``path_json`` is the path already JSON-encoded (once per handle)."""
        line = (f'{{"kind":"read","ts_ns":{time.monotonic_ns()},"fh":{fh},"pid":{pid},"path":{path_json},'
                f'"offset":{offset},"size":{size},"returned":{returned},"new_request":{_JSON_BOOL[new_request]},'
                f'"seek":{_JSON_BOOL[seek]},"mode":"{mode}","range_end":{range_end},"cost_s":{cost_s:.6f},'
                f'"wait_s":{wait_s:.6f}}}\n')
        with self._lock:
            self._file.write(line)

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_records(path: str | Path) -> list[dict]:
    """All records of a log; a torn last line (daemon killed mid-write) is an error, not dropped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"simfs request log not found: {path}") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json_value(line))
        except ValueError:
            raise InputError(f"{path}:{number}: corrupt simfs log line") from None
    return records


def requests_frame(records: list[dict]) -> pd.DataFrame:
    """The READ records as a DataFrame (columns READ_COLUMNS), in arrival order."""
    import pandas as pd  # here, not at import: the daemon and the command line need none of it

    reads = [r for r in records if r["kind"] == "read"]
    return pd.DataFrame(reads, columns=READ_COLUMNS) if reads else pd.DataFrame(columns=READ_COLUMNS)


def count(records: list[dict]) -> dict:
    """Counters: the daemon's own record when it unmounted, else totals of the reads so far."""
    for record in reversed(records):
        if record["kind"] == "counters":
            return {k: v for k, v in record.items() if k not in ("kind", "ts_ns")}
    return totals(requests_frame(records), opens=sum(r["kind"] == "open" for r in records))


def totals(reads: pd.DataFrame, opens: int) -> dict:
    """Counters computed from READ records."""
    return {
        "requests": int(len(reads)),
        "bytes": int(reads["returned"].sum()) if len(reads) else 0,
        "backend_requests": int(reads["new_request"].sum()) if len(reads) else 0,
        "seeks": int(reads["seek"].sum()) if len(reads) else 0,
        "modelled_wait_s": round(float(reads["cost_s"].sum()), 6) if len(reads) else 0.0,
        "opens": int(opens),
        "random_handles": int(reads.loc[reads["mode"] == "random", "fh"].nunique()) if len(reads) else 0,
    }


def aggregate_rate(frames: list[pd.DataFrame]) -> tuple[int, float]:
    """(bytes, seconds) that one or more mounts' READs moved together: their returned bytes, from the
    first READ's arrival (logged end minus its wait) to the last READ's end. Bytes / seconds is the
    rate a shared link (simfs/link.py) must keep below its limit."""
    reads = [f for f in frames if len(f)]
    if not reads:
        return 0, 0.0
    total = sum(int(f["returned"].sum()) for f in reads)
    start = min(float((f["ts_ns"] / 1e9 - f["wait_s"]).min()) for f in reads)
    end = max(float(f["ts_ns"].max()) / 1e9 for f in reads)
    return total, end - start
