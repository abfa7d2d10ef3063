"""The trace on disk: a directory of Parquet tables plus ``meta.json``, written incrementally.

Layout of ``NAME.rtrace/``::

    meta.json        format name + version, command, exit code, times, host, lost events ...
    events.parquet   application view      (schema.EVENTS)
    pages.parquet    page-cache view       (schema.PAGES)
    fuse.parquet     FUSE requests         (schema.FUSE)
    files.parquet    files and their mounts (schema.FILES)
    python_calls.parquet  which Python loader call issued the reads (schema.PYTHON_CALLS; optional)
    tasks.parquet    tasks in another PID or mount namespace, their ids there (schema.TASKS; optional)

``meta.json`` is written last. The trace is written into a marked directory beside NAME.rtrace and
renamed into place at the end (readtrace.replace): a failed recording leaves the previous trace intact,
and ``force`` replaces only a readtrace trace, never a directory of other files or a symlink.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from readtrace import replace
from readtrace.errors import ReadtraceError, TraceError
from readtrace.trace.location import TraceLocation, locate
from readtrace.trace.meta import check_meta
from readtrace.trace.runs import calls_per_row, expand_coalesced
from readtrace.trace.schema import (
    NARROW_READ_COLUMNS,
    OPTIONAL_COLUMNS,
    OPTIONAL_TABLES,
    READ_COLUMNS,
    READ_OPS,
    TABLES,
    default_for,
)
from readtrace.validate import json_value

FORMAT_NAME = "readtrace-trace"
FORMAT_VERSION = 2
# v2: ino, unique, nodeid, fh are uint64 (v1 stored them as int64 and used -1 for "unknown").
# Older traces are refused by number (record them again), never reinterpreted.
OLDEST_READABLE_VERSION = 2
SUFFIX = ".rtrace"
META_FILE = "meta.json"
RESERVE_FILE = ".reserve"  # space held back so a trace can still be finished on a full disk
RESERVE_BYTES = 4 << 20
EXTRA_FILES = {"events.spool", "strace.out"}  # spools the recorders write into a trace while running
INT32 = np.iinfo(np.int32)


def is_trace_dir(path: Path) -> bool:
    """Whether ``path`` is a readtrace trace (finished, or unfinished and marked) holding nothing but
    trace files: the only kind of directory ``--force`` may replace."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        names = set(os.listdir(path))
    except OSError:
        return False
    known = {META_FILE, META_FILE + ".tmp", RESERVE_FILE, replace.UNFINISHED_MARK, *EXTRA_FILES,
             *(f"{name}.parquet" for name in TABLES)}
    if names - known:
        return False
    if replace.is_unfinished(path):
        return True
    try:
        with open(path / META_FILE, "rb", opener=_nonblocking) as f:  # noqa: PTH123
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return False
            meta = json_value(f.read(1 << 20))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


def _nonblocking(path, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)  # a FIFO planted as meta.json must not block us


@dataclass
class Trace:
    """A loaded trace: ``meta`` and one DataFrame per view; the application view split by kind so
    that every frame means one thing, in full and lean loads alike (see trace/schema.py, "Readers"):

    - ``reads``: the read syscalls (``READ_OPS``) as recorded, one row per merged run; also ``runs()``.
    - ``calls()``: the same reads, one row per call (merged runs expanded).
    - ``others``: every other application event (open, close, dup, mmap, ..., fork, exec, exit).
    - ``events``: all application events in recorded order (a lean load reads them again on first use).
    A lean load differs in dtypes only: text columns are categoricals, ``reads`` has ``READ_COLUMNS``
    (NARROW_READ_COLUMNS int32 where every value fits).
    """

    meta: dict
    others: pd.DataFrame
    reads: pd.DataFrame
    pages: pd.DataFrame
    fuse: pd.DataFrame
    files: pd.DataFrame
    python_calls: pd.DataFrame = field(default_factory=lambda: empty_frame("python_calls"))
    tasks: pd.DataFrame = field(default_factory=lambda: empty_frame("tasks"))
    path: Path | str | None = field(default=None)  # a local directory, or an object-store URL
    lean: bool = False
    _events: pd.DataFrame | None = field(default=None, repr=False)

    def runs(self) -> pd.DataFrame:
        """The read syscalls as recorded: ``count`` calls per row, ``size``/``ret``/``latency_ns`` totals."""
        return self.reads

    def calls(self) -> pd.DataFrame:
        """The read syscalls one row per call (each merged run spread back into its calls)."""
        return expand_coalesced(self.reads, calls_per_row(self.reads))

    @property
    def events(self) -> pd.DataFrame:
        """Every application event (reads and others) in recorded order, all columns."""
        if self._events is None:
            if self.path is None:
                raise TraceError("this trace has no events table to read again")
            self._events = _load_table(locate(self.path), "events", self.meta.get("rows", {}).get("events"), lean=False)
        return self._events


