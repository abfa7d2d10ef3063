"""The real loaders of the compatibility suite: which script, which checkpoint, what it reads, and
whether several tasks read through ONE open file (the pattern a per-handle file system punishes)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPTS = Path(__file__).with_name("scripts")


@dataclass(frozen=True)
class Loader:
    name: str
    script: str  # under lab/scripts/
    checkpoint: str  # a kind of lab.checkpoints
    target: str  # what the script is given, relative to the checkpoint directory ("" = the directory)
    shares_handle: bool  # several tasks read through one open file (threads on a mapping, forked fd)
    shim_sees: bool  # loads through safetensors or torch.load, so fix --compare's shim sees its tensors

    def command(self, checkpoint_dir: str | Path, digests: str | Path) -> list[str]:
        target = Path(checkpoint_dir) / self.target if self.target else Path(checkpoint_dir)
        return [sys.executable, str(SCRIPTS / self.script), str(target), str(digests)]


LOADERS = {loader.name: loader for loader in (
    Loader("load_file", "load_file.py", "safetensors", "model.safetensors", False, True),
    Loader("safe_open_threads", "safe_open_threads.py", "safetensors", "model.safetensors", True, True),
    Loader("transformers", "transformers_load.py", "transformers", "", False, True),
    Loader("transformers_sharded", "transformers_load.py", "transformers-sharded", "", False, True),
    Loader("diffusers", "diffusers_load.py", "diffusers", "", False, True),
    Loader("torch_load_mmap", "torch_load_mmap.py", "pt", "model.pt", False, True),
    Loader("fork_pool", "fork_pool.py", "safetensors", "model.safetensors", True, False),
    Loader("gguf_memmap", "gguf_memmap.py", "gguf", "model.gguf", True, False),
)}
