"""Route an unchanged script's safetensors loads to the fix, and record what it loaded.

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

This module patches and holds the entry points; the rest of the shim: ``shimstate`` (its one state,
read at import), ``routing`` (strategy, prefetch, own-fd load), ``safeopen`` (the safe_open handle),
``callrecords`` (the manifest records and their digests).
"""

from __future__ import annotations

import os
import time

from readtrace.inject import loaded
from readtrace.inject.callrecords import flush, record, record_import
from readtrace.inject.failclosed import guarded
from readtrace.inject.routing import (
    RoutedCall,
    lever_kwargs,
    own_fd_tensors,
    populate_mapping,
    read_own_fd,
    routed,
)
from readtrace.inject.safeopen import safe_open
from readtrace.inject.shimstate import REFUSED, STATE, Inside, inside
from readtrace.inject.startup import wait_prefetched
from readtrace.rerun.protocol import LeverName, Rerun, routes


@guarded("patch of a loader module")
def patch(name: str, module) -> None:
    """Called by the import hook right after ``safetensors`` or ``safetensors.torch`` ran."""
    with STATE.lock:
        if name in STATE.patched:
            return
        STATE.patched.add(name)
    if name == "safetensors":
        STATE.originals["safe_open"] = module.safe_open
        module.safe_open = safe_open
    elif name == "safetensors.torch":
        STATE.originals["load_file"] = module.load_file
        module.load_file = load_file
        module.safe_open = safe_open  # in case safetensors was imported before the hook
        STATE.originals["load"] = module.load
        module.load = load_bytes
    elif name == "torch":
        STATE.originals["torch_load"] = module.load
        module.load = torch_load
    elif name == DCP:
        STATE.originals["dcp_load"] = module.load
        module.load = dcp_load
    elif name in LIBRARIES:
        record_import(LIBRARIES[name])
        if STATE.config.lever == LeverName.DISABLE_MMAP:
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


def load_file(filename, device="cpu", *args, **kwargs):
    """``safetensors.torch.load_file`` routed through the configured strategy."""
    original = STATE.originals["load_file"]
    path = os.path.abspath(os.fspath(filename))
    device = STATE.config.device or device
    nested = inside()  # called by a recorded loader: route, do not record

    def finished(call: RoutedCall) -> None:
        records = [] if nested else [(n, t, None) for n, t in (call.result or {}).items()]  # the caller records them
        record("load_file", path, call.mode, call.seconds, call.fallback, records, call.error, nested=nested)

    with routed(path, device, finished) as call:
        if routes(call.mode) and not args and set(kwargs) <= {"backend"}:
            try:
                call.result = own_fd_tensors(path, device)
            except REFUSED as e:
                call.fallback = str(e)
                call.result = original(filename, device, *args, **kwargs)
        else:
            call.result = original(filename, device, *args, **lever_kwargs(kwargs))
            if call.populate:
                populate_mapping(path)
    return call.result


def load_bytes(data, *args, **kwargs):
    """``safetensors.torch.load(bytes)`` (transformers' and diffusers' disable_mmap path): recorded
    under the checkpoint file whose bytes these are, when the rerun knows it."""
    started = time.perf_counter()
    tensors = STATE.originals["load"](data, *args, **kwargs)
    if not inside():
        path = _file_of_bytes(data)
        record("load", path, "none", time.perf_counter() - started, None,
               [(n, t, None) for n, t in tensors.items()], None, digest=True)
        flush()
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
    original = STATE.originals["torch_load"]
    if inside() or not isinstance(f, str | os.PathLike):
        return original(f, *args, **kwargs)
    path = os.path.abspath(os.fspath(f))
    asked_mmap = bool(kwargs.get("mmap"))

    def finished(call: RoutedCall) -> None:
        records = [(n, t, None) for n, t in loaded.flatten(call.result)] if call.result is not None else []
        record("torch.load", path, call.mode, call.seconds, None, records, call.error,
               parse=lambda data: loaded.first_tensor_names(loaded.flatten(loaded.torch_from_bytes(data, kwargs))),
               mmap=asked_mmap)

    with routed(path, kwargs.get("map_location") or (args[0] if args else "cpu"), finished) as call:
        if routes(call.mode):
            call.result = loaded.torch_from_memory(original, read_own_fd(path), args, kwargs)
        else:
            if STATE.config.lever == LeverName.TORCH_LOAD_NO_MMAP:
                kwargs = {**kwargs, "mmap": False}
            call.result = original(f, *args, **kwargs)
            if call.populate and asked_mmap:
                populate_mapping(path)
    return call.result


DCP = "torch.distributed.checkpoint"


def dcp_load(state_dict, *args, **kwargs):
    """``torch.distributed.checkpoint.load``: fills ``state_dict`` in place; its tensors are recorded
    (digested in memory) under the checkpoint directory, so that two runs compare what they loaded."""
    original = STATE.originals["dcp_load"]
    if inside():
        return original(state_dict, *args, **kwargs)
    reader = kwargs.get("storage_reader")
    where = kwargs.get("checkpoint_id") or getattr(reader, "path", None)
    path = os.path.abspath(os.fspath(where)) if where is not None else "<dcp>"
    started, error = time.perf_counter(), None
    try:
        with Inside():
            return original(state_dict, *args, **kwargs)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        records = [] if error else [(n, t, None) for n, t in loaded.flatten(state_dict)]
        record("dcp.load", path, STATE.config.strategy, time.perf_counter() - started, None, records, error,
               digest=True)
        flush()


def record_loader(call: str, load, tensor_files: list[tuple[str, str]]) -> dict:
    """Run a loader the shim cannot route (see hook.recorded_call) and record the tensors it returns."""
    started = time.perf_counter()
    with Inside():
        for path in {p for p, _ in tensor_files}:
            wait_prefetched(path)
        tensors = load()
    seconds = time.perf_counter() - started
    by_file: dict[str, list] = {}
    for path, name in tensor_files:
        by_file.setdefault(os.path.abspath(path), []).append((name, tensors[name], None))
    for i, (path, records) in enumerate(by_file.items()):
        record(call, path, STATE.config.strategy, seconds if i == 0 else 0.0, None, records, None, digest=True)
    flush()
    return tensors


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
