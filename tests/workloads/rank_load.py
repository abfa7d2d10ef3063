"""One rank of a torchrun job (gloo on CPU): join the job, load the checkpoint, agree on its digest.

Usage (under torchrun): rank_load.py CHECKPOINT. Prints ``rank R/W: N tensors, digest D``.
"""

import hashlib
import sys

import torch
import torch.distributed as dist
from safetensors.torch import load_file


def main() -> int:
    dist.init_process_group("gloo")
    tensors = load_file(sys.argv[1])
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    mine = torch.tensor(list(digest.digest()[:8]), dtype=torch.int64)
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    same = all(torch.equal(g, mine) for g in gathered)
    print(f"rank {dist.get_rank()}/{dist.get_world_size()}: {len(tensors)} tensors, digest "
          f"{digest.hexdigest()[:16]}, same on every rank: {same}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
