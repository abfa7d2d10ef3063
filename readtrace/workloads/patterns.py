"""Read patterns of real model loaders. Each takes the files' tensor layouts and returns
{name: CPU tensor}; multi-worker patterns give every worker its own contiguous stretch of the
file, which it walks in order (each worker is consecutive; the merged stream on a shared handle
jumps between the stretches)."""

from __future__ import annotations

import functools
import mmap
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
from safetensors.torch import load_file

from readtrace.errors import InputError, ReadtraceError, UsageError
from readtrace.inject.hook import recorded_call
from readtrace.workloads.layout import TensorInfo, split_contiguous

Tensors = dict[str, torch.Tensor]
CHUNK = 16 * 1024 * 1024


def _empty(t: TensorInfo) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype)


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """The tensor's storage as a writable byte buffer (0-dim and bool tensors included)."""
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy()).cast("B")


def _pread_exact(fd: int, buf: memoryview, offset: int) -> None:
    """pread until ``buf`` is full (FUSE and network file systems return short reads)."""
    done = 0
    while done < len(buf):
        n = os.preadv(fd, [buf[done:done + CHUNK]], offset + done)
        if n == 0:
            raise InputError(f"file ended early at byte {offset + done}")
        done += n


def _by_file(layout: list[TensorInfo]) -> dict[str, list[TensorInfo]]:
    files: dict[str, list[TensorInfo]] = {}
    for t in layout:
        files.setdefault(t.path, []).append(t)
    return files


def safetensors_default(layout: list[TensorInfo], workers: int) -> Tensors:
    """``safetensors.torch.load_file`` per file, then touch every page of every tensor."""
    out: Tensors = {}
    for path in _by_file(layout):
        out.update(load_file(path))
    for tensor in out.values():
        _bytes_of(tensor)[::4096].tobytes()  # fault in lazily mapped storage
    return out


def mmap_threads(layout: list[TensorInfo], workers: int) -> Tensors:
    """One private mapping per file; ``workers`` torch threads copy their stretch out of it, so their
    page faults all go through one open file."""
    out: Tensors = {}
    for path, tensors in _by_file(layout).items():
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:

            def copy_run(run: list[TensorInfo], mapped=mapped) -> Tensors:
                got = {}
                for t in run:
                    src = torch.frombuffer(mapped, dtype=torch.uint8, count=t.nbytes, offset=t.start)
                    dst = _empty(t)
                    dst.reshape(-1).view(torch.uint8).copy_(src)
                    got[t.name] = dst
                return got

            # One intra-op thread: each worker's copies stay in that worker's task, as in a loader
            # whose N threads each walk their own stretch of the mapping.
            intra_op = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                with ThreadPoolExecutor(workers) as pool:
                    for got in pool.map(copy_run, split_contiguous(tensors, workers)):
                        out.update(got)
            finally:
                torch.set_num_threads(intra_op)
            del copy_run  # drop the closure's reference before the mapping closes
    return out


