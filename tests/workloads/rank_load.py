"""One rank of a torchrun job (gloo on CPU): join the job, load the checkpoint, agree on its digest.

Usage (under torchrun): rank_load.py CHECKPOINT [--shard]. Prints ``rank R/W: N tensors, digest D``.
Every rank loads the whole file (load_file) and all ranks must agree on the digest; with ``--shard``
each rank loads only its contiguous share of the tensors (safe_open, names in file order split in
``WORLD_SIZE`` blocks): a rank-sharded load, each rank reading different byte spans.
"""

import hashlib
import sys

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import load_file


def _shard(path: str, rank: int, world: int) -> dict:
    with safe_open(path, framework="pt") as f:
        names = sorted(f.keys())
        mine = names[rank * len(names) // world:(rank + 1) * len(names) // world]
        return {name: f.get_tensor(name) for name in mine}


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = "--shard" in sys.argv[2:]
    tensors = _shard(sys.argv[1], rank, world) if shard else load_file(sys.argv[1])
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    mine = torch.tensor(list(digest.digest()[:8]), dtype=torch.int64)
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    same = all(torch.equal(g, mine) for g in gathered)
    print(f"rank {rank}/{world}: {len(tensors)} tensors, digest {digest.hexdigest()[:16]}, "
          + (f"shard of {len(tensors)}" if shard else f"same on every rank: {same}"), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same or shard else 1


if __name__ == "__main__":
    sys.exit(main())
