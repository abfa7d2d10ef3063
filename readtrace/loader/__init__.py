"""The own-fd safetensors loader (``load_file``): header parsing, positioned reads, span splitting.

Runs in whichever process loads: the user's (through the shim) or a library caller's. Standard
library, numpy and torch only.
"""

__all__ = ["load_file"]


def __getattr__(name: str):
    if name == "load_file":  # lazy: the header/fileio modules must not import torch
        from readtrace.loader.loader import load_file

        return load_file
    raise AttributeError(name)
