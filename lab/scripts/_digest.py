"""One sha256 over a load's tensors (name, dtype, shape, bytes, in name order), appended to a file."""

import hashlib
import json
import os
import sys


def tensor_digest(name, tensor) -> bytes:
    import torch  # here: the numpy and raw loaders do not pay torch's import

    t = tensor.detach().cpu().contiguous()
    h = hashlib.sha256(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # raw bytes: bf16 has no numpy dtype
    return h.digest()


def combine(loader: str, digests: dict[str, bytes], out: str | None = None) -> None:
    """Append ``{"loader", "tensors", "digest", "pid"}`` to ``out`` (default: argv[2])."""
    total = hashlib.sha256(b"".join(digests[k] for k in sorted(digests))).hexdigest()
    line = json.dumps({"loader": loader, "tensors": len(digests), "digest": total, "pid": os.getpid()})
    with open(out or sys.argv[2], "a") as f:
        f.write(line + "\n")
    print(line)


def report(loader: str, tensors: dict) -> None:
    combine(loader, {name: tensor_digest(name, t) for name, t in tensors.items()})
