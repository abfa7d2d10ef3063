"""Route an unchanged script's safetensors loads to the fix, and record what it loaded.
Over 400 lines: one module state, read at import time, shared by every patched entry point (split: issue 27).

Patched (by the sitecustomize hook, as the modules are imported): ``safetensors.safe_open`` and
``safetensors.torch.load_file`` (diffusers and transformers call through these). What to do comes
from the environment through ``protocol.Rerun``:

- ``strategy``: ``none`` (record only), ``prefetch`` (stream the file into the page cache, then
  the original loader), ``own-fd`` (the own-fd sequential loader), ``both``, or ``auto`` (per file:
  ``both`` on FUSE/network file systems, else ``own-fd`` for CUDA targets and ``none`` for CPU).
- ``device``: load onto this device instead of the one asked for (default: as asked).
- ``manifest``: append one JSON line per loaded tensor (name, dtype, shape, sha256) and
  one per loader call (seconds inside it; digests are computed after the clock stops).
- ``chunk_mib``, ``threads``, ``prefetch_threads``, ``prefetch_distributed``: reader tuning.
- ``lever``: apply one of the loaders' own levers instead (``readtrace.fix.levers``).

``torch.load`` and ``safetensors.torch.load`` (bytes) are recorded too; ``torch.load`` of a path is
routed like load_file (own-fd: read once on an fd of our own, then parsed from memory).

A file our loader refuses (malformed, no GPU ...) goes to the original function, which then fails or
succeeds exactly as it would have without the shim; the call record names the reason.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from readtrace.errors import ReadtraceError
from readtrace.fs.knowledge import is_remote
from readtrace.inject import early, loaded
from readtrace.inject.failclosed import guarded
from readtrace.inject.manifest import tensor_record
from readtrace.inject.startup import already_prefetched, release_pin, wait_prefetched
from readtrace.loader import loader
from readtrace.loader.errors import LoaderError
from readtrace.loader.fileio import chunk_bytes_of, open_fd, read_into
from readtrace.loader.header import read_header
from readtrace.pagecache import prefetch as prefetcher
from readtrace.pagecache.populate import populate
from readtrace.pagecache.residency import cache_survives_open
from readtrace.rerun.protocol import LeverName, Rerun, append_manifest, prefetches, process_rank, routes
from readtrace.rerun.records import LoaderCall, PopulateCall, Record, Tensor

# What our loader may raise for a file the original loader should then be given (it fails or
# succeeds as it would have without the shim).
_REFUSED = (LoaderError, OSError, ValueError)


@dataclass
class Config:
    strategy: str = "none"
    device: str | None = None
    manifest: str | None = None
    chunk_bytes: int = loader.DEFAULT_CHUNK_BYTES
    threads: int | None = None  # the loader's default
    prefetch_threads: int = prefetcher.DEFAULT_THREADS
    prefetch_distributed: bool | None = None
    lever: str | None = None

    @classmethod
    def from_env(cls, env=os.environ) -> Config:
        rerun = Rerun.from_env(env)
        return cls(
            strategy=rerun.strategy,
            device=rerun.device,
            manifest=rerun.manifest,
            chunk_bytes=chunk_bytes_of(rerun.chunk_mib),
            threads=rerun.threads,
            prefetch_threads=rerun.prefetch_threads or prefetcher.DEFAULT_THREADS,
            prefetch_distributed=None if rerun.prefetch_distributed else False,
            lever=rerun.lever,
        )


@dataclass
class _State:
    config: Config
    originals: dict = field(default_factory=dict)
    prefetched: set = field(default_factory=set)
    pending: list = field(default_factory=list)
    patched: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    local: threading.local = field(default_factory=threading.local)  # .inside: in a patched call


_STATE = _State(Config.from_env())


@guarded("patch of a loader module")
def patch(name: str, module) -> None:
    """Called by the import hook right after ``safetensors`` or ``safetensors.torch`` ran."""
    with _STATE.lock:
        if name in _STATE.patched:
            return
        _STATE.patched.add(name)
    if name == "safetensors":
        _STATE.originals["safe_open"] = module.safe_open
        module.safe_open = safe_open
    elif name == "safetensors.torch":
        _STATE.originals["load_file"] = module.load_file
        module.load_file = load_file
        module.safe_open = safe_open  # in case safetensors was imported before the hook
        _STATE.originals["load"] = module.load
        module.load = load_bytes
    elif name == "torch":
        _STATE.originals["torch_load"] = module.load
        module.load = torch_load
    elif name == DCP:
        _STATE.originals["dcp_load"] = module.load
        module.load = dcp_load
    elif name in LIBRARIES:
        _record_import(LIBRARIES[name])
        if _STATE.config.lever == LeverName.DISABLE_MMAP:
            _force_kwarg(getattr(module, CLASSES[name], None), "disable_mmap", True)


LIBRARIES = {"transformers.modeling_utils": "transformers", "diffusers.models.modeling_utils": "diffusers"}
CLASSES = {"transformers.modeling_utils": "PreTrainedModel", "diffusers.models.modeling_utils": "ModelMixin"}


def _force_kwarg(cls, key: str, value) -> None:
    """Make ``cls.from_pretrained`` (a classmethod) default ``key`` to ``value`` (a lever)."""
    if cls is None or not hasattr(cls, "from_pretrained"):
        return
    original = cls.from_pretrained.__func__

    def from_pretrained(klass, *args, **kwargs):
        kwargs.setdefault(key, value)
        return original(klass, *args, **kwargs)

    cls.from_pretrained = classmethod(from_pretrained)


@guarded("manifest record")
def _record_import(library: str) -> None:
    if _STATE.config.manifest:
        with _STATE.lock:
            _STATE.pending.append(LoaderCall(call=f"import:{library}", strategy=_STATE.config.strategy, seconds=0.0,
                                             tensors=0, pid=os.getpid()))
        _flush()


@guarded("strategy choice", default="none")
def strategy_for(path: str, device) -> str:
    """The strategy to use for one file: the configured one, or the ``auto`` choice."""
    chosen = _STATE.config.strategy
    if chosen != "auto":
        return chosen
    if not os.path.exists(path):
        return "none"  # let the original loader report it its own way
    if is_remote(path):
        return "both"
    return "own-fd" if str(device).startswith("cuda") or isinstance(device, int) else "none"


@dataclass
class _Call:
    """One patched loader call on a checkpoint path, as ``_routed`` runs and records it."""

    mode: str = "none"
    populate: bool = False  # this call prefetched the file: a mapping of it is populated too
    result: object = None
    fallback: str | None = None
    error: str | None = None
    seconds: float = 0.0


@contextmanager
def _routed(path: str, device, record: Callable[[_Call], None]):
    """Around one patched call on ``path``: picks the strategy, waits for the start-up prefetch,
    prefetches once where the strategy does, and records the call (its error too) when it ends."""
    call, started = _Call(), time.perf_counter()
    call.mode = strategy_for(path, device)
    try:
        with _Inside():
            wait_prefetched(path)
            call.populate = prefetches(call.mode) and _prefetch_once(path)
            yield call
    except Exception as e:
        call.error = f"{type(e).__name__}: {e}"
        raise
    finally:
        call.seconds = time.perf_counter() - started
        record(call)
        _flush()


def load_file(filename, device="cpu", *args, **kwargs):
    """``safetensors.torch.load_file`` routed through the configured strategy."""
    original = _STATE.originals["load_file"]
    path = os.path.abspath(os.fspath(filename))
    device = _STATE.config.device or device
    nested = getattr(_STATE.local, "inside", False)  # called by a recorded loader: route, do not record

    def record(call: _Call) -> None:
        records = [] if nested else [(n, t, None) for n, t in (call.result or {}).items()]  # the caller records them
        _record("load_file", path, call.mode, call.seconds, call.fallback, records, call.error, nested=nested)

    with _routed(path, device, record) as call:
        if routes(call.mode) and not args and set(kwargs) <= {"backend"}:
            try:
                call.result = _own_fd_tensors(path, device)
            except _REFUSED as e:
                call.fallback = str(e)
                call.result = original(filename, device, *args, **kwargs)
        else:
            call.result = original(filename, device, *args, **_lever_kwargs(kwargs))
            if call.populate:
                _populate_mapping(path)
    return call.result


def _lever_kwargs(kwargs: dict) -> dict:
    if _STATE.config.lever == LeverName.SAFETENSORS_PREAD and "backend" not in kwargs:
        return {**kwargs, "backend": "pread"}
    return kwargs


def load_bytes(data, *args, **kwargs):
    """``safetensors.torch.load(bytes)`` (transformers' and diffusers' disable_mmap path): recorded
    under the checkpoint file whose bytes these are, when the rerun knows it."""
    started = time.perf_counter()
    tensors = _STATE.originals["load"](data, *args, **kwargs)
    if not getattr(_STATE.local, "inside", False):
        path = _file_of_bytes(data)
        _record("load", path, "none", time.perf_counter() - started, None,
                [(n, t, None) for n, t in tensors.items()], None, digest=True)
        _flush()
    return tensors


def _file_of_bytes(data) -> str:
    """The comparison's checkpoint (Rerun.files) of the same size whose first bytes match, else '<bytes>'."""
    head = bytes(data[:4096])
    for path in Rerun.from_env().files:
        try:
            if path and os.path.getsize(path) == len(data):
                with open(path, "rb") as f:
                    if f.read(len(head)) == head:
                        return os.path.abspath(path)
        except OSError:
            continue
    return "<bytes>"


