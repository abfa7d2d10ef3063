"""Import mfusepy bound to libfuse3. mfusepy prefers libfuse 2 when both are installed (bindfs pulls it
in), and libfuse 2 caps READ requests at 128 KiB and has no max_read negotiation."""

import os

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")

import mfusepy  # noqa: E402

if mfusepy.fuse_version_major != 3:
    raise ImportError(f"readtrace.simfs needs libfuse3, mfusepy loaded libfuse {mfusepy.fuse_version_major}")

__all__ = ["mfusepy"]
