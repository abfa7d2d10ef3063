"""gguf's GGUFReader: one numpy memmap of the file, 4 threads each touching every page of its tensors
(llama.cpp-style tooling reads GGUF this way)."""

import hashlib
import sys
from concurrent.futures import ThreadPoolExecutor

from _digest import combine
from gguf import GGUFReader

reader = GGUFReader(sys.argv[1])


def digest(tensor) -> tuple[str, bytes]:
    h = hashlib.sha256(f"{tensor.name}|{tensor.tensor_type.name}|{tuple(tensor.shape)}|".encode())
    h.update(tensor.data.tobytes())  # every page of the tensor, faulted through the mapping
    return tensor.name, h.digest()


with ThreadPoolExecutor(4) as pool:
    combine("gguf_memmap", dict(pool.map(digest, reader.tensors)))