def torch_load(f, *args, **kwargs):
    """``torch.load``: a checkpoint path is routed (prefetch / own-fd read / the mmap=False lever)
    and its tensors recorded; file objects go to the original, recorded as loaded."""
    original = _STATE.originals["torch_load"]
    if getattr(_STATE.local, "inside", False) or not isinstance(f, str | os.PathLike):
        return original(f, *args, **kwargs)
    path = os.path.abspath(os.fspath(f))
    asked_mmap = bool(kwargs.get("mmap"))

    def record(call: _Call) -> None:
        records = [(n, t, None) for n, t in loaded.flatten(call.result)] if call.result is not None else []
        _record("torch.load", path, call.mode, call.seconds, None, records, call.error,
                parse=lambda data: loaded.first_tensor_names(loaded.flatten(loaded.torch_from_bytes(data, kwargs))),
                mmap=asked_mmap)

    with _routed(path, kwargs.get("map_location") or (args[0] if args else "cpu"), record) as call:
        if routes(call.mode):
            call.result = loaded.torch_from_memory(original, _read_own_fd(path), args, kwargs)
        else:
            if _STATE.config.lever == LeverName.TORCH_LOAD_NO_MMAP:
                kwargs = {**kwargs, "mmap": False}
            call.result = original(f, *args, **kwargs)
            if call.populate and asked_mmap:
                _populate_mapping(path)
    return call.result


