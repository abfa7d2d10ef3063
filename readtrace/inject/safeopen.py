"""The handle the patched ``safetensors.safe_open`` returns for torch: own-fd/both load the whole file
sequentially on the first tensor asked for (one load shared by the handles open on it at once),
otherwise the original handle serves; every tensor and slice handed out is recorded."""

from __future__ import annotations

import os

from readtrace.inject.callrecords import flush, record
from readtrace.inject.routing import (
    lever_kwargs,
    populate_mapping,
    prefetch_once,
    share,
    strategy_for,
    unshare,
)
from readtrace.inject.shimstate import REFUSED, STATE, Inside, inside
from readtrace.inject.startup import wait_prefetched
from readtrace.loader.fileio import open_fd
from readtrace.loader.header import read_header
from readtrace.rerun.protocol import prefetches, routes


def safe_open(filename, framework, device="cpu", *args, **kwargs):
    """``safetensors.safe_open``: a recording handle for torch, the original for anything else."""
    original = STATE.originals["safe_open"]
    if inside() or framework not in ("pt", "torch"):
        return original(filename, framework, device, *args, **kwargs)
    return Handle(original, filename, framework, STATE.config.device or device, args, kwargs)


class Handle:
    """A safe_open handle. own-fd/both: header read here, the whole file loaded sequentially on the
    first tensor asked for; otherwise the original handle. Every tensor handed out is recorded."""

    def __init__(self, original, filename, framework, device, args, kwargs):
        self._path = os.path.abspath(os.fspath(filename))
        self._seconds, self._fallback, self._records = 0.0, None, []
        self._tensors = self._header = self._inner = self._shared = None
        self._mode = "none"
        with self._timed():
            self._mode = strategy_for(self._path, device)
            self._device = device
            wait_prefetched(self._path)
            populate = prefetches(self._mode) and prefetch_once(self._path)
            if routes(self._mode) and not args and set(kwargs) <= {"backend"}:
                try:
                    with open_fd(self._path) as fd:
                        self._header = read_header(fd, self._path)
                    self._shared = share(self._key)
                except REFUSED as e:
                    self._fallback = str(e)
            if self._header is None:
                self._inner = original(filename, framework, device, *args, **lever_kwargs(kwargs))
                if populate:
                    populate_mapping(self._path)

    def keys(self):
        return sorted(self._header.names) if self._header else self._inner.keys()

    def offset_keys(self):
        return self._header.names if self._header else self._inner.offset_keys()

    def metadata(self):
        return self._header.metadata if self._header else self._inner.metadata()

    def get_tensor(self, name):
        with self._timed():
            tensor = self._tensors[name] if self._loaded() else self._inner.get_tensor(name)
        self._records.append((name, tensor, None))
        return tensor

    def get_tensors(self):
        with self._timed():
            tensors = dict(self._tensors) if self._loaded() else self._inner.get_tensors()
        self._records.extend((name, tensor, None) for name, tensor in tensors.items())
        return tensors

    def get_slice(self, name):
        with self._timed():
            if self._loaded():
                info = next(t for t in self._header.tensors if t.name == name)
                return Slice(self, name, self._tensors[name], info.dtype_name)
            return Slice(self, name, self._inner.get_slice(name), None)

    def _loaded(self) -> bool:
        """Load the whole file with the own-fd loader on first use; False: serve from the original."""
        if self._header is not None and self._tensors is None:
            try:
                self._tensors = self._shared.tensors_of(self._path, self._device)
            except REFUSED as e:  # e.g. no GPU: the original handle serves every tensor
                self._fallback, self._header = str(e), None
                self._inner = STATE.originals["safe_open"](self._path, "pt", self._device)
        return self._tensors is not None

    def _timed(self):
        return Inside(self._spent)

    def _spent(self, seconds: float) -> None:
        self._seconds += seconds

    def close(self):
        if self._records or self._seconds:
            record("safe_open", self._path, self._mode, self._seconds, self._fallback, self._records, None)
            self._records = []
            self._seconds = 0.0
            flush()
        if self._inner is not None and hasattr(self._inner, "__exit__"):
            self._inner.__exit__(None, None, None)
        if self._shared is not None:
            unshare(self._key, self._shared)
            self._shared = None

    @property
    def _key(self) -> tuple[str, str]:
        return self._path, str(self._device)

    def __enter__(self):
        if self._inner is not None and hasattr(self._inner, "__enter__"):
            self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to report to
            return


class Slice:
    """What get_slice returns: shape/dtype queries and indexing; every indexed result is recorded."""

    def __init__(self, handle: Handle, name: str, source, dtype_name: str | None):
        self._handle, self._name, self._source, self._dtype_name = handle, name, source, dtype_name

    def get_shape(self):
        return list(self._source.shape) if self._dtype_name else self._source.get_shape()

    def get_dtype(self):
        return self._dtype_name or self._source.get_dtype()

    def __getitem__(self, index):
        with self._handle._timed():
            part = self._source[index]
        self._handle._records.append((self._name, part, index))
        return part