def _forked(layout: list[TensorInfo], workers: int, shared_fd: bool) -> Tensors:
    """Forked workers pread their stretch into one shared anonymous mapping; with ``shared_fd`` they
    use the descriptor the parent opened before forking (one open file, one FUSE handle)."""
    out: Tensors = {}
    for path, tensors in _by_file(layout).items():
        base = tensors[0].start
        size = tensors[-1].end - base
        shared = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_SHARED)
        fd = os.open(path, os.O_RDONLY) if shared_fd else -1
        try:
            gate_r, gate_w = os.pipe()  # workers start together, as in a long load where fork skew is noise
            try:
                pids = [_fork(functools.partial(_pread_run, path, fd, run, shared, base), gate_r, gate_w)
                        for run in split_contiguous(tensors, workers)]
            finally:
                os.close(gate_w)
                os.close(gate_r)
            failed = [pid for pid in pids if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
            if failed:
                raise ReadtraceError(f"{len(failed)} loader worker(s) failed reading {path}")
            for t in tensors:
                tensor = _empty(t)
                _bytes_of(tensor)[:] = shared[t.start - base:t.end - base]
                out[t.name] = tensor
        finally:
            if fd >= 0:
                os.close(fd)
            shared.close()
    return out


def _fork(work: Callable[[], None], gate_r: int, gate_w: int) -> int:
    """Fork a worker that waits until the parent closes ``gate_w``, then runs ``work``."""
    pid = os.fork()
    if pid == 0:  # child: run, report by exit status only, never return into the caller's stack
        code = 1
        try:
            os.close(gate_w)
            os.read(gate_r, 1)  # EOF once the parent has forked every worker
            work()
            code = 0
        except BaseException as e:  # noqa: B036 - the child must reach os._exit whatever happens
            print(f"loader worker {os.getpid()}: {e}", file=sys.stderr)
        finally:
            os._exit(code)
    return pid


def _pread_run(path: str, fd: int, run: list[TensorInfo], shared: mmap.mmap, base: int) -> None:
    own = fd < 0
    if own:
        fd = os.open(path, os.O_RDONLY)
    try:
        view = memoryview(shared)
        for t in run:
            _pread_exact(fd, view[t.start - base:t.end - base], t.start)
    finally:
        if own:
            os.close(fd)


def fork_shared_fd(layout: list[TensorInfo], workers: int) -> Tensors:
    """Workers forked after one open(); they pread through the inherited fd (the gcsfuse seed case)."""
    return _forked(layout, workers, shared_fd=True)


def fork_own_fd(layout: list[TensorInfo], workers: int) -> Tensors:
    """Forked workers, each opening the file itself."""
    return _forked(layout, workers, shared_fd=False)


def per_tensor_pread(layout: list[TensorInfo], workers: int) -> Tensors:
    """transformers-like: one reader preads tensor by tensor in the model's (name) order, not the
    file's, so the handle jumps wherever the two orders differ."""
    out: Tensors = {}
    for path, tensors in _by_file(layout).items():
        fd = os.open(path, os.O_RDONLY)
        try:
            for t in sorted(tensors, key=lambda t: t.name):
                tensor = _empty(t)
                _pread_exact(fd, _bytes_of(tensor), t.start)
                out[t.name] = tensor
        finally:
            os.close(fd)
    return out


def _read_sequential(path: str, tensors: list[TensorInfo]) -> Tensors:
    """Read a file's data section front to back in 16 MiB reads, then cut it into tensors."""
    base = tensors[0].start
    blob = bytearray(tensors[-1].end - base)
    fd = os.open(path, os.O_RDONLY)
    try:
        _pread_exact(fd, memoryview(blob), base)
    finally:
        os.close(fd)
    out: Tensors = {}
    for t in tensors:
        tensor = _empty(t)
        _bytes_of(tensor)[:] = blob[t.start - base:t.end - base]
        out[t.name] = tensor
    return out


def sequential(layout: list[TensorInfo], workers: int) -> Tensors:
    """One reader, big sequential reads, one file after the other."""
    out: Tensors = {}
    for path, tensors in _by_file(layout).items():
        out.update(_read_sequential(path, tensors))
    return out


def sharded(layout: list[TensorInfo], workers: int) -> Tensors:
    """Shards loaded in parallel: ``workers`` threads, each reading whole shards sequentially
    through its own fd."""
    files = _by_file(layout)
    if len(files) < 2:
        raise UsageError("pattern sharded needs a checkpoint of >= 2 shard files")
    out: Tensors = {}
    with ThreadPoolExecutor(workers) as pool:
        for got in pool.map(lambda item: _read_sequential(*item), files.items()):
            out.update(got)
    return out


def _recorded(pattern: Callable[[list[TensorInfo], int], Tensors]) -> Callable[[list[TensorInfo], int], Tensors]:
    """Registered with the rerun shim, which cannot route these loaders: it records what they load."""
    @functools.wraps(pattern)
    def run(layout: list[TensorInfo], workers: int) -> Tensors:
        return recorded_call(f"pattern:{pattern.__name__}", lambda: pattern(layout, workers),
                             [(t.path, t.name) for t in layout])

    return run


PATTERNS: dict[str, Callable[[list[TensorInfo], int], Tensors]] = {name: _recorded(pattern) for name, pattern in {
    "safetensors-default": safetensors_default,
    "mmap-threads": mmap_threads,
    "fork-shared-fd": fork_shared_fd,
    "fork-own-fd": fork_own_fd,
    "per-tensor-pread": per_tensor_pread,
    "sequential": sequential,
    "sharded": sharded,
}.items()}