DCP = "torch.distributed.checkpoint"


def dcp_load(state_dict, *args, **kwargs):
    """``torch.distributed.checkpoint.load``: fills ``state_dict`` in place; its tensors are recorded
    (digested in memory) under the checkpoint directory, so that two runs compare what they loaded."""
    original = _STATE.originals["dcp_load"]
    if getattr(_STATE.local, "inside", False):
        return original(state_dict, *args, **kwargs)
    reader = kwargs.get("storage_reader")
    where = kwargs.get("checkpoint_id") or getattr(reader, "path", None)
    path = os.path.abspath(os.fspath(where)) if where is not None else "<dcp>"
    started, error = time.perf_counter(), None
    try:
        with _Inside():
            return original(state_dict, *args, **kwargs)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        records = [] if error else [(n, t, None) for n, t in loaded.flatten(state_dict)]
        _record("dcp.load", path, _STATE.config.strategy, time.perf_counter() - started, None, records, error,
                digest=True)
        _flush()


def _own_fd_tensors(path: str, device) -> dict:
    """The own-fd loader's tensors of ``path``: from its early read when there is one, else read now."""
    data = _early_bytes(path)
    if data is not None:
        return loader.tensors_from_memory(path, data, device)
    tensors = loader.load_file(path, device, chunk_bytes=_STATE.config.chunk_bytes, threads=_STATE.config.threads)
    release_pin(path)
    return tensors


@dataclass
class _SharedLoad:
    """One own-fd load of a file, shared by the safe_open handles open on it at the same time
    (threads that each open the checkpoint read it once, not once per thread)."""

    handles: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    tensors: dict | None = None
    identity: tuple | None = None

    def tensors_of(self, path: str, device) -> dict:
        """The tensors, loaded by the first handle that asks; a file that changed since, again."""
        with self.lock:
            current = early.identity(os.stat(path))
            if self.tensors is None or self.identity != current:
                self.tensors, self.identity = _own_fd_tensors(path, device), current
            return self.tensors


_SHARED: dict[tuple[str, str], _SharedLoad] = {}
os.register_at_fork(after_in_child=_SHARED.clear)  # a lock another thread held would never be released


def _share(key: tuple[str, str]) -> _SharedLoad:
    """A handle of ``key`` = (path, device) opens: the load it shares with the others open."""
    with _STATE.lock:
        shared = _SHARED.setdefault(key, _SharedLoad())
        shared.handles += 1
        return shared


