"""The own-fd safetensors loader (``load_file``): header parsing, positioned reads, span splitting.

Runs in whichever process loads: the user's (through the shim) or a library caller's. Standard
library, numpy and torch only.
"""

from readtrace.lazy import lazy_exports

__all__ = ["load_file"]
__getattr__ = lazy_exports(__name__, {"load_file": ("loader", "load_file")})  # header/fileio: no torch
