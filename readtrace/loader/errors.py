"""The loader's own errors, typed the way Python callers expect (``load_file`` is a drop-in for
``safetensors.torch.load_file``): a bad file is a ValueError, a missing device a RuntimeError, a file
that cannot be opened the OSError itself. The command line maps them to exit codes (readtrace/cli.py)."""

from __future__ import annotations

import os


class LoaderError(Exception):
    """Base of the loader's errors."""


class CheckpointFormatError(LoaderError, ValueError):
    """A safetensors file that is malformed, truncated or uses a dtype this torch lacks."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{os.fspath(path)}: not a valid safetensors file: {problem}")


class DeviceUnavailableError(LoaderError, RuntimeError):
    """The device asked for is not there (no CUDA GPU)."""