def _unshare(key: tuple[str, str], shared: _SharedLoad) -> None:
    """A handle closes: the last one lets go of the load (its tensors live on where they are used)."""
    with _STATE.lock:
        shared.handles -= 1
        if shared.handles == 0 and _SHARED.get(key) is shared:
            del _SHARED[key]


@guarded("early read")
def _early_bytes(path: str) -> memoryview | None:
    """``path``'s bytes as read at start-up (early.py), noted in the manifest; None: there are none."""
    data, note = early.take(path, _STATE.config.strategy)
    if note is not None:
        _pending(note)
    return data


def _read_own_fd(path: str) -> bytearray | memoryview:
    """The whole file, read front to back on an fd of our own in large chunks (or read early)."""
    data = _early_bytes(path)
    if data is not None:
        return data
    with open_fd(path) as fd:
        size = os.fstat(fd).st_size
        buf = bytearray(size)
        got = read_into(fd, memoryview(buf), 0, chunk_bytes=_STATE.config.chunk_bytes)
    return buf if got == size else buf[:got]


def record_loader(call: str, load, tensor_files: list[tuple[str, str]]) -> dict:
    """Run a loader the shim cannot route (see hook.recorded_call) and record the tensors it returns."""
    started = time.perf_counter()
    with _Inside():
        for path in {p for p, _ in tensor_files}:
            wait_prefetched(path)
        tensors = load()
    seconds = time.perf_counter() - started
    by_file: dict[str, list] = {}
    for path, name in tensor_files:
        by_file.setdefault(os.path.abspath(path), []).append((name, tensors[name], None))
    for i, (path, records) in enumerate(by_file.items()):
        _record(call, path, _STATE.config.strategy, seconds if i == 0 else 0.0, None, records, None, digest=True)
    _flush()
    return tensors


def safe_open(filename, framework, device="cpu", *args, **kwargs):
    """``safetensors.safe_open``: a recording handle for torch, the original for anything else."""
    original = _STATE.originals["safe_open"]
    if getattr(_STATE.local, "inside", False) or framework not in ("pt", "torch"):
        return original(filename, framework, device, *args, **kwargs)
    return _Handle(original, filename, framework, _STATE.config.device or device, args, kwargs)


class _Handle:
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
            populate = prefetches(self._mode) and _prefetch_once(self._path)
            if routes(self._mode) and not args and set(kwargs) <= {"backend"}:
                try:
                    with open_fd(self._path) as fd:
                        self._header = read_header(fd, self._path)
                    self._shared = _share(self._key)
                except _REFUSED as e:
                    self._fallback = str(e)
            if self._header is None:
                self._inner = original(filename, framework, device, *args, **_lever_kwargs(kwargs))
                if populate:
                    _populate_mapping(self._path)

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
                return _Slice(self, name, self._tensors[name], info.dtype_name)
            return _Slice(self, name, self._inner.get_slice(name), None)

    def _loaded(self) -> bool:
        """Load the whole file with the own-fd loader on first use; False: serve from the original."""
        if self._header is not None and self._tensors is None:
            try:
                self._tensors = self._shared.tensors_of(self._path, self._device)
            except _REFUSED as e:  # e.g. no GPU: the original handle serves every tensor
                self._fallback, self._header = str(e), None
                self._inner = _STATE.originals["safe_open"](self._path, "pt", self._device)
        return self._tensors is not None

    def _timed(self):
        return _Inside(self)

    def close(self):
        if self._records or self._seconds:
            _record("safe_open", self._path, self._mode, self._seconds, self._fallback, self._records, None)
            self._records = []
            self._seconds = 0.0
            _flush()
        if self._inner is not None and hasattr(self._inner, "__exit__"):
            self._inner.__exit__(None, None, None)
        if self._shared is not None:
            _unshare(self._key, self._shared)
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


class _Slice:
    """What get_slice returns: shape/dtype queries and indexing; every indexed result is recorded."""

    def __init__(self, handle: _Handle, name: str, source, dtype_name: str | None):
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


class _Inside:
    """Marks this thread as inside a patched call, so nested safetensors calls are not recorded twice;
    with a handle, adds the time spent to it."""

    def __init__(self, handle: _Handle | None = None):
        self.handle = handle

    def __enter__(self):
        self.outer = getattr(_STATE.local, "inside", False)
        _STATE.local.inside = True
        self.started = time.perf_counter()

    def __exit__(self, *exc):
        _STATE.local.inside = self.outer
        if self.handle is not None:
            self.handle._seconds += time.perf_counter() - self.started
        return False


