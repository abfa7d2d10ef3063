"""The own-fd sequential safetensors loader.

``load_file(path, device)`` returns what ``safetensors.torch.load_file`` returns (same names, dtypes,
shapes and bytes) but reads the file its own way: a new fd per reader (never a handle shared with other
threads or processes), the header validated here, then the data section in big sequential chunks.

- CPU target: one allocation for the whole data section, read straight into it; tensors are views.
- CUDA target: chunks land in pinned staging buffers and are copied to one device allocation on a
  side stream, so the next read overlaps the previous host-to-device copy (events guard buffer reuse).
- ``threads > 1``: each thread owns one contiguous range of the data section and its own fd, so every
  handle still sees a purely sequential stream.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from readtrace.fs.knowledge import is_remote
from readtrace.loader.devicecopy import CACHED_READERS, copy_cached, copy_through_staging
from readtrace.loader.errors import CheckpointFormatError, DeviceUnavailableError
from readtrace.loader.fileio import DEFAULT_CHUNK_BYTES, open_fd, range_cached, read_into, tensor_bytes
from readtrace.loader.header import Header, header_from_bytes, read_header
from readtrace.loader.spans import split_spans

DEFAULT_BUFFERS = 2
MAX_CUDA_THREADS = 16
MADV_POPULATE_READ = 22  # linux/mman.h; not in Python's mmap module


def load_file(
    path: str | os.PathLike,
    device: str | int | torch.device = "cpu",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    pinned: bool = True,
    threads: int | None = None,
    num_buffers: int = DEFAULT_BUFFERS,
    cpu_storage: str = "auto",
    register_cached: bool = False,
) -> dict[str, torch.Tensor]:
    """Load every tensor of the safetensors file ``path`` onto ``device``.

    ``chunk_bytes`` is the size of each read; ``pinned`` stages device copies in page-locked memory;
    ``threads`` readers each own a contiguous range and an fd (default: 1 for CPU, where filling
    fresh memory costs more than reading; up to 16 for CUDA, where reading from the page cache into
    reused pinned buffers must keep up with the copy engine); ``num_buffers`` staging buffers per
    reader (2 = double buffering). ``cpu_storage`` for a CPU target: ``copy`` reads into one fresh
    allocation; ``map`` reads the data section sequentially through the same fd (into the page
    cache) and then maps the file privately, so the tensors share the page cache's pages instead of
    paying for first touch of fresh memory (one fd, one open: it works on FUSE mounts that drop the
    cache on every open). ``auto`` (default): ``map`` on local file systems, ``copy`` on FUSE and
    network ones, where a later open() by anyone may invalidate the cached pages under a mapping
    and every touch would fetch them again. ``register_cached`` (CUDA, off by default): a data section
    that is all in the page cache is copied straight from its pages, registered for DMA by two
    readers (``readtrace.loader.devicecopy``); on an H200 it was not faster than the staging buffers
    (docs/fix.md, "On a GPU").
    Raises ``CheckpointFormatError`` (a ValueError) for a malformed, truncated or empty file.
    """
    target = resolve_device(device)
    if threads is None:
        threads = min(MAX_CUDA_THREADS, os.cpu_count() or 1) if target.type == "cuda" else 1
    if chunk_bytes <= 0 or threads <= 0 or num_buffers <= 0:
        raise ValueError("chunk_bytes, threads and num_buffers must be positive")
    if cpu_storage not in ("auto", "copy", "map"):
        raise ValueError(f"cpu_storage must be auto, copy or map, not {cpu_storage!r}")
    if cpu_storage == "auto":
        cpu_storage = "copy" if is_remote(path) else "map"
    with open_fd(path) as fd:
        header = read_header(fd, path)
        if target.type == "cpu" and cpu_storage == "map":
            return tensor_views(header, _read_then_map(path, fd, header, chunk_bytes))
        stage_on = target if target.type in ("cpu", "cuda") else torch.device("cpu")
        storage = torch.empty(header.data_len, dtype=torch.uint8, device=stage_on)
        if stage_on.type == "cuda" and register_cached and header.data_len and \
                range_cached(fd, header.data_start, header.data_len):
            readers = min(threads, CACHED_READERS)
            got = copy_cached(path, header.data_start, storage, readers=readers, registering=readers,
                              chunk_bytes=chunk_bytes, pinned=pinned, num_buffers=num_buffers)
            if got != header.data_len:
                raise CheckpointFormatError(path, f"truncated while reading: got {got} of {header.data_len} bytes")
        else:
            reader = _device_reader(chunk_bytes, pinned, num_buffers) if stage_on.type == "cuda" \
                else _host_reader(chunk_bytes)
            _read_section(path, fd, header, storage, reader, threads)
    if storage.device != target:
        storage = storage.to(target)
    return tensor_views(header, storage)


def tensors_from_memory(path: str | os.PathLike, data: memoryview,
                        device: str | int | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path`` whose whole bytes are already in ``data`` (a
    writable buffer, e.g. an early read), onto ``device``: on the CPU they view ``data`` itself."""
    target = resolve_device(device)
    header = header_from_bytes(data, path)
    if header.data_len == 0:
        storage = torch.empty(0, dtype=torch.uint8)
    else:
        storage = torch.frombuffer(data, dtype=torch.uint8, count=header.data_len, offset=header.data_start)
    if target.type != "cpu":
        storage = storage.to(target)
    return tensor_views(header, storage)


