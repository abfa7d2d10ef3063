"""A finished local trace put into an object store (``readtrace record -o s3://...`` or ``--upload URL``).

Nothing half-written is ever read as a trace: the files go first to a temporary prefix beside the
target (``.NAME.uploading-ID/``), then are copied (server side) to the target prefix, and the marker
object (trace/location.py: ``COMPLETE_MARKER``, each file's size) is written last; readers require
it. Replacing a trace (``--force``) deletes the old marker first, so the trace being replaced is
refused, not read half old and half new, until the new marker is there.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from datetime import UTC, datetime
from pathlib import Path

from readtrace.errors import ReadtraceError, TraceError, UsageError
from readtrace.trace.format import FORMAT_NAME, META_FILE, SUFFIX
from readtrace.trace.location import COMPLETE_MARKER, StoreLocation, is_url
from readtrace.trace.schema import TABLES

TRACE_FILES = (META_FILE, *(f"{t}.parquet" for t in TABLES))


def trace_url(url: str, name: str) -> str:
    """The trace's URL: ``url`` itself when it names a trace (``*.rtrace``), else ``url/name``."""
    url = url.rstrip("/")
    return url if url.endswith(SUFFIX) else f"{url}/{name}"


def check_upload_target(url: str, force: bool) -> StoreLocation:
    """The target, checked before any work: a URL of a store we can reach, free or (``force``) a trace."""
    if not is_url(url):
        raise UsageError(f"{url}: not an object-store URL (s3://BUCKET/PREFIX, gs://...)")
    from pyarrow.fs import FileSelector

    target = StoreLocation(url)
    try:
        there = {i.path.removeprefix(target.key + "/")
                 for i in target.fs.get_file_info(FileSelector(target.key, recursive=True, allow_not_found=True))}
    except OSError as e:
        raise ReadtraceError(f"{url}: cannot reach the store: {' '.join(str(e).split())}") from None
    if there - {COMPLETE_MARKER, *TRACE_FILES}:
        raise UsageError(f"{url}: holds other objects than a readtrace trace; give another prefix")
    if COMPLETE_MARKER in there and not force:
        raise UsageError(f"{url}: a trace is already there ({{option}} replaces it)", option="force")
    return target  # free, or an upload that never finished (no marker): replaced


def upload_trace(local: str | os.PathLike, url: str, force: bool = False) -> str:
    """Upload the finished trace ``local`` to ``url`` (see the module's docstring); returns the URL."""
    from pyarrow.fs import FileType, LocalFileSystem, copy_files

    local = Path(local)
    names = [n for n in TRACE_FILES if (local / n).is_file()]
    if META_FILE not in names:
        raise TraceError(f"{local}: not a finished trace (no {META_FILE})")
    target = check_upload_target(url, force)
    fs, key = target.fs, target.key
    parent, _, name = key.rpartition("/")
    staging = f"{parent}/.{name}.uploading-{uuid.uuid4().hex[:12]}"
    try:
        for n in names:
            copy_files(str(local / n), f"{staging}/{n}", source_filesystem=LocalFileSystem(),
                       destination_filesystem=fs)
        if target.has(COMPLETE_MARKER):
            fs.delete_file(f"{key}/{COMPLETE_MARKER}")  # from here readers refuse the old trace
        if fs.get_file_info(key).type == FileType.Directory:
            fs.delete_dir_contents(key)
        for n in names:
            fs.copy_file(f"{staging}/{n}", f"{key}/{n}")
        marker = {"format": FORMAT_NAME, "files": {n: (local / n).stat().st_size for n in names},
                  "uploaded": datetime.now(UTC).isoformat(), "host": socket.gethostname()}
        with fs.open_output_stream(f"{key}/{COMPLETE_MARKER}") as out:
            out.write(json.dumps(marker, indent=1, sort_keys=True).encode())
    except OSError as e:
        raise ReadtraceError(f"cannot upload {local} to {url}: {' '.join(str(e).split())}") from None
    finally:
        with contextlib.suppress(OSError):
            fs.delete_dir(staging)
    return target.path
