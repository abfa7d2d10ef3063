"""Which files carry a load's data (a checkpoint) and which are code or system files, by name: one
rule for `fix --compare` (which files to evict and prefetch) and `record --until-idle` (when the load
is done)."""

from __future__ import annotations

import re

SYSTEM_PREFIXES = ("/proc/", "/sys/", "/dev/", "/usr/", "/lib", "/etc/", "/bin/", "/sbin/", "/run/")
# Files that carry a load's data bytes by their name (a DCP directory's shards are *.distcp).
DATA_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".distcp", ".npy", ".npz", ".ckpt")
# A file of no data suffix is a checkpoint file by volume: at least this many bytes read.
VOLUME_MIN_BYTES = 1 << 20
_CODE_NAME = re.compile(r"\.(so(\.\d+)*|py|pyc|pyo|pyi|pyd|pyx|a|o)$")
_CODE_DIR = re.compile(r"(^|/)(site-packages|dist-packages|__pycache__|lib(64)?/python\d+(\.\d+)?)(/|$)")
ELF_MAGIC = b"\x7fELF"


def code_by_name(path: str) -> bool:
    """A shared object, Python code, or a file of an installed Python environment (its .pth files too)."""
    return bool(_CODE_NAME.search(path) or _CODE_DIR.search(path))


def is_code(path: str) -> bool:
    """An executable, a shared object, Python code, or a file of an installed Python environment."""
    if code_by_name(path):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return True  # unreadable: not one we can evict either


def maybe_data(path: str | None, size: int) -> bool:
    """Could reading this file be loading a checkpoint? Neither a system file nor code by its name (the
    file is not opened: some FUSE clients drop its cache on every open), and a data suffix or
    VOLUME_MIN_BYTES or more (what `fix` later decides by the bytes actually read)."""
    if not path or path.startswith(SYSTEM_PREFIXES) or code_by_name(path):
        return False
    return path.endswith(DATA_SUFFIXES) or size >= VOLUME_MIN_BYTES
