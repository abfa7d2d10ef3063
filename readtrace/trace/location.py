"""Where a trace lies: a local directory or a prefix in an object store (``s3://bucket/job/node0.rtrace``,
``gs://...``, anything pyarrow's file systems read, or fsspec's where installed).

The reader (format.py) reads every trace through a ``TraceLocation``, so a trace in a bucket is read
the same lean way as one on disk: meta.json, then each Parquet file's footer (row groups, column
statistics) and only the column chunks the analysis needs, as ranged reads.

Credentials are each store's usual ones (pyarrow's): for S3 ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``), and
``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` for an S3-compatible server (MinIO, moto, ...); for GCS
the application default credentials.

An object store has no rename: an uploaded trace is complete when its marker object ``COMPLETE_MARKER``
is there (trace/upload.py writes it last, listing each object's size). A remote reader requires it and
checks the sizes: nothing half-written is ever read as a trace.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import urllib.parse
from pathlib import Path

from readtrace.errors import TraceError
from readtrace.validate import json_value

COMPLETE_MARKER = "_READTRACE_COMPLETE"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(where: str | os.PathLike) -> bool:
    """Whether ``where`` names an object-store location (``scheme://...``) rather than a local path."""
    return isinstance(where, str) and bool(_URL.match(where)) and not where.startswith("file://")


class TraceLocation:
    """A directory of trace files, read by name. ``path`` is what a Trace keeps (a Path, or the URL)."""

    path: Path | str

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        raise NotImplementedError

    def exists(self) -> bool:
        raise NotImplementedError

    def is_dir(self) -> bool:
        raise NotImplementedError

    def has(self, name: str) -> bool:
        """Whether file ``name`` is there."""
        raise NotImplementedError

    def read_bytes(self, name: str) -> bytes:
        raise NotImplementedError

    def open(self, name: str):
        """File ``name`` for random access (what ``pyarrow.parquet.ParquetFile`` takes)."""
        raise NotImplementedError

    def owner(self, name: str) -> str | None:
        """Who owns file ``name`` (for a "permission denied"), where the location knows."""
        return None

    def child(self, name: str) -> TraceLocation:
        raise NotImplementedError

    def children(self, suffix: str) -> list[TraceLocation]:
        """The sub-directories named ``*suffix``, sorted by name."""
        raise NotImplementedError

    def check_complete(self) -> None:
        """Raise TraceError unless the trace was written whole (local: the writer renames it into place)."""


class LocalLocation(TraceLocation):
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @property
    def name(self) -> str:
        return self.path.name

    def exists(self) -> bool:
        return self.path.exists()

    def is_dir(self) -> bool:
        return self.path.is_dir()

    def has(self, name: str) -> bool:
        return (self.path / name).exists()

    def read_bytes(self, name: str) -> bytes:
        fd = os.open(self.path / name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block us
        with os.fdopen(fd, "rb") as f:
            self._regular(name, os.fstat(fd))
            return f.read()

    def open(self, name: str):
        self._regular(name, os.stat(self.path / name))  # pyarrow would block on a FIFO
        return self.path / name

    def _regular(self, name: str, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(f"{self.path}: {name} is not a regular file (a FIFO, a device, a directory): "
                             "not a trace readtrace wrote")

    def owner(self, name: str) -> str | None:
        try:
            return f"uid {os.stat(self.path / name).st_uid}"
        except OSError:
            return None

    def child(self, name: str) -> TraceLocation:
        return LocalLocation(self.path / name)

    def children(self, suffix: str) -> list[TraceLocation]:
        return [LocalLocation(p) for p in sorted(self.path.glob(f"*{suffix}")) if p.is_dir()]


class StoreLocation(TraceLocation):
    """A prefix in an object store, read through a ``pyarrow.fs.FileSystem``."""

    def __init__(self, url: str, filesystem=None, key: str | None = None):
        self.path = url.rstrip("/")
        if filesystem is None:
            filesystem, key = store_filesystem(self.path)
        self.fs, self.key = filesystem, key.rstrip("/")

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def _info(self, key: str):
        from pyarrow.fs import FileType

        try:
            return self.fs.get_file_info(key).type
        except OSError as e:
            raise TraceError(f"{self}: cannot reach the store: {_one_line(e)}") from None
        except Exception:  # noqa: BLE001 - e.g. an fsspec backend's own errors
            return FileType.NotFound

    def exists(self) -> bool:
        from pyarrow.fs import FileType

        return self._info(self.key) != FileType.NotFound

    def is_dir(self) -> bool:
        from pyarrow.fs import FileType

        return self._info(self.key) == FileType.Directory

    def has(self, name: str) -> bool:
        from pyarrow.fs import FileType

        return self._info(f"{self.key}/{name}") == FileType.File

    def read_bytes(self, name: str) -> bytes:
        with self.fs.open_input_stream(f"{self.key}/{name}") as f:
            return f.read()

    def open(self, name: str):
        return self.fs.open_input_file(f"{self.key}/{name}")

    def child(self, name: str) -> TraceLocation:
        return StoreLocation(f"{self.path}/{name}", self.fs, f"{self.key}/{name}")

    def children(self, suffix: str) -> list[TraceLocation]:
        from pyarrow.fs import FileSelector, FileType

        try:
            infos = self.fs.get_file_info(FileSelector(self.key, allow_not_found=True))
        except OSError as e:
            raise TraceError(f"{self}: cannot list: {_one_line(e)}") from None
        names = sorted(i.base_name for i in infos if i.type == FileType.Directory and i.base_name.endswith(suffix))
        return [self.child(n) for n in names]

    def check_complete(self) -> None:
        try:
            marker = json_value(self.read_bytes(COMPLETE_MARKER))
            sizes = dict(marker["files"])
        except FileNotFoundError:
            raise TraceError(f"{self}: incomplete trace (no {COMPLETE_MARKER} marker: its upload has not "
                             "finished, or it was not uploaded by readtrace)") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TraceError(f"{self}: corrupt {COMPLETE_MARKER} marker: {_one_line(e)}") from None
        for name, size in sizes.items():
            try:
                info = self.fs.get_file_info(f"{self.key}/{name}")
            except OSError as e:
                raise TraceError(f"{self}: cannot reach the store: {_one_line(e)}") from None
            if info.size != size:
                raise TraceError(f"{self}: incomplete trace: {name} is {info.size} bytes, the upload's marker "
                                 f"says {size} (being replaced?)")


def locate(where: str | os.PathLike | TraceLocation) -> TraceLocation:
    """The location of a trace or of a directory (prefix) of traces."""
    if isinstance(where, TraceLocation):
        return where
    return StoreLocation(where) if is_url(where) else LocalLocation(where)


def store_filesystem(url: str):
    """(pyarrow FileSystem, key below it) for an object-store URL; TraceError when no file system reads it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "s3" and _s3_endpoint() and "endpoint_override" not in parts.query:
        return _s3(_s3_endpoint()), f"{parts.netloc}{parts.path}"
    from pyarrow.fs import FileSystem

    try:
        return FileSystem.from_uri(url)
    except Exception as e:  # noqa: BLE001 - pyarrow: ArrowInvalid/ArrowNotImplementedError/OSError
        fs = _fsspec(url)
        if fs is None:
            raise TraceError(f"{url}: no file system for this URL ({_one_line(e)}); for other stores install "
                             "fsspec and the store's package") from None
        return fs


def _s3_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


@functools.lru_cache(maxsize=8)
def _s3(endpoint: str):
    """One S3FileSystem per S3-compatible endpoint (credentials from the environment, as the AWS SDK
    reads them); AWS itself goes through ``from_uri``, which finds the bucket's region."""
    from pyarrow.fs import S3FileSystem

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    parts = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return S3FileSystem(region=region, endpoint_override=parts.netloc, scheme=parts.scheme or "https")


def _fsspec(url: str):
    """(pyarrow FileSystem over fsspec's, key) for a scheme pyarrow does not know, or None."""
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fs, key = fsspec.core.url_to_fs(url)
    except Exception:  # noqa: BLE001 - not installed, or no fsspec implementation for the scheme
        return None
    return PyFileSystem(FSSpecHandler(fs)), key


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
