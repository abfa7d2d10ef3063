"""The loader's pool of staging buffers hands each buffer to one user at a time (CPU-testable part of
the CUDA path: the pool is the same for pinned and pageable buffers)."""

import torch

from readtrace.loader.devicecopy import StagingPool


def test_take_hands_out_distinct_buffers_and_keeps_the_rest():
    pool = StagingPool()
    buffers = [torch.zeros(16, dtype=torch.uint8) for _ in range(3)]  # equal contents on purpose
    pool.give(buffers)
    taken = pool.take(2, 8, pinned=False)
    assert [id(b) for b in taken] == [id(buffers[0]), id(buffers[1])]
    again = pool.take(2, 8, pinned=False)
    assert id(again[0]) == id(buffers[2])  # the one left in the pool
    assert id(again[1]) not in {id(b) for b in buffers}  # a new one: nothing is handed out twice


def test_take_allocates_when_nothing_fits():
    pool = StagingPool()
    pool.give([torch.zeros(4, dtype=torch.uint8)])
    (big,) = pool.take(1, 64, pinned=False)
    assert big.numel() == 64


def test_take_skips_buffers_that_do_not_fit():
    pool = StagingPool()
    small, big = torch.zeros(1, dtype=torch.uint8), torch.zeros(16, dtype=torch.uint8)
    pool.give([small, big])
    (got,) = pool.take(1, 8, pinned=False)
    assert got is big
    (again,) = pool.take(1, 1, pinned=False)
    assert again is small


def test_digest_of_a_temporary_copy_is_of_the_right_bytes():
    """tensor_digest hashes a copy when the tensor is not contiguous (and, on CUDA, always): the copy
    must stay alive while it is hashed (seen on the H200: small tensors hashed freed memory)."""
    import hashlib

    from readtrace.inject.manifest import tensor_digest

    for n in range(1, 40):
        t = torch.arange(n * 3, dtype=torch.int16).reshape(n, 3).t()  # not contiguous: digest copies
        assert tensor_digest(t) == hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
