"""A fork pool of 4 workers doing raw preads of their share of the tensors on the parent's fd
(one open file description, one FUSE handle, shared by every worker), each its own range in order."""

import json
import os
import struct
import sys
from multiprocessing import get_context

import torch
from _digest import combine, tensor_digest

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
          "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool, "F64": torch.float64}
FD = os.open(sys.argv[1], os.O_RDONLY)  # opened before the fork: every worker inherits it
(HEADER_LEN,) = struct.unpack("<Q", os.pread(FD, 8, 0))
HEADER = {k: v for k, v in json.loads(os.pread(FD, HEADER_LEN, 8)).items() if k != "__metadata__"}


def wait_for_all(barrier):
    """Pool initializer: every worker starts reading at once (on a busy machine the first forked worker
    could otherwise finish its share before the last one starts, and no read would interleave)."""
    barrier.wait()


def load(names):
    out = {}
    for name in names:
        info = HEADER[name]
        lo, hi = info["data_offsets"]
        data = bytearray(os.pread(FD, hi - lo, 8 + HEADER_LEN + lo)) if hi > lo else bytearray()
        tensor = torch.frombuffer(data, dtype=DTYPES[info["dtype"]]) if data else torch.empty(0, dtype=DTYPES[info["dtype"]])
        out[name] = tensor_digest(name, tensor.reshape(info["shape"]))
    return out


if __name__ == "__main__":
    names = sorted(HEADER, key=lambda n: HEADER[n]["data_offsets"][0])
    # contiguous shares: each worker reads its range in order; their reads interleave on the shared fd
    step = -(-len(names) // 4)
    shares = [names[i:i + step] for i in range(0, len(names), step)]
    ctx = get_context("fork")
    with ctx.Pool(4, initializer=wait_for_all, initargs=(ctx.Barrier(4),)) as pool:
        digests = {k: v for part in pool.map(load, shares) for k, v in part.items()}
    combine("fork_pool", digests)
