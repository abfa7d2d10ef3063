"""The copy of a file range to the GPU: straight from registered page-cache pages where all of it is
cached, through pinned staging buffers otherwise. The cutting and mapping run on real files on any
machine; the CUDA cases compare with safetensors on the device."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from readtrace.loader.devicecopy import PAGE, all_cached, copy_range, copy_registered, register_chunks
from readtrace.loader.fileio import open_fd
from readtrace.pagecache.evict import evict

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@settings(max_examples=200, deadline=None)
@given(offset=st.integers(0, 5 * PAGE), size=st.integers(1, 9 * PAGE), chunk=st.integers(1, 3 * PAGE))
def test_register_chunks_cover_the_range_and_never_share_a_page(offset, size, chunk):
    chunks = register_chunks(offset, size, chunk)
    assert chunks[0][0] == offset and chunks[-1][1] == offset + size
    assert all(a < b for a, b in chunks) and all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:], strict=False))
    pages = [range(a // PAGE, (b - 1) // PAGE + 1) for a, b in chunks]
    assert all(p.stop <= q.start for p, q in zip(pages, pages[1:], strict=False))  # what each registers is disjoint


@pytest.mark.parametrize("offset,size,chunk", [(0, 40_000, 4096), (10, 39_990, 5), (4095, 20_000, 8192),
                                               (7, 1, 1 << 20), (12_288, 27_712, 3 * PAGE)])
def test_the_mapped_copy_reads_the_right_bytes(tmp_path, offset, size, chunk):
    """The registered path's mapping and chunk arithmetic, with a CPU target (plain copies)."""
    data = os.urandom(40_000)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    dest = torch.empty(size, dtype=torch.uint8)
    with open_fd(path) as fd:
        assert copy_registered(fd, offset, dest, chunk) == size
    assert bytes(dest.numpy()) == data[offset:offset + size]


def test_all_cached_follows_the_page_cache(tmp_path):
    path = tmp_path / "blob.bin"
    size = 16 << 20
    path.write_bytes(os.urandom(size))
    with open_fd(path) as fd:
        os.pread(fd, size, 0)
        assert all_cached(fd, 10, size - 10)
        evict([str(path)])
        os.pread(fd, 8 * PAGE, 0)  # and whatever read-ahead adds: far less than 16 MiB
        assert all_cached(fd, 0, 8 * PAGE) and not all_cached(fd, 0, size)
        assert not all_cached(fd, size - PAGE, PAGE)


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("state", ["cached", "evicted", "half cached"])
@pytest.mark.parametrize("register", [True, False])
def test_cuda_copy_of_a_range_is_its_bytes(tmp_path, state, register):
    data = os.urandom(6 << 20)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    if state != "cached":
        evict([str(path)])
    with open_fd(path) as fd:
        if state == "half cached":
            os.pread(fd, 3 << 20, 0)
        dest = torch.empty(len(data) - 1234, dtype=torch.uint8, device="cuda")
        assert copy_range(fd, 1234, dest, 1 << 20, register_cached=register) == dest.numel()
    assert bytes(dest.cpu().numpy()) == data[1234:]


@pytest.mark.cuda
@cuda
def test_cuda_registered_copy_of_a_cached_range(tmp_path):
    """All cached: the whole range goes through registered pages (none is left to staging)."""
    data = os.urandom(5 << 20)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    with open_fd(path) as fd:
        os.pread(fd, len(data), 0)
        dest = torch.empty(len(data) - 77, dtype=torch.uint8, device="cuda")
        assert copy_registered(fd, 77, dest, 1 << 20) == dest.numel()
    assert bytes(dest.cpu().numpy()) == data[77:]
    torch.cuda.synchronize()  # no error left behind by the registrations