def resolve_device(device: str | int | torch.device) -> torch.device:
    """``"cuda"``, ``0``, ``"cuda:1"``, ``torch.device(...)`` -> a torch.device; checks CUDA exists."""
    target = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"device {target} requested but no CUDA GPU is available")
        if target.index is None:
            target = torch.device("cuda", torch.cuda.current_device())
    return target


def tensor_views(header: Header, storage: torch.Tensor) -> dict[str, torch.Tensor]:
    """Tensors as views into ``storage`` (the data section); misaligned ones get their own copy."""
    tensors: dict[str, torch.Tensor] = {}
    for info in header.tensors:
        if info.nbytes == 0:
            tensors[info.name] = torch.empty(info.shape, dtype=info.dtype, device=storage.device)
            continue
        raw = storage[info.begin:info.end]
        if raw.data_ptr() % info.dtype.itemsize:  # unaligned: torch cannot view it as a wider dtype
            raw = raw.clone()
        tensors[info.name] = raw.view(info.dtype).view(info.shape)
    return tensors


def _read_then_map(path, fd: int, header: Header, chunk_bytes: int) -> torch.Tensor:
    """Read the data section front to back through ``fd`` (filling the page cache), then map it."""
    if header.data_len == 0:
        return torch.empty(0, dtype=torch.uint8)
    scratch = memoryview(bytearray(min(chunk_bytes, header.data_len)))
    pos = 0
    while pos < header.data_len:
        n = read_into(fd, scratch[:min(len(scratch), header.data_len - pos)], header.data_start + pos,
                      chunk_bytes=chunk_bytes)
        if n == 0:
            raise CheckpointFormatError(path, f"truncated while reading: got {pos} of {header.data_len} bytes")
        pos += n
    size = header.data_start + header.data_len
    if os.fstat(fd).st_size < size:
        raise CheckpointFormatError(path, "truncated while reading: the file shrank")
    # Private and writable, like safetensors' own mapping: a write copies that page, the file never
    # changes. MAP_POPULATE would pre-fault for writing and copy every page; MADV_POPULATE_READ maps
    # the cached pages read-only in one call (Linux 5.14+; older kernels fault them in on first use).
    mapped = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    with contextlib.suppress(OSError):
        mapped.madvise(MADV_POPULATE_READ)
    return torch.frombuffer(mapped, dtype=torch.uint8, count=header.data_len, offset=header.data_start)


# A reader fills ``dest`` (a uint8 tensor slice) from ``offset`` of ``fd``; returns the bytes read.
Reader = Callable[[int, int, torch.Tensor], int]


def _read_section(path, fd: int, header: Header, storage: torch.Tensor, reader: Reader, threads: int) -> None:
    spans = split_spans(header.data_len, threads)

    def read_span(index: int) -> None:
        start, end = spans[index]
        if index == 0:
            got = reader(fd, header.data_start + start, storage[start:end])
        else:
            with open_fd(path) as own_fd:
                got = reader(own_fd, header.data_start + start, storage[start:end])
        if got != end - start:
            raise CheckpointFormatError(path, f"truncated while reading: got {got} of {end - start} bytes "
                                              f"at data offset {start}")

    if len(spans) <= 1:
        for i in range(len(spans)):
            read_span(i)
        return
    with ThreadPoolExecutor(len(spans), thread_name_prefix="readtrace-load") as pool:
        for future in [pool.submit(read_span, i) for i in range(len(spans))]:
            future.result()


def _host_reader(chunk_bytes: int) -> Reader:
    def read(fd: int, offset: int, dest: torch.Tensor) -> int:
        return read_into(fd, tensor_bytes(dest), offset, chunk_bytes=chunk_bytes)

    return read


def _device_reader(chunk_bytes: int, pinned: bool, num_buffers: int) -> Reader:
    def read(fd: int, offset: int, dest: torch.Tensor) -> int:
        with torch.cuda.device(dest.device):  # reader threads start on device 0
            return copy_through_staging(fd, offset, dest, min(chunk_bytes, dest.numel()), pinned, num_buffers)

    return read
