"""Copies of a file's bytes to the GPU: a range all in the page cache partly straight from its
registered pages, partly through pinned staging buffers. The cutting, mapping and sharing of units run
on real files on any machine (a CPU target takes the same loops); the CUDA cases compare with
safetensors on the device."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file as reference_load
from safetensors.torch import save_file

from readtrace.loader import devicecopy
from readtrace.loader.devicecopy import PAGE, copy_cached, register_chunks
from readtrace.loader.fileio import open_fd, range_cached
from readtrace.loader.loader import load_file
from readtrace.pagecache.evict import evict

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@settings(max_examples=200, deadline=None)
@given(offset=st.integers(0, 5 * PAGE), size=st.integers(1, 9 * PAGE), chunk=st.integers(1, 3 * PAGE))
def test_register_chunks_cover_the_range_and_never_share_a_page(offset, size, chunk):
    chunks = register_chunks(offset, size, chunk)
    assert chunks[0][0] == offset and chunks[-1][1] == offset + size
    assert all(a < b for a, b in chunks) and all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:], strict=False))
    pages = [range(a // PAGE, (b - 1) // PAGE + 1) for a, b in chunks]
    assert all(p.stop <= q.start for p, q in zip(pages, pages[1:], strict=False))  # each registers its own


@pytest.mark.parametrize("offset,size,unit,chunk,readers", [
    (0, 40_000, PAGE, 4096, 1), (10, 39_990, 3 * PAGE, 5, 3), (4095, 20_000, 2 * PAGE, 8192, 2),
    (7, 1, 1 << 20, 1 << 20, 4), (12_288, 27_712, PAGE, 3 * PAGE, 8)])
def test_the_cached_copy_reads_the_right_bytes(tmp_path, offset, size, unit, chunk, readers):
    """Readers sharing units, one from the mapping and the rest through staging, with a CPU target."""
    data = os.urandom(40_000)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    dest = torch.empty(size, dtype=torch.uint8)
    assert copy_cached(path, offset, dest, readers=readers, chunk_bytes=chunk, pinned=False,
                       unit_bytes=unit) == size
    assert bytes(dest.numpy()) == data[offset:offset + size]


def test_a_cached_copy_of_a_file_that_ended_early_is_short(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(os.urandom(5 * PAGE))
    dest = torch.empty(8 * PAGE, dtype=torch.uint8)
    assert copy_cached(path, 0, dest, readers=2, chunk_bytes=PAGE, pinned=False, unit_bytes=PAGE,
                       registering=0) == 5 * PAGE


def test_range_cached_follows_the_page_cache(tmp_path):
    path = tmp_path / "blob.bin"
    size = 16 << 20
    path.write_bytes(os.urandom(size))
    with open_fd(path) as fd:
        os.pread(fd, size, 0)
        assert range_cached(fd, 10, size - 10)
        evict([str(path)])
        os.pread(fd, 8 * PAGE, 0)  # and whatever read-ahead adds: far less than 16 MiB
        assert range_cached(fd, 0, 8 * PAGE) and not range_cached(fd, 0, size)
        assert not range_cached(fd, size - PAGE, PAGE)


def _checkpoint(tmp_path):
    gen = torch.Generator().manual_seed(1)
    tensors = {f"t{i}": torch.rand(1 << 18, generator=gen).to((torch.float32, torch.bfloat16)[i % 2])
               for i in range(12)}
    tensors["odd"] = torch.arange(7, dtype=torch.int8)  # leaves what follows unaligned
    tensors["z"] = torch.randn(3, 5)
    path = tmp_path / "m.safetensors"
    save_file(tensors, path)
    return path


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("state", ["cached", "evicted", "half cached"])
@pytest.mark.parametrize("threads", [1, 3])
def test_cuda_load_in_every_cache_state_equals_safetensors(tmp_path, state, threads):
    path = _checkpoint(tmp_path)
    want = reference_load(path, device="cuda")
    if state != "cached":
        evict([str(path)])
    if state == "half cached":
        with open_fd(path) as fd:
            os.pread(fd, os.path.getsize(path) // 2, 0)
    got = load_file(path, "cuda", threads=threads, chunk_bytes=1 << 20)
    assert sorted(got) == sorted(want)
    assert all(torch.equal(got[n].view(torch.uint8), want[n].view(torch.uint8)) for n in want)


@pytest.mark.cuda
@cuda
def test_cuda_cached_copy_registers_and_unregisters(tmp_path):
    data = os.urandom(5 << 20)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    dest = torch.empty(len(data) - 77, dtype=torch.uint8, device="cuda")
    assert copy_cached(path, 77, dest, readers=3, chunk_bytes=1 << 20, unit_bytes=1 << 20) == dest.numel()
    devicecopy.wait_unpinned()
    assert bytes(dest.cpu().numpy()) == data[77:]
    torch.cuda.synchronize()  # no error left behind


@pytest.mark.cuda
@cuda
def test_cuda_load_survives_a_refused_registration(tmp_path, monkeypatch):
    """The driver refuses an invalid flag (a real refusal): the reader stages instead, and nothing of
    the error reaches the caller's next CUDA call."""
    path = _checkpoint(tmp_path)
    want = reference_load(path, device="cuda")
    monkeypatch.setattr(devicecopy, "HOST_REGISTER_FLAGS", 0x4000)
    got = load_file(path, "cuda", threads=2, chunk_bytes=1 << 20)
    assert all(torch.equal(got[n].view(torch.uint8), want[n].view(torch.uint8)) for n in want)
    (torch.ones(4, device="cuda") * 2).sum().item()
