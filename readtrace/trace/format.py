"""The trace on disk: a directory of Parquet tables plus ``meta.json``, written incrementally.

Layout of ``NAME.rtrace/``::

    meta.json        format name + version, command, exit code, times, host, lost events ...
    events.parquet   application view      (schema.EVENTS)
    pages.parquet    page-cache view       (schema.PAGES)
    fuse.parquet     FUSE requests         (schema.FUSE)
    files.parquet    files and their mounts (schema.FILES)

``meta.json`` is written last (atomically): a trace without it was cut off mid-recording.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from readtrace.errors import ReadtraceError, TraceError
from readtrace.trace.schema import TABLES, default_for

FORMAT_NAME = "readtrace-trace"
FORMAT_VERSION = 1
SUFFIX = ".rtrace"
META_FILE = "meta.json"


@dataclass
class Trace:
    """A loaded trace: ``meta`` dict and one DataFrame per table."""

    meta: dict
    events: pd.DataFrame
    pages: pd.DataFrame
    fuse: pd.DataFrame
    files: pd.DataFrame
    path: Path | None = field(default=None)


def _to_table(name: str, data) -> pa.Table:
    """Coerce a DataFrame / dict of columns / list of row dicts to the table's schema.

    Columns the caller left out are filled with the schema default; unknown columns are an error.
    """
    schema = TABLES[name]
    if isinstance(data, pa.Table):
        data = data.to_pandas()
    if isinstance(data, list):
        data = pd.DataFrame.from_records(data)
    if isinstance(data, dict):
        data = pd.DataFrame(data)
    unknown = set(data.columns) - set(schema.names)
    if unknown:
        raise ValueError(f"{name}: unknown columns {sorted(unknown)}")
    n = len(data)
    arrays = []
    for f in schema:
        if f.name in data.columns:
            col = data[f.name]
            if pa.types.is_string(f.type):
                col = col.astype(object).where(col.notna(), None)
            arrays.append(pa.array(col, type=f.type, from_pandas=True))
        else:
            arrays.append(pa.array([default_for(f)] * n, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def empty_frame(name: str) -> pd.DataFrame:
    """An empty DataFrame with the table's columns and dtypes."""
    return TABLES[name].empty_table().to_pandas()


class TraceWriter:
    """Writes a trace incrementally: ``append`` row batches, then ``close(meta)``.

    Memory stays bounded: each ``append`` becomes Parquet row groups on disk at once.
    """

    def __init__(self, path: str | os.PathLike, force: bool = False):
        self.path = Path(path)
        if self.path.exists():
            if not force:
                raise ReadtraceError(f"{self.path} exists; use --force to overwrite it", 1)
            if self.path.is_dir():
                shutil.rmtree(self.path)
            else:
                self.path.unlink()
        try:
            self.path.mkdir(parents=True)
        except OSError as e:
            raise ReadtraceError(f"cannot create trace {self.path}: {e.strerror}") from e
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.rows = dict.fromkeys(TABLES, 0)
        self.closed = False

    def append(self, name: str, data) -> None:
        """Append rows to table ``name`` (DataFrame, dict of columns, list of dicts or Arrow table)."""
        table = _to_table(name, data)
        if table.num_rows == 0:
            return
        writer = self._writers.get(name)
        if writer is None:
            writer = pq.ParquetWriter(self.path / f"{name}.parquet", TABLES[name], compression="zstd")
            self._writers[name] = writer
        writer.write_table(table)
        self.rows[name] += table.num_rows

    def close(self, meta: dict) -> Path:
        """Finish every table, then write meta.json last; returns the trace path."""
        if self.closed:
            return self.path
        for name in TABLES:
            if name not in self._writers:
                pq.write_table(TABLES[name].empty_table(), self.path / f"{name}.parquet")
        for writer in self._writers.values():
            writer.close()
        full = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **meta, "rows": dict(self.rows)}
        tmp = self.path / (META_FILE + ".tmp")
        tmp.write_text(json.dumps(full, indent=2, sort_keys=True, default=str))
        os.replace(tmp, self.path / META_FILE)
        self.closed = True
        return self.path

    def chown(self, uid: int, gid: int) -> None:
        """Give the trace to the invoking user (recording under sudo)."""
        for p in [self.path, *self.path.iterdir()]:
            os.chown(p, uid, gid)