@guarded("prefetch", default=False)
def _prefetch_once(path: str) -> bool:
    """Prefetch ``path`` once per process tree. True: this mount drops the page cache on every open,
    so nothing was read: the caller populates the loader's own mapping once it exists instead."""
    with _STATE.lock:
        if path in _STATE.prefetched or already_prefetched(path):
            return False
        _STATE.prefetched.add(path)
    try:
        if not cache_survives_open(path):
            return True  # the loader's own open() would drop what we read now
        prefetcher.prefetch([path], chunk_bytes=_STATE.config.chunk_bytes,
                            threads=_STATE.config.prefetch_threads, progress=False,
                            distributed=_STATE.config.prefetch_distributed)
    except (*_REFUSED, ReadtraceError):
        pass  # the load that follows reports the problem the way the user's loader does
    return False


@guarded("populate")
def _populate_mapping(path: str) -> None:
    """Fault the loader's own mapping of ``path`` in, front to back (no open of ours: see populate)."""
    done, seconds, why = populate(loaded.mapped_ranges(path))
    _pending(PopulateCall(file=path, strategy=_STATE.config.strategy, seconds=seconds, bytes=done, pid=os.getpid(),
                          note=why or None))


@guarded("manifest record")
def _pending(record: Record) -> None:
    """A manifest record written with the next flush."""
    if _STATE.config.manifest:
        with _STATE.lock:
            _STATE.pending.append(record)


@guarded("manifest record")
def _record(call: str, path: str, mode: str, seconds: float, fallback: str | None, tensors,
            error: str | None, *, digest: bool | None = None, nested: bool = False, parse=None,
            mmap: bool | None = None) -> None:
    """Queue one call line and its tensors' lines (``tensors``: (name, tensor, slice index or None)).

    Every tensor is digested now, when the loader call has returned (after the clock stopped): in
    memory where the loader copied it, from the file's bytes as they are now (``readtrace.inject.loaded``,
    read past the page cache) where it is a lazy mapping of the file, so digesting reads nothing
    through the script's mapping. ``digest=False`` leaves the digests to ``manifest.fill_digests``.
    ``parse``: bytes -> {name: tensor} for the file's format (default safetensors); ``mmap``: torch.load's.
    """
    if not _STATE.config.manifest:
        return
    started = time.perf_counter()
    if digest is False:
        lines = [tensor_record(path, name, tensor, index=index, digest=False) for name, tensor, index in tensors]
    else:
        lines = _digested(path, tensors, parse or loaded.safetensors_from_bytes)
    call_line = LoaderCall(call=call, file=path, strategy=mode, seconds=seconds, tensors=len(lines),
                           digest_seconds=time.perf_counter() - started, pid=os.getpid(),
                           lever=_STATE.config.lever or None, mmap=mmap, fallback=fallback or None,
                           error=error or None, nested=nested or None)  # nested: its time counts in its caller
    with _STATE.lock:
        _STATE.pending.extend([*lines, call_line])


def _digested(path: str, tensors, parse) -> list[Tensor]:
    ranges = loaded.mapped_ranges(path) if os.path.exists(path) else []
    from_file = None
    lines = []
    # Under torchrun the host digests mapped tensors after the run (manifest.fill_digests): every rank
    # reading the whole file here would be every rank's byte spans in the trace (rerun/rankplan.py).
    deferred = process_rank() is not None
    for name, tensor, index in tensors:
        if loaded.is_mapped(tensor, ranges):
            if deferred:
                lines.append(tensor_record(path, name, tensor, index=index, digest=False))
                continue
            if from_file is None:
                with _Inside():  # our own parse of the file is not the script's load
                    from_file = parse(loaded.uncached_bytes(path))
            tensor = loaded.lookup(from_file, name, index)
        lines.append(tensor_record(path, name, tensor, index=index, digest=True))
    return lines


@guarded("manifest write")
def _flush() -> None:
    with _STATE.lock:
        lines, _STATE.pending = _STATE.pending, []
    if lines and _STATE.config.manifest:
        append_manifest(_STATE.config.manifest, lines)


atexit.register(_flush)


def _patch_imported_meanwhile() -> None:
    """Modules the shim's own imports loaded (torch) before it was ready: patch them now, when the
    import hook is active (never in a process that merely imports this module)."""
    import sys

    if any(type(f).__name__ == "_SafetensorsHook" for f in sys.meta_path):
        for name in ("safetensors", "safetensors.torch", "torch", DCP):
            if name in sys.modules:
                patch(name, sys.modules[name])


READY = True
_patch_imported_meanwhile()