def _split_frame(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(reads, others) of a whole events frame."""
    is_read = events["op"].isin(READ_OPS).to_numpy()
    return events[is_read].reset_index(drop=True), events[~is_read].reset_index(drop=True)


def _to_table(name: str, data) -> pa.Table:
    """Coerce a DataFrame / dict of columns / list of row dicts to the table's schema.

    Columns the caller left out, and missing values (NaN, None) in the others, are filled with the
    schema default, so no table holds numeric nulls (a null would turn a u64 column into float on
    load); unknown columns are an error.
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
            else:
                if col.hasnans:
                    col = col.fillna(default_for(f))
                if pa.types.is_unsigned_integer(f.type) and col.dtype == object:
                    col = np.array(col.tolist(), dtype=np.uint64)  # Python ints up to 2**64-1; < 0 raises
            arrays.append(pa.array(col, type=f.type, from_pandas=True))
        else:
            arrays.append(pa.array([default_for(f)] * n, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def empty_frame(name: str) -> pd.DataFrame:
    """An empty DataFrame with the table's columns and dtypes."""
    return TABLES[name].empty_table().to_pandas()


def check_trace_target(path: str | os.PathLike, force: bool) -> None:
    """Refuse to write a trace at ``path`` (ReadtraceError) unless it is free or, with ``force``, a trace."""
    replace.check_target(path, force=force, is_ours=is_trace_dir, what="trace")


class TraceWriter:
    """Writes a trace incrementally: ``append`` row batches, then ``close(meta)``; ``abort()`` on failure.

    Memory stays bounded: each ``append`` becomes Parquet row groups on disk at once. The tables go to
    ``self.dir``, a marked directory beside ``path``, renamed to ``path`` by ``close``.
    """

    def __init__(self, path: str | os.PathLike, force: bool = False):
        self.path = Path(path)
        self.force = force
        check_trace_target(self.path, force)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ReadtraceError(f"cannot create trace {self.path}: {e.strerror}") from None
        self.dir = replace.staging_dir(self.path)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.rows = dict.fromkeys(TABLES, 0)
        self.closed = False
        self._reserve()

    def _reserve(self) -> None:
        with contextlib.suppress(OSError):  # best effort: a disk already full has nothing to hold back
            fd = os.open(self.dir / RESERVE_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            finally:
                os.close(fd)

    def release_reserve(self) -> None:
        """Free the space held back at the start (the disk is full: finish the trace with it)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.dir / RESERVE_FILE)

    def append(self, name: str, data) -> None:
        """Append rows to table ``name`` (DataFrame, dict of columns, list of dicts or Arrow table)."""
        table = _to_table(name, data)
        if table.num_rows == 0:
            return
        writer = self._writers.get(name)
        if writer is None:
            writer = pq.ParquetWriter(self.dir / f"{name}.parquet", TABLES[name], compression="zstd")
            self._writers[name] = writer
        writer.write_table(table)
        self.rows[name] += table.num_rows

    def salvage(self, name: str) -> int:
        """After a failed write to table ``name`` (full disk): keep its complete row groups when the
        file can still be closed, else write it empty. Returns the rows kept; later appends fail."""
        writer = self._writers.pop(name, None)
        file = self.dir / f"{name}.parquet"
        kept = 0
        try:
            if writer is not None:
                writer.close()
                kept = pq.ParquetFile(file).metadata.num_rows
        except Exception:  # noqa: BLE001 - any failure here means: the table is lost
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file)
            kept = 0
        self.rows[name] = kept
        return kept

    def close(self, meta: dict) -> Path:
        """Finish every table, write meta.json last, rename the trace into place; returns its path."""
        if self.closed:
            return self.path
        self.release_reserve()
        for writer in self._writers.values():
            writer.close()
        for name in TABLES:
            if not (self.dir / f"{name}.parquet").exists():
                pq.write_table(TABLES[name].empty_table(), self.dir / f"{name}.parquet")
        full = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **meta, "rows": dict(self.rows)}
        tmp = self.dir / (META_FILE + ".tmp")
        tmp.write_text(json.dumps(full, indent=2, sort_keys=True, default=str))
        os.replace(tmp, self.dir / META_FILE)
        replace.install_dir(self.dir, self.path, force=self.force, is_ours=is_trace_dir, what="trace")
        self.closed = True
        return self.path

    def abort(self) -> None:
        """Remove the unfinished trace (the previous one at ``path``, if any, is untouched)."""
        for writer in self._writers.values():
            with contextlib.suppress(Exception):
                writer.close()
        self._writers = {}
        replace.remove_dir(self.dir)


def write_trace(path, *, meta: dict | None = None, events=None, pages=None, fuse=None, files=None,
                python_calls=None, tasks=None, force: bool = False) -> Path:
    """Write a whole trace at once (synthetic traces, tests, converters)."""
    writer = TraceWriter(path, force=force)
    for name, data in (("events", events), ("pages", pages), ("fuse", fuse), ("files", files),
                       ("python_calls", python_calls), ("tasks", tasks)):
        if data is not None:
            writer.append(name, data)
    return writer.close(dict(meta or {}))


def make_trace(*, meta: dict | None = None, events=None, pages=None, fuse=None, files=None,
               python_calls=None, tasks=None) -> Trace:
    """Build an in-memory Trace with the exact on-disk dtypes (for analysis tests)."""
    frames = {}
    for name, data in (("events", events), ("pages", pages), ("fuse", fuse), ("files", files),
                       ("python_calls", python_calls), ("tasks", tasks)):
        frames[name] = empty_frame(name) if data is None else _to_table(name, data).to_pandas()
    everything = frames.pop("events")
    reads, others = _split_frame(everything)
    return Trace(meta={"format": FORMAT_NAME, "version": FORMAT_VERSION, **(meta or {})}, others=others,
                 reads=reads, _events=everything, **frames)


def unreadable(path: TraceLocation, name: str) -> TraceError:
    """A trace file this user may not read: say so (not "corrupt"), and whose it is."""
    owner = path.owner(name) or "another user"
    return TraceError(f"{path}: cannot read {name}: permission denied (it belongs to {owner}: read it as "
                      "that user or with sudo)")


def _read_meta(path: TraceLocation) -> dict:
    path.check_complete()
    if not path.has(META_FILE):
        raise TraceError(f"{path}: incomplete trace (no {META_FILE}; was the recorder killed?)")
    try:
        meta = json_value(path.read_bytes(META_FILE))
    except PermissionError:
        raise unreadable(path, META_FILE) from None
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: corrupt {META_FILE}: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise TraceError(f"{path}: not a readtrace trace (format {meta.get('format')!r})"
                         if isinstance(meta, dict) else f"{path}: corrupt {META_FILE}")
    version = meta.get("version")
    if isinstance(version, int) and 1 <= version < OLDEST_READABLE_VERSION:
        raise TraceError(f"{path}: trace format version {version} was written by an older readtrace "
                         f"(this one reads v{OLDEST_READABLE_VERSION}..v{FORMAT_VERSION}); record it again")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise TraceError(f"{path}: trace format version {version!r} is not supported "
                         f"(this readtrace reads {FORMAT_NAME} v{OLDEST_READABLE_VERSION}..v{FORMAT_VERSION}); "
                         "upgrade readtrace")
    check_meta(meta, str(path))
    return meta


def _open_table(path: TraceLocation, name: str, expected_rows: int | None, lean: bool) -> pq.ParquetFile:
    """The table's Parquet file, checked against meta.json (rows) and the schema (columns).
    ``lean``: text columns come dictionary-encoded (pandas categoricals)."""
    file = f"{name}.parquet"
    if not path.has(file):
        raise TraceError(f"{path}: truncated trace: {file} is missing")
    strings = [f.name for f in TABLES[name] if pa.types.is_string(f.type)]
    try:
        parquet = pq.ParquetFile(path.open(file), read_dictionary=strings if lean else None)
    except PermissionError:
        raise unreadable(path, file) from None
    except (pa.ArrowException, OSError) as e:
        raise TraceError(f"{path}: corrupt trace: {file}: {e}") from e
    rows = parquet.metadata.num_rows
    if expected_rows is not None and rows != expected_rows:
        raise TraceError(f"{path}: truncated trace: {file} has {rows} rows, meta says {expected_rows}")
    missing = set(TABLES[name].names) - set(parquet.schema_arrow.names) - OPTIONAL_COLUMNS.get(name, frozenset())
    if missing:
        raise TraceError(f"{path}: corrupt trace: {file} lacks columns {sorted(missing)}")
    for f in TABLES[name]:
        if f.name not in parquet.schema_arrow.names:
            continue
        stored = parquet.schema_arrow.field(f.name).type
        if (stored.value_type if pa.types.is_dictionary(stored) else stored) != f.type:
            raise TraceError(f"{path}: corrupt trace: {file}: column {f.name} is {stored}, expected {f.type}")
    return parquet


def _target_schema(name: str, columns=None, lean: bool = False) -> pa.Schema:
    """The table's schema (or its ``columns``); lean: text dictionary-encoded."""
    fields = [TABLES[name].field(c) for c in (columns or TABLES[name].names)]
    if lean:
        fields = [f.with_type(pa.dictionary(pa.int32(), f.type)) if pa.types.is_string(f.type) else f
                  for f in fields]
    return pa.schema(fields)


def _frame(table: pa.Table, schema: pa.Schema) -> pd.DataFrame:
    """Arrow -> pandas, each column freed once converted (no second copy of the table at peak)."""
    return table.select(schema.names).cast(schema).to_pandas(self_destruct=True, split_blocks=True)


def _read_all(path: TraceLocation, name: str, read, *args):
    """Run ``read(*args)``; Parquet errors while reading become one-line TraceErrors."""
    try:
        return read(*args)
    except (pa.ArrowException, OSError) as e:
        raise TraceError(f"{path}: corrupt trace: {name}.parquet: {e}") from e


def _is_read(op: pa.ChunkedArray) -> np.ndarray:
    """Whether each row is a read syscall, from the dictionary-encoded ``op`` column."""
    op = op.combine_chunks()
    hit = pc.is_in(op.dictionary, value_set=pa.array(READ_OPS))
    return pc.fill_null(pc.take(hit, op.indices), False).to_numpy(zero_copy_only=False)


def _read_mask(parquet: pq.ParquetFile, i: int) -> np.ndarray:
    """Whether each row of row group ``i`` is a read syscall. A row group of one op (the writer's
    statistics say so) needs no read of its op column."""
    group = parquet.metadata.row_group(i)
    column = group.column(parquet.schema_arrow.get_field_index("op"))
    stats = column.statistics if column.path_in_schema == "op" else None
    if stats is not None and stats.has_min_max and stats.has_null_count and stats.null_count == 0 \
            and stats.min == stats.max:
        return np.full(group.num_rows, stats.min in READ_OPS)
    return _is_read(parquet.read_row_group(i, columns=["op"]).column(0))


def _bounds(parquet: pq.ParquetFile, groups: list[int], name: str) -> tuple[int, int] | None:
    """(min, max) of column ``name`` over row groups ``groups`` from their Parquet statistics (no
    nulls), else None."""
    index = parquet.schema_arrow.get_field_index(name)
    low, high = [], []
    for i in groups:
        column = parquet.metadata.row_group(i).column(index)
        stats = column.statistics if column.path_in_schema == name else None
        if stats is None or not (stats.has_min_max and stats.has_null_count) or stats.null_count:
            return None
        low.append(stats.min)
        high.append(stats.max)
    return (min(low), max(high)) if groups else None


def _dtype(field: pa.Field, bounds: tuple[int, int] | None, narrow: tuple[str, ...]) -> np.dtype:
    """A numeric column's numpy dtype: int32 for a ``narrow`` column whose values fit."""
    if field.name in narrow and bounds is not None and INT32.min <= bounds[0] and bounds[1] <= INT32.max:
        return np.dtype(np.int32)
    return np.dtype(field.type.to_pandas_dtype())


def _gather(parquet: pq.ParquetFile, picks: list[tuple[int, np.ndarray | None]], schema: pa.Schema,
            narrow: tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows ``picks`` selects ((row group, row mask or None for all of them)) as a DataFrame.

    One row group at a time into numpy columns allocated once: the peak is the result plus one row
    group, not two copies of the table (Arrow's and pandas'). Numeric nulls become 0 (the recorder
    writes none; a full load gives NaN there, which the analysis reads as 0 too). Text stays
    dictionary-encoded: pandas categoricals. A numeric column of one value (one fd, one file, one read
    size) is that value broadcast: read-only, no memory per row, not decoded. A ``narrow`` column
    whose values fit in int32 (the statistics again) is int32: half the memory, sums stay int64."""
    sizes = [parquet.metadata.row_group(i).num_rows if m is None else int(m.sum()) for i, m in picks]
    n = sum(sizes)
    numbers = [f for f in schema if not pa.types.is_dictionary(f.type)]
    bounds = {f.name: _bounds(parquet, [i for i, _ in picks], f.name) for f in numbers}
    same = {name: b is not None and b[0] == b[1] for name, b in bounds.items()}
    numeric = {f.name: np.empty(n, dtype=_dtype(f, bounds[f.name], narrow)) for f in numbers if not same[f.name]}
    constant = {f.name: np.broadcast_to(np.array(bounds[f.name][0], dtype=f.type.to_pandas_dtype()), n)
                for f in numbers if same[f.name]}
    text: dict[str, list] = {f.name: [] for f in schema if pa.types.is_dictionary(f.type)}
    read = [name for name in schema.names if name not in constant]
    start = 0
    for (i, mask), size in zip(picks, sizes, strict=True):
        group = parquet.read_row_group(i, columns=read).cast(pa.schema([schema.field(c) for c in read]))
        if mask is not None:
            group = group.filter(mask)
        stop = start + size
        for name, out in numeric.items():
            column = group.column(name)
            out[start:stop] = (pc.fill_null(column, 0) if column.null_count else column).to_numpy()
        for name, chunks in text.items():
            chunks.extend(group.column(name).chunks)
        start = stop
        del group
    columns = {**numeric, **constant, **{name: pa.chunked_array(chunks, type=schema.field(name).type).to_pandas()
                             for name, chunks in text.items()}}
    return pd.DataFrame({name: columns[name] for name in schema.names}, copy=False)


def _load_table(path: TraceLocation, name: str, expected_rows: int | None, lean: bool) -> pd.DataFrame:
    if name in OPTIONAL_TABLES and expected_rows is None and not path.has(f"{name}.parquet"):
        return empty_frame(name)  # a trace from before the table
    parquet = _open_table(path, name, expected_rows, lean)
    stored = set(parquet.schema_arrow.names)
    schema = _target_schema(name, [c for c in TABLES[name].names if c in stored], lean=lean)
    frame = _frame(_read_all(path, name, parquet.read, schema.names), schema)
    for f in TABLES[name]:  # an optional column the trace predates
        if f.name not in stored:
            frame.insert(TABLES[name].names.index(f.name), f.name,
                         pd.Series(default_for(f), index=frame.index, dtype=f.type.to_pandas_dtype()))
    return frame


def _split_reads(parquet: pq.ParquetFile) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(read syscalls with READ_COLUMNS, every other event), row group by row group. Row groups of
    reads only (the bulk of a trace) are read with READ_COLUMNS only."""
    masks = [_read_mask(parquet, i) for i in range(parquet.num_row_groups)]
    reads = [(i, None if m.all() else m) for i, m in enumerate(masks) if m.any()]
    others = [(i, None if not m.any() else ~m) for i, m in enumerate(masks) if not m.all()]
    return (_gather(parquet, reads, _target_schema("events", READ_COLUMNS, lean=True), NARROW_READ_COLUMNS),
            _gather(parquet, others, _target_schema("events", lean=True)))


def _load_events_lean(path: TraceLocation, expected_rows: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(reads, other events) of a lean load."""
    parquet = _open_table(path, "events", expected_rows, lean=True)
    return _read_all(path, "events", _split_reads, parquet)


def load_trace(path: str | os.PathLike | TraceLocation, lean: bool = False) -> Trace:
    """Read a trace directory, local or in an object store (a URL: trace/location.py); raises
    TraceError (one clear line) when it cannot be used.

    ``lean`` (for the analysis of big traces): text columns as pandas categoricals and ``reads`` with
    only ``READ_COLUMNS``, read row group by row group: the whole events table is never in memory at
    once. The frames mean the same in both loads (see ``Trace``).
    """
    path = locate(path)
    if not path.exists():
        raise TraceError(f"{path}: no such trace")
    if not path.is_dir():
        raise TraceError(f"{path}: not a readtrace trace (expected a {SUFFIX} directory)")
    meta = _read_meta(path)
    rows = meta.get("rows", {})
    everything = None
    if lean:
        reads, others = _load_events_lean(path, rows.get("events"))
    else:
        everything = _load_table(path, "events", rows.get("events"), lean=False)
        reads, others = _split_frame(everything)
    frames = {name: _load_table(path, name, rows.get(name), lean=lean and name != "files")
              for name in TABLES if name != "events"}
    if lean:
        pa.default_memory_pool().release_unused()  # Arrow keeps freed read buffers: hand them back
    return Trace(meta=meta, path=path.path, others=others, reads=reads, lean=lean, _events=everything, **frames)


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