def write_trace(path, *, meta: dict | None = None, events=None, pages=None, fuse=None, files=None,
                force: bool = False) -> Path:
    """Write a whole trace at once (synthetic traces, tests, converters)."""
    writer = TraceWriter(path, force=force)
    for name, data in (("events", events), ("pages", pages), ("fuse", fuse), ("files", files)):
        if data is not None:
            writer.append(name, data)
    return writer.close(dict(meta or {}))


def make_trace(*, meta: dict | None = None, events=None, pages=None, fuse=None, files=None) -> Trace:
    """Build an in-memory Trace with the exact on-disk dtypes (for analysis tests)."""
    frames = {}
    for name, data in (("events", events), ("pages", pages), ("fuse", fuse), ("files", files)):
        frames[name] = empty_frame(name) if data is None else _to_table(name, data).to_pandas()
    return Trace(meta={"format": FORMAT_NAME, "version": FORMAT_VERSION, **(meta or {})}, **frames)


def _read_meta(path: Path) -> dict:
    meta_path = path / META_FILE
    if not meta_path.exists():
        raise TraceError(f"{path}: incomplete trace (no {META_FILE}; was the recorder killed?)")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: corrupt {META_FILE}: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise TraceError(f"{path}: not a readtrace trace (format {meta.get('format')!r})"
                         if isinstance(meta, dict) else f"{path}: corrupt {META_FILE}")
    version = meta.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise TraceError(f"{path}: trace format version {version!r} is not supported "
                         f"(this readtrace reads {FORMAT_NAME} v1..v{FORMAT_VERSION}); upgrade readtrace")
    return meta


def _read_table(path: Path, name: str, expected_rows: int | None) -> pd.DataFrame:
    file = path / f"{name}.parquet"
    if not file.exists():
        raise TraceError(f"{path}: truncated trace: {file.name} is missing")
    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError) as e:
        raise TraceError(f"{path}: corrupt trace: {file.name}: {e}") from e
    if expected_rows is not None and table.num_rows != expected_rows:
        raise TraceError(f"{path}: truncated trace: {file.name} has {table.num_rows} rows, "
                         f"meta says {expected_rows}")
    missing = set(TABLES[name].names) - set(table.column_names)
    if missing:
        raise TraceError(f"{path}: corrupt trace: {file.name} lacks columns {sorted(missing)}")
    return table.select(TABLES[name].names).cast(TABLES[name]).to_pandas()


def load_trace(path: str | os.PathLike) -> Trace:
    """Read a trace directory; raises TraceError (one clear line) when it cannot be used."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such trace")
    if not path.is_dir():
        raise TraceError(f"{path}: not a readtrace trace (expected a {SUFFIX} directory)")
    meta = _read_meta(path)
    rows = meta.get("rows", {})
    frames = {name: _read_table(path, name, rows.get(name)) for name in TABLES}
    return Trace(meta=meta, path=path, **frames)


def newest_trace(directory: str | os.PathLike = ".") -> Path:
    """The most recently modified ``*.rtrace`` in ``directory`` (``readtrace report`` default)."""
    candidates = [p for p in Path(directory).glob(f"*{SUFFIX}") if p.is_dir()]
    if not candidates:
        raise TraceError(f"no {SUFFIX} trace in {Path(directory).resolve()}; "
                         "record one with: readtrace record -- CMD")
    return max(candidates, key=lambda p: p.stat().st_mtime)


def default_trace_name(command: list[str], pid: int) -> str:
    """``readtrace-<prog>-<pid>.rtrace`` for a command, e.g. readtrace-python-1234.rtrace."""
    prog = Path(command[0]).name if command else "trace"
    prog = "".join(c if c.isalnum() or c in "-_." else "_" for c in prog) or "trace"
    return f"readtrace-{prog}-{pid}{SUFFIX}"
